"""The encoding interface and its fairseq glue: registry, SAPE/LAPE tables, PEAttention. (What a bad flag is told:
tests/test_cli_output.py.)"""
import argparse
import math
import sys
import types

import pytest
import torch
from fairseq.modules import MultiheadAttention, SinusoidalPositionalEmbedding
from fairseq.modules.positional_embedding import PositionalEmbedding

import pe_testing
from pe_testing import build_model, call_main, run

from pe_plugin.encodings import PE_REGISTRY, config_fields
from pe_plugin.encoding_parts.base import Dims, PositionalEncoding, Positions
from pe_plugin.encodings.learned import LearnedPositionalEncoding
from pe_plugin.encodings.sinusoidal import SinusoidalPositionalEncoding
from pe_plugin.models.architectures import architecture_names
from pe_plugin.naming import CLASS_OF_SUFFIX
from pe_plugin.modules.pe_attention import PEAttention


# ---- registry and architectures ----------------------------------------------------------------------
def test_registry_is_the_list_of_architectures_and_choices():
    from fairseq.models import ARCH_MODEL_REGISTRY

    names = architecture_names()
    assert len(names) == len(PE_REGISTRY) * len(CLASS_OF_SUFFIX)
    for pe in PE_REGISTRY:
        for suffix in ("tiny", "wmt_en_de", "wmt_en_de_big", "wmt_en_fr_big"):
            assert ARCH_MODEL_REGISTRY[f"transformer_{pe}_{suffix}"].__name__ == "PETransformerModel"
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    ARCH_MODEL_REGISTRY["pe_transformer"].add_args(parser)
    pe_action = next(a for a in parser._actions if a.dest == "pe")
    assert sorted(pe_action.choices) == sorted(PE_REGISTRY)


def test_every_encoding_declares_its_interface():
    for name, cls in PE_REGISTRY.items():
        assert cls.name == name and cls.level in ("none", "embedding", "attention")
        assert cls.level != "embedding" or cls.has_embedding_hook()
        assert cls.level != "attention" or cls.has_attention_hooks()
        for flag in config_fields(cls):  # flags carry a method prefix fairseq will not route elsewhere
            assert not flag.startswith(("encoder_", "decoder_")), (name, flag)


def test_a_flag_shared_by_encodings_means_the_same_for_each():
    seen = {}
    for name, cls in PE_REGISTRY.items():
        for f in cls.config_cls.__dataclass_fields__.values() if cls.config_cls else []:
            spec = (f.type, f.default, f.metadata.get("help"))
            assert seen.setdefault(f.name, (spec, name))[0] == spec, f"--{f.name}: {name} vs {seen[f.name][1]}"


def test_architecture_defaults_yield_to_flags(data_bin):
    _, model, args = build_model(data_bin, "transformer_sape_tiny", ["--encoder-layers", "3"])
    assert args.encoder_layers == 3 and len(model.encoder.layers) == 3
    assert args.decoder_layers == 2 and args.encoder_embed_dim == 64  # from fairseq's transformer_tiny


@pytest.mark.parametrize("arch, extra, expected", [
    ("transformer_sape_tiny", [], "pe:sape|side:both"),
    ("transformer_nope_tiny", [], "pe:nope|side:both"),
    # the released PosNet configuration: a decoder without any position signal must say so
    ("transformer_posnet_embed_tiny", ["--posnet-sides", "encoder"], "pe:posnet_embed|side:encoder|"),
])
def test_signature_names_the_sides_that_have_the_encoding(data_bin, arch, extra, expected):
    from pe_plugin.models.validation import pe_signature

    _, model, _ = build_model(data_bin, arch, extra)
    sig = pe_signature(model)
    assert sig.startswith(expected), sig
    assert ("side:both" in sig) == (type(model.encoder.pe) is type(model.decoder.pe))
    if type(model.encoder.pe) is not type(model.decoder.pe):
        assert sig.endswith(" ; pe:nope|side:decoder"), sig


# ---- embedding-level encodings -----------------------------------------------------------------------
def _dims(side="encoder", max_positions=16, dim=8):
    return Dims(embed_dim=dim, num_heads=2, num_layers=2, max_positions=max_positions, padding_idx=1, side=side)


TOKENS = torch.tensor([[1, 1, 5, 6, 7], [4, 5, 6, 7, 8], [9, 9, 1, 1, 1]])  # left, none, right padding


@pytest.mark.parametrize("dim", [8, 9])
def test_sape_equals_fairseq_sinusoidal_embedding(dim):
    pe = SinusoidalPositionalEncoding(None, _dims(dim=dim))
    pos = Positions.for_tokens(TOKENS, padding_idx=1)
    ours = pe.embed(torch.zeros(3, 5, dim), pos)
    ref = SinusoidalPositionalEmbedding(dim, padding_idx=1, init_size=40)(TOKENS)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)


def test_sape_grows_beyond_its_initial_table():
    pe = SinusoidalPositionalEncoding(None, _dims(max_positions=4))
    tokens = torch.full((1, 30), 7)
    ref = SinusoidalPositionalEmbedding(8, padding_idx=1, init_size=40)(tokens)
    torch.testing.assert_close(pe.embed(torch.zeros(1, 30, 8), Positions.for_tokens(tokens, 1)), ref, atol=1e-6, rtol=0)


def test_lape_matches_fairseq_learned_embedding_and_zeroes_pads():
    torch.manual_seed(0)
    ref = PositionalEmbedding(16, 8, padding_idx=1, learned=True)
    torch.manual_seed(0)
    pe = LearnedPositionalEncoding(None, _dims())
    torch.testing.assert_close(pe.table.weight, ref.weight)  # same init, same random stream
    out = pe.embed(torch.zeros(3, 5, 8), Positions.for_tokens(TOKENS, 1))
    torch.testing.assert_close(out, ref(TOKENS))
    assert out[0, :2].abs().sum() == 0 and out[2, 2:].abs().sum() == 0


def test_lape_rejects_too_long_input_with_the_flag_to_raise():
    pe = LearnedPositionalEncoding(None, _dims(max_positions=4))
    with pytest.raises(ValueError, match="length 5 exceeds the 4 positions.*--max-source-positions"):
        pe.embed(torch.zeros(1, 5, 8), Positions.for_tokens(torch.full((1, 5), 7), 1))


def test_positions_come_from_the_padding_mask():
    pos = Positions.for_tokens(TOKENS, padding_idx=1)
    assert pos.q.tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 1, 0, 0, 0]]
    assert Positions.for_tokens(TOKENS[1:2], 1).q.shape == (1, 5)
    assert Positions.for_tokens(TOKENS, 1, last_only=True).q.tolist() == [[2], [4], [0]]
    rel = Positions(torch.arange(2, 5).unsqueeze(0), torch.arange(5).unsqueeze(0)).rel
    assert rel.tolist() == [[j - i for j in range(5)] for i in range(2, 5)]


# ---- PEAttention -------------------------------------------------------------------------------------
class ToyBias(PositionalEncoding):
    """Test-only encoding with every attention hook: an ALiBi-like bias, a value shift, a value bias."""

    name, level = "toy", "attention"

    def score_bias(self, q, pos, layer):
        return -0.3 * pos.rel.abs().float()[None, None]  # (1,1,Tq,Tk)

    def transform_values(self, v, pos, layer):
        return v + 0.01 * pos.q.view(pos.q.size(0), 1, -1, 1).float()

    def value_bias(self, probs, pos, layer):
        return 0.5 * probs.sum(-1, keepdim=True)  # (B,H,Tq,1)


def _naive(mha, x, kpm, causal, pe):
    """Independent reference: the equations of pe_attention's docstring, written as loops over heads."""
    T, B, C = x.shape
    H, d = mha.num_heads, mha.head_dim
    q = mha.q_proj(x) * d ** -0.5
    k, v = mha.k_proj(x), mha.v_proj(x)
    nonpad = ~kpm
    pos_abs = (nonpad.long().cumsum(1) - 1).clamp_min(0) * nonpad.long()
    out = torch.zeros(T, B, C)
    for b in range(B):
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            vv = v[:, b, sl] + (0.01 * pos_abs[b].float()[:, None] if pe else 0)
            e = q[:, b, sl] @ k[:, b, sl].T
            if pe:
                e = e - 0.3 * (torch.arange(T)[None] - torch.arange(T)[:, None]).abs().float()
            e = e.masked_fill(kpm[b][None], float("-inf"))
            if causal:
                e = e.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            a = e.softmax(-1)
            out[:, b, sl] = a @ vv + (0.5 * a.sum(-1, keepdim=True) if pe else 0)
    return mha.out_proj(out)


@pytest.mark.parametrize("causal", [False, True])
def test_pe_attention_without_contribution_equals_fairseq(causal):
    torch.manual_seed(0)
    stock = MultiheadAttention(16, 4, self_attention=True)
    ours = PEAttention(16, 4, PositionalEncoding(None, _dims(dim=16)), layer=0)
    ours.load_state_dict(stock.state_dict())
    x = torch.randn(6, 3, 16)
    kpm = torch.zeros(3, 6, dtype=torch.bool)
    kpm[0, :2] = True  # left padding
    mask = torch.triu(torch.full((6, 6), float("-inf")), 1) if causal else None
    ref, _ = stock(x, x, x, key_padding_mask=None if causal else kpm, attn_mask=mask, need_weights=False)
    out, _ = ours(x, x, x, key_padding_mask=None if causal else kpm, attn_mask=mask, need_weights=False)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_pe_attention_applies_every_hook_in_training_mode(need_weights):
    torch.manual_seed(0)
    ours = PEAttention(16, 4, ToyBias(None, _dims(dim=16)), layer=0).train()
    x = torch.randn(6, 3, 16)
    kpm = torch.zeros(3, 6, dtype=torch.bool)
    kpm[0, :2] = True
    kpm[2, 4:] = True
    out, _ = ours(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
    ref = _naive(ours, x, kpm, causal=False, pe=True)
    real = ~kpm.T.unsqueeze(-1)  # outputs at pad queries are never used
    torch.testing.assert_close(out * real, ref * real, atol=1e-5, rtol=1e-5)


def test_pe_attention_incremental_equals_full_pass():
    torch.manual_seed(0)
    attn = PEAttention(16, 4, ToyBias(None, _dims("decoder", dim=16)), layer=0).eval()
    x = torch.randn(5, 3, 16)
    future = torch.triu(torch.full((5, 5), float("-inf")), 1)
    full, _ = attn(x, x, x, attn_mask=future, need_weights=False)
    order = torch.tensor([2, 0, 0])  # as beam search reorders: rows moved and one duplicated
    # after the reordering row b continues the prefix of row order[b]: the full pass over that spliced input
    spliced = torch.cat([x[:3, order], x[3:]])
    full_reordered, _ = attn(spliced, spliced, spliced, attn_mask=future, need_weights=False)
    state, steps = {}, []
    for t in range(5):
        y, _ = attn(x[t: t + 1], x[t: t + 1], x[t: t + 1], incremental_state=state, need_weights=False)
        steps.append(y)
        if t == 2:  # beam reordering permutes the cache along the batch
            attn.reorder_incremental_state(state, order)
    steps = torch.cat(steps)
    torch.testing.assert_close(steps[:3], full[:3], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(steps[3:], full_reordered[3:], atol=1e-5, rtol=1e-5)
    assert (full_reordered[3:] - full[3:]).abs().max() > 1e-3  # the reordering mattered
    ref = _naive(attn, x, torch.zeros(3, 5, dtype=torch.bool), causal=True, pe=True)
    torch.testing.assert_close(full, ref, atol=1e-5, rtol=1e-5)


# ---- python -m pe_plugin: the flags fairseq's --help cannot show ---------------------------------------
@pytest.mark.parametrize("pe", list(PE_REGISTRY))
def test_listed_flag_values_are_those_the_model_is_built_with(pe, data_bin):
    from pe_plugin.__main__ import architecture_flags

    arch = f"transformer_{pe}_tiny"
    encoding, model_flags = architecture_flags(arch)
    _, model, _ = build_model(data_bin, arch)
    listed = {flag: value for flag, value, _ in encoding + model_flags}
    assert listed["--pe"] == pe and {f for f, _, _ in encoding} == {"--pe"} | {
        "--" + name.replace("_", "-") for name in config_fields(PE_REGISTRY[pe])}
    cfg = model.encoder.pe.cfg
    for name in config_fields(PE_REGISTRY[pe]):  # the encoding's settings, read back from the built module
        assert listed["--" + name.replace("_", "-")] == getattr(cfg, name), name
    assert listed["--encoder-embed-dim"] == model.encoder.embed_tokens.embedding_dim == 64
    assert listed["--encoder-layers"] == len(model.encoder.layers)
    assert listed["--decoder-layers"] == len(model.decoder.layers)
    assert listed["--max-source-positions"] == model.encoder.max_source_positions
    assert listed["--max-target-positions"] == model.decoder.max_target_positions


@pytest.mark.parametrize("pe", list(PE_REGISTRY))
def test_the_embedding_hook_runs_once_per_pass_where_there_is_one(pe, data_bin, monkeypatch):
    """A forward pass calls each side's ``embed`` once where the encoding has that hook (before the dropout, through
    the position slot, or after it), and never where it has none: no positional work on a batch of zeros."""
    import pe_testing

    task, model, _ = build_model(data_bin, f"transformer_{pe}_tiny")
    calls = {"encoder": 0, "decoder": 0}
    for side in calls:
        hook = getattr(model, side).pe

        def counted(x, pos, _real=hook.embed, _side=side):
            calls[_side] += 1
            return _real(x, pos)
        monkeypatch.setattr(hook, "embed", counted)
    sample = pe_testing.batch(task, "train", n=8)
    with torch.no_grad():
        model(**sample["net_input"])
    assert calls == {side: int(getattr(model, side).pe.has_embedding_hook()) for side in calls}


@pytest.mark.slow
def test_module_cli_lists_every_architecture_and_rejects_unknown_ones():
    out = run("pe_plugin", [])
    for name in architecture_names():
        assert name in out.stdout
    from pe_plugin.__main__ import main  # the module's entry point ran above; its answers, in this interpreter

    bad = call_main(main, ["transformer_sinusoid_tiny"], prog="python -m pe_plugin")
    assert bad.returncode == 2 and "'transformer_sinusoid_tiny' is not a pe_plugin architecture" in bad.stderr
    shown = call_main(main, ["transformer_rpe_wmt_en_de_big"], prog="python -m pe_plugin").stdout
    assert "--rpe-max-relative-position 8 " in shown and "--encoder-embed-dim 1024 " in shown  # Shaw: k=8 big


def test_a_name_registers_once_and_never_empty():
    """register_pe refuses a name already in the registry (which would replace an encoding silently) and an
    empty one, and leaves the registry as it was."""
    from pe_plugin.encodings import PE_REGISTRY, register_pe

    before = dict(PE_REGISTRY)
    for name in ("sape", ""):
        cls = type("Impostor", (PositionalEncoding,), {"name": name})
        with pytest.raises(ValueError, match="empty or registered twice"):
            register_pe(cls)
    assert PE_REGISTRY == before


@pytest.mark.parametrize("read_q_first", [False, True])
@pytest.mark.parametrize("b,tq,tk,padded", [(3, 5, 5, True), (1, 4, 4, False), (2, 1, 6, True), (4, 2, 7, False)])
def test_positions_know_their_query_count_before_and_after_reading_q(b, tq, tk, padded, read_q_first):
    """Positions.tq is the number of query positions, whether q has been built yet or not (survivor:
    ``self._q.size(1)`` -> ``size(0)``, the batch); shapes with B != Tq, padded and not."""
    from pe_plugin.encodings import Positions

    mask = torch.ones(b, tk, dtype=torch.bool) if padded else None
    if padded:
        mask[0, 0] = False  # one left pad
    pos = Positions.from_mask(mask, tq, tk, "cpu")
    if read_q_first:
        assert tuple(pos.q.shape) == ((b if padded else 1), tq)
    assert pos.tq == tq


def test_pe_architectures_are_told_from_stock_fairseq_ones():
    """pe_plugin/naming.is_pe_arch: every registered architecture is one, as is any transformer_<pe>_<suffix>
    whose pe has one letter; an empty pe (``transformer__tiny``), fairseq's own transformers and other models'
    names of the same shape (which do not start with ``transformer_``, however long) are not."""
    from pe_plugin.encodings import PE_REGISTRY
    from pe_plugin.naming import CLASS_OF_SUFFIX, arch_name, is_pe_arch

    assert all(is_pe_arch(arch_name(pe, suffix)) for pe in PE_REGISTRY for suffix in CLASS_OF_SUFFIX)
    stock = ["transformer", "transformer_wmt_en_de", "transformer_wmt_en_de_big", "transformer_iwslt_de_en",
             "bart_sape_wmt_en_de", "lstm_sape_wmt_en_de"]
    assert [a for a in stock if is_pe_arch(a)] == []
    # other models' names of the form <model>_<pe>_<suffix>, longer than transformer_x_<suffix>: not ours
    others = ["lightconv_sape_wmt_en_de", "bart_large_posnet_embed_tiny", "lstm_luong_rope_wmt_en_fr_big"]
    assert [a for a in others if is_pe_arch(a)] == []
    # the length boundary: an encoding name of one letter is one, an empty one (two underscores) is not
    for suffix in CLASS_OF_SUFFIX:
        assert is_pe_arch(f"transformer_x_{suffix}") and not is_pe_arch(f"transformer__{suffix}")


def test_the_module_cli_lists_every_encoding_without_an_architecture(capsys):
    """``python -m pe_plugin`` with no architecture lists every encoding of the registry with its architectures
    (survivor: pe_plugin/__main__.py:95's `a.arch is not None` dropped, which refuses the listing; the same check
    in a process of its own is tests/test_interface.py's, in the slow tier)."""
    from pe_plugin.__main__ import main
    from pe_plugin.encodings import PE_REGISTRY
    from pe_plugin.naming import CLASS_OF_SUFFIX, arch_name

    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(arch_name(pe, suffix) in out for pe in PE_REGISTRY for suffix in CLASS_OF_SUFFIX)


# ---- SAPE: the table is grown, never rebuilt for a call it covers ------------------------------------------------
def test_sape_reuses_its_table_for_inputs_it_covers_and_grows_it_once_for_longer_ones():
    """The sinusoid table is built once and grown on demand: a call whose positions it covers reuses it (no sine
    computed, the same buffer), a longer one grows it, and a shorter one afterwards keeps the grown table. The
    rows against the closed form P(p + padding_idx + 1), sines then cosines."""
    pe = pe_testing.make_pe("sape", dim=8, max_positions=8)  # padding_idx 1: rows 0..9

    def closed_form(n):  # rows 2..n+1: positions 0..n-1
        half = 4
        omega = [math.exp(-m * math.log(10000) / (half - 1)) for m in range(half)]
        return torch.tensor([[math.sin((p + 2) * w) for w in omega] + [math.cos((p + 2) * w) for w in omega]
                             for p in range(n)])

    def embed(n):
        with pe_testing.OpLog() as log:
            out = pe.embed(torch.zeros(1, n, 8), Positions.from_mask(None, n, n, "cpu"))
        torch.testing.assert_close(out[0], closed_form(n), rtol=0, atol=1e-4)
        return log.ops["sin"]

    table = pe.table
    assert embed(5) == 0 and embed(8) == 0 and pe.table is table
    assert embed(30) > 0 and pe.table.size(0) >= 32  # grown
    grown = pe.table
    assert embed(3) == 0 and pe.table is grown and grown.size(0) >= 32


# ---- SAPE: the table in float32, as fairseq's ----------------------------------------------------------------
@pytest.mark.parametrize("default", [torch.float64, torch.bfloat16])
def test_sape_table_is_fairseqs_float32_one_whatever_the_default_dtype(default):
    """SAPE's sinusoid table is fairseq's stock ``SinusoidalPositionalEmbedding.get_embedding`` bit for bit (its
    frequencies and angles in float32) also under torch.set_default_dtype(float64 or bfloat16), where the
    encoding is built: an even and an odd width, and the encoding's own table with fairseq's padding row."""
    from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding

    from pe_plugin.encodings.sinusoidal import sinusoid_table

    before = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        pairs = [(sinusoid_table(300, dim), SinusoidalPositionalEmbedding.get_embedding(300, dim)) for dim in (16, 15)]
        pe = pe_testing.make_pe("sape", dim=16, max_positions=40)  # padding_idx 1: rows 0..41
        pairs.append((pe.table, SinusoidalPositionalEmbedding.get_embedding(42, 16, padding_idx=1)))
    finally:
        torch.set_default_dtype(before)
    for got, want in pairs:
        assert got.dtype == want.dtype and got.dtype in (torch.float32, default)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert pairs[0][0].dtype == pairs[2][0].dtype == torch.float32


# ---- python -m pe_plugin: one line per encoding ----------------------------------------------------------------
# the first sentence of each encoding module's docstring, written out: a citation's "et al. 2017" or "Eq. 22/24"
# ends no sentence, a sentence ending inside a wrapped line (KERPLE's) does
FIRST_SENTENCES = {
    "lape": "LAPE: learned absolute positions (Gehring et al. 2017; fairseq ``--encoder/decoder-learned-pos``).",
    "posnet_embed": "PosNet-Embed: weight concatenation as positional kernels on the embeddings (Zhang et al., ACL "
                    "2023, Eq. 22/24).",
    "kerple": "KERPLE: kernelized relative positional embedding, logarithmic variant (Chi et al., NeurIPS 2022), in "
              "self-attention only.",
    "t5": "T5: a bucketed scalar bias per head on the attention logits (Raffel et al., 2020).",
}


def test_the_module_cli_describes_each_encoding_by_its_modules_first_sentence(capsys):
    """``python -m pe_plugin`` lists each encoding with the first sentence of its module's docstring (one line,
    wrapped lines joined), not its bare name; an encoding class whose module has no docstring is described by its
    name."""
    from pe_plugin.__main__ import describe, main

    for name, sentence in FIRST_SENTENCES.items():
        assert describe(PE_REGISTRY[name]) == sentence
    assert main([]) == 0
    out = capsys.readouterr().out.splitlines()
    for name, sentence in FIRST_SENTENCES.items():
        cls = PE_REGISTRY[name]
        assert f"{name:13s} {cls.level:9s} {sentence}" in out
    bare = types.ModuleType("pe_plugin_test_bare_encoding")  # no docstring
    cls = type("Bare", (), {"__module__": bare.__name__, "name": "bare"})
    sys.modules[bare.__name__] = bare
    try:
        assert describe(cls) == "bare"
    finally:
        del sys.modules[bare.__name__]


# ---- Positions: j - i computed once a call ---------------------------------------------------------------------
def test_positions_compute_the_relative_matrix_once_and_reuse_it():
    """``Positions.rel`` (Tq, Tk) is computed on its first read and every later read hands back the same tensor
    without dispatching an op: the per-pass context gives one ``Positions`` to every layer (AT5 in training and
    the reference attention build their bias per layer from it). Its values: the column difference j - i of the
    last Tq of Tk columns for positions made from a padding mask (left pads included), k - q of the first row for
    positions given as values."""
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, :2] = False  # two left pads
    columns = torch.tensor([[c - r for c in range(5)] for r in range(2, 5)])  # queries: the last 3 columns
    q, k = torch.tensor([[4, 6], [0, 1]]), torch.tensor([[1, 2, 7], [0, 0, 0]])
    given = torch.tensor([[1 - 4, 2 - 4, 7 - 4], [1 - 6, 2 - 6, 7 - 6]])
    cases = [(Positions.from_mask(mask, 3, 5, "cpu"), columns), (Positions.from_mask(None, 3, 5, "cpu"), columns),
             (Positions(q, k), given)]
    for pos, want in cases:
        first = pos.rel
        assert torch.equal(first, want)
        with pe_testing.OpLog() as log:
            again = [pos.rel for _ in range(3)]
        assert sum(log.ops.values()) == 0 and all(r is first for r in again)


# ---- the registry: the method table's order --------------------------------------------------------------------
def test_the_registry_lists_the_encodings_in_the_method_tables_order():
    """PE_REGISTRY, and so every list derived from it (the README's and the reports' method tables, the --pe
    choices, python -m pe_plugin), runs in each encoding's ``order``: no encoding, the absolute ones, then the
    relative ones, PosNet and RoPE, ALiBi and KERPLE, not alphabetically. The reference is the README's method
    table (written by hand); an encoding added since, not in it yet, may stand anywhere its ``order`` puts it."""
    from pe_plugin import encodings
    from pe_documented import readme_methods

    want = readme_methods()
    assert len(want) >= 11 and [pe for pe in PE_REGISTRY if pe in want] == want
    before = list(PE_REGISTRY)
    encodings._import_all()  # the registration pass again: idempotent, it registers nothing twice and keeps the order
    assert list(PE_REGISTRY) == before
    orders = [cls.order for cls in PE_REGISTRY.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)




@pytest.mark.parametrize("flag", ["static_kv", "before_softmax"])
def test_pe_attention_refuses_each_call_it_does_not_implement(flag):
    """PEAttention is self-attention with its own softmax: fairseq's static_kv (cross-attention's cached keys) and
    before_softmax (the raw logits) are each refused, not silently ignored."""
    attn = PEAttention(16, 4, ToyBias(None, _dims(dim=16)), layer=0)
    x = torch.randn(5, 2, 16)
    with pytest.raises(NotImplementedError, match="self-attention only"):
        attn(x, x, x, **{flag: True})


def test_pe_attention_returns_per_head_weights_when_asked_for_them_alone():
    """need_head_weights=True (fairseq's alignment and analysis calls) returns the (H,B,Tq,Tk) probabilities even
    with need_weights=False, as fairseq's MultiheadAttention does; their mean over heads is what need_weights
    alone returns, and each row is the softmax of the naive reference's logits (sums to 1, zero at pads)."""
    torch.manual_seed(0)
    attn = PEAttention(16, 4, ToyBias(None, _dims(dim=16)), layer=0).eval()
    x = torch.randn(6, 3, 16)
    kpm = torch.zeros(3, 6, dtype=torch.bool)
    kpm[0, :2] = True
    _, heads = attn(x, x, x, key_padding_mask=kpm, need_weights=False, need_head_weights=True)
    _, mean = attn(x, x, x, key_padding_mask=kpm, need_weights=True)
    _, none = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert none is None
    assert heads is not None and heads.shape == (4, 3, 6, 6)
    torch.testing.assert_close(heads.mean(0), mean)
    torch.testing.assert_close(heads.sum(-1), torch.ones(4, 3, 6))
    assert heads[:, 0, :, :2].abs().max() == 0
