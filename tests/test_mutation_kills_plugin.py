"""Behaviours of pe_plugin's encodings, attention and hub that a one-line slip (a limit off by one, a condition
dropped from a guard, a dtype cast left out) changes while the encodings' value tests still pass. Each test has an
independent reference: closed-form math, fairseq's stock MultiheadAttention, PyTorch's own
scaled_dot_product_attention, a float64 computation, or the same encoding with its tables already in the compute
dtype."""
import copy
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F

import pe_testing
from test_relative import hf_bucket  # T5's bucket of one distance, as HF computes it
from pe_plugin.encoding_parts.base import Dims, Positions
from pe_plugin.encodings import PE_REGISTRY

POSNETS = ["posnet_embed", "posnet_attn"]


# ---- PosNet: the cap on L_max and what the two sides share ---------------------------------------------------
@pytest.mark.parametrize("name", POSNETS)
def test_posnet_max_positions_takes_one_kernel_and_refuses_none(name):
    """--posnet-max-positions 1 is the smallest cap: L_max = 1, a one-token input is encoded and a two-token one
    refused; 0 is refused when the encoding is built."""
    pe = pe_testing.make_pe(name, max_positions=16, posnet_max_positions=1)
    assert pe.max_positions == 1 and pe.kernels["phi"].size(-3) == 1
    pe.check_length(Positions.from_mask(None, 1, 1, "cpu"))
    with pytest.raises(ValueError, match="of length 2 exceeds the 1 positions"):
        pe.check_length(Positions.from_mask(None, 2, 2, "cpu"))
    if name == "posnet_embed":  # x + ReLU(x W1 phi_0) W2 at the one position, in float64
        pe = pe.double()
        x = torch.randn(3, 1, pe.dims.embed_dim, dtype=torch.float64)
        k = pe.kernels
        want = x + F.relu(x @ k["w1"] @ k["phi"][0]) @ k["w2"]
        torch.testing.assert_close(pe.embed(x, Positions.from_mask(None, 1, 1, "cpu")), want)
    with pytest.raises(ValueError, match=r"--posnet-max-positions must be at least 1 \(got 0\)"):
        pe_testing.make_pe(name, max_positions=16, posnet_max_positions=0)


@pytest.mark.parametrize("share", ["enc-dec", "none"])
@pytest.mark.parametrize("name", POSNETS)
def test_posnet_hands_the_other_side_its_kernels_only_when_shared(name, share):
    """``build``'s per-model dict holds the modules the encoder and the decoder share: with --posnet-share
    enc-dec the one kernel module (the decoder's is the encoder's), with none nothing (each side owns its own)."""
    cls = PE_REGISTRY[name]
    cfg, shared = cls.config_cls(posnet_share=share), {}
    enc = cls.build(cfg, Dims(16, 2, 2, 32, 1, "encoder", 32), shared)
    dec = cls.build(cfg, Dims(16, 2, 2, 32, 1, "decoder", 32), shared)
    if share == "enc-dec":
        assert dec.kernels is enc.kernels and list(shared.values()) == [enc.kernels]
    else:
        assert shared == {} and dec.kernels is not enc.kernels


@pytest.mark.parametrize("per_layer,share,dec_layers,ok", [
    (True, "enc-dec", 2, True),  # the same layer count: kernel i serves layer i on both sides
    (True, "enc-dec", 1, False),  # the decoder would take the encoder's first layer's kernels
    (True, "enc-dec", 3, False),  # ... or index a kernel that does not exist
    (False, "enc-dec", 3, True),  # one kernel for every layer: any count
    (True, "none", 3, True),  # each side its own per-layer kernels
])
def test_posnet_attn_shares_per_layer_kernels_only_between_stacks_of_one_depth(per_layer, share, dec_layers, ok):
    """PosNet-Attn with --posnet-attn-per-layer and kernels shared by the encoder (2 layers) and the decoder:
    refused, naming --posnet-share none, when the decoder's layer count differs; the other settings build."""
    cls = PE_REGISTRY["posnet_attn"]
    cfg, shared = cls.config_cls(posnet_attn_per_layer=per_layer, posnet_share=share), {}
    enc = cls.build(cfg, Dims(16, 2, 2, 32, 1, "encoder", 32), shared)
    build_decoder = lambda: cls.build(cfg, Dims(16, 2, dec_layers, 32, 1, "decoder", 32), shared)  # noqa: E731
    if ok:
        dec = build_decoder()
        assert dec.kernels["phi"].size(0) in (1, dec_layers)
        assert (dec.kernels is enc.kernels) == (share == "enc-dec")
    else:
        with pytest.raises(ValueError, match=f"do not fit the decoder's {dec_layers} layers .* --posnet-share none"):
            build_decoder()


# ---- RoPE: the angles in the compute dtype ----------------------------------------------------------------
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_rotates_in_the_compute_dtype_whatever_its_tables_dtype(dtype, padded):
    """A float32 model computing in half precision (autocast: --amp, or bfloat16 on a CPU) rotates q and k exactly
    as the same model converted to that dtype: ``prepare(pos, dtype)`` hands the layers cos and sin in the compute
    dtype, the closed-form cos / sin of p theta_i rounded to it."""
    pe = pe_testing.make_pe("rope", dim=16, heads=2, max_positions=32)
    converted = copy.deepcopy(pe).to(dtype)  # its tables in the compute dtype: nothing to cast
    b, t = 3, 7
    mask = None
    if padded:
        mask = torch.ones(b, t, dtype=torch.bool)
        mask[0, :2] = False  # two left pads
    pos = Positions.from_mask(mask, t, t, "cpu")
    angles = pe.prepare(pos, dtype)
    assert pe.cos.dtype == torch.float32 and [a.dtype for a in angles] == [dtype, dtype]
    r = pe.rotary_dim
    theta = 10000.0 ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    p = pos.q.double().unsqueeze(-1) * theta  # (B|1,T,r/2)
    torch.testing.assert_close(angles[0].squeeze(1), torch.cos(p).to(dtype), rtol=0, atol=1e-3)
    torch.testing.assert_close(angles[1].squeeze(1), torch.sin(p).to(dtype), rtol=0, atol=1e-3)
    torch.manual_seed(0)
    q, k = torch.randn(2, b, 2, t, 8).to(dtype)
    got = pe.transform_qk(q, k, angles, 0)
    want = converted.transform_qk(q, k, converted.prepare(pos, dtype), 0)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0)


# ---- RPE (Shaw): per-head or shared tables -----------------------------------------------------------------
@pytest.mark.parametrize("per_head,shared_heads,heads", [(False, False, 1), (True, False, 4), (True, True, 1),
                                                         (False, True, 1)])
def test_rpe_builds_per_head_tables_unless_told_to_share(per_head, shared_heads, heads):
    """Shaw's tables (L, H|1, 2k+1, d): one per layer and head with --rpe-per-head, one per layer shared by the
    heads without it or with --rpe-shared-heads (which wins, and the built encoding's config says so): 2 L H
    (2k+1) d parameters for the two tables."""
    pe = pe_testing.make_pe("rpe", dim=16, heads=4, layers=2, rpe_max_relative_position=3, rpe_per_head=per_head,
                            rpe_shared_heads=shared_heads)
    assert tuple(pe.key_table.shape) == tuple(pe.value_table.shape) == (2, heads, 7, 4)
    assert sum(p.numel() for p in pe.parameters()) == 2 * 2 * heads * 7 * 4
    assert pe.cfg.rpe_per_head == (heads > 1)


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


# ---- T5: the bias in the table's dtype -----------------------------------------------------------------------
def t5_reference(pe, tq, tk):
    """E[bucket(j - i), h] as T5 reads, (1,H,Tq,Tk), in the table's dtype."""
    from pe_plugin.encoding_parts.relative import t5_bucket

    rel = torch.arange(tk).unsqueeze(0) - torch.arange(tk - tq, tk).unsqueeze(1)  # (Tq,Tk) j - i
    bucket = t5_bucket(rel, not pe.dims.causal, pe.cfg.t5_num_buckets, pe.cfg.t5_max_distance)
    return pe.table[bucket].permute(2, 0, 1).unsqueeze(0)


def test_t5_bias_of_a_model_built_in_float64_is_float64():
    """A T5 encoding built under torch.set_default_dtype(torch.float64) (its table float64, its constant one-hot
    float32) computes its bias in float64, the table's values at each pair's bucket."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        pe = pe_testing.make_pe("t5", "encoder", dim=16, heads=2, t5_num_buckets=8, t5_max_distance=6)
        assert pe.table.dtype == torch.float64
        bias = pe.position_bias(Positions.from_mask(None, 9, 9, "cpu"))
    finally:
        torch.set_default_dtype(before)
    assert bias.dtype == torch.float64
    torch.testing.assert_close(bias, t5_reference(pe, 9, 9), rtol=0, atol=1e-12)


def test_t5_bias_follows_a_table_loaded_in_half_precision():
    """A T5 table assigned from a float16 state dict (``load_state_dict(assign=True)``, as a checkpoint saved by a
    --fp16 run is loaded onto a model built on the meta device) gives a float16 bias, the table's values."""
    pe = pe_testing.make_pe("t5", "decoder", dim=16, heads=2, t5_num_buckets=8, t5_max_distance=6)
    pe.load_state_dict({"table": torch.randn(8, 2).half()}, assign=True)
    bias = pe.position_bias(Positions.from_mask(None, 5, 5, "cpu"))
    assert bias.dtype == torch.float16
    torch.testing.assert_close(bias, t5_reference(pe, 5, 5), rtol=0, atol=0)


# ---- the hub: why a sentence is too long ---------------------------------------------------------------------
@pytest.mark.parametrize("learned", [False, True])
def test_the_hub_blames_learned_positions_only_for_stock_learned_models(data_bin, learned):
    """A source sentence one token over the limit of a stock fairseq transformer: with learned positions
    (--encoder-learned-pos) the hub says they have one row per position; with sinusoids it says a larger limit
    loads. pe_plugin encodings without a limit of their own: tests/test_lmax_boundaries.py."""
    from test_lmax_boundaries import LIMS, L_SRC, TINY, hub, tokens

    extra = TINY + LIMS + (["--encoder-learned-pos", "--decoder-learned-pos"] if learned else [])
    task, model, args = pe_testing.build_model(data_bin, "transformer_wmt_en_de", extra)
    assert not hasattr(model.encoder, "pe")  # fairseq's own model
    with pytest.raises(ValueError) as e:
        hub(task, model, args).check_lengths([tokens(task, L_SRC + 1)[0]])
    message = str(e.value)
    assert f"is {L_SRC + 1} tokens long" in message
    assert ("fairseq's learned positions have one row per position" in message) == learned, message
    assert (f"max_source_positions={2 * L_SRC}" in message) == (not learned), message


# ---- attention: the causal flag and the masks' dtype ---------------------------------------------------------
def stock_twin(attn):
    """fairseq's own MultiheadAttention with ``attn``'s weights (self-attention), in eval mode."""
    from fairseq.modules import MultiheadAttention

    stock = MultiheadAttention(attn.embed_dim, attn.num_heads, self_attention=True)
    stock.load_state_dict(attn.state_dict())
    return stock.eval()


@pytest.mark.parametrize("name", ["nope", "rope", "sape"])
def test_self_attention_without_a_causal_mask_sees_every_key(name):
    """Encoder self-attention of a batch without padding (fairseq passes no mask at all) attends to every key, the
    later ones too: what fairseq's stock attention computes (RoPE: with q and k rotated alike, a function of j - i;
    checked against the stock module for the encodings that leave attention alone, and for RoPE through the first
    query's dependence on the last token)."""
    pe = pe_testing.make_pe(name, dim=16, heads=2)
    attn = pe_testing.make_attention(pe)
    torch.manual_seed(0)
    x = torch.randn(6, 3, 16)  # (T, B, C)
    with torch.no_grad():
        out, _ = attn(x, x, x, need_weights=False)
        if name != "rope":
            want, _ = stock_twin(attn)(x, x, x, need_weights=False)
            torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
        moved = x.clone()
        moved[-1] += 1.0  # the last token changes: the first query's output must change too
        out2, _ = attn(moved, moved, moved, need_weights=False)
    assert (out2[0] - out[0]).abs().max() > 1e-3


@pytest.mark.parametrize("call", ["full-pass-padded", "incremental"])
def test_a_causal_mask_of_another_float_dtype_is_taken_in_the_layers_dtype(call):
    """A layer called alone with fairseq's causal mask in float64 on a float32 layer: over a padded batch (the
    padding and the causal mask together), and in incremental decoding with two new queries over five keys (a
    (Tq, Tk) mask): the mask is taken in the layer's dtype (PyTorch's fused kernel refuses a mask of a wider dtype
    than the queries'), and the output is fairseq's stock attention's for the same calls with the same mask in
    float32."""
    pe = pe_testing.make_pe("nope", dim=16, heads=2, side="decoder")
    attn = pe_testing.make_attention(pe)
    stock = stock_twin(attn)
    torch.manual_seed(0)
    x = torch.randn(5, 2, 16)  # (T, B, C)
    causal = torch.triu(torch.full((5, 5), float("-inf"), dtype=torch.float64), 1)
    pads = torch.zeros(2, 5, dtype=torch.bool)
    pads[1, 3:] = True  # the second sentence: two pads at the end (every query still sees a real key)
    outs = []
    with torch.no_grad():
        for module, causal in ((attn, causal), (stock, causal.float())):
            if call == "full-pass-padded":
                out, _ = module(x, x, x, key_padding_mask=pads, attn_mask=causal, need_weights=False)
            else:
                state = {}
                module(x[:3], x[:3], x[:3], incremental_state=state, attn_mask=causal[:3, :3].float(),
                       need_weights=False)
                out, _ = module(x[3:], x[3:], x[3:], incremental_state=state, attn_mask=causal[3:, :],
                                need_weights=False)
            outs.append(out)
    assert outs[0].dtype == torch.float32
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-6)


def test_the_reference_attention_differentiates_its_softmax_in_float32_under_fp16():
    """--pe-attention-impl reference in float16 takes the softmax, and so its backward, in float32: the gradient
    of the logits is the exact (float64) one rounded once to float16. One head of 16 dimensions over 16 tokens
    whose keys, values and output projection are the identity, so that q's gradient is the logits' gradient
    times the scaling 1/4 (exact in float16)."""
    c = 16
    pe = pe_testing.make_pe("nope", dim=c, heads=1)
    pe.attention_impl = "reference"
    attn = pe_testing.make_attention(pe)
    torch.manual_seed(0)
    with torch.no_grad():
        for proj in (attn.k_proj, attn.v_proj, attn.out_proj):
            proj.weight.copy_(torch.eye(c))
            proj.bias.zero_()
        attn.q_proj.weight.normal_(0, 2.0)
        attn.q_proj.bias.zero_()
    attn = attn.half()
    x = torch.eye(c).unsqueeze(1).half()  # (T=C, B=1, C): q = W_q^T / 4, k = v = I
    grad_out = torch.randn(c, 1, c).half()
    out, _ = attn(x, x, x)
    out.backward(grad_out)
    logits = (attn.q_proj.weight.t().double() * attn.scaling)  # (T, C) = q k^T with k = I
    p = torch.softmax(logits, dim=-1)
    g = grad_out[:, 0].double()
    dlogits = p * (g - (p * g).sum(-1, keepdim=True))  # the softmax's backward, exact
    want = (dlogits * attn.scaling).t().half()  # W_q's gradient: x = I, q = x W_q^T * scaling
    got = attn.q_proj.weight.grad
    off = (got != want).sum().item()
    assert off <= 0.02 * got.numel(), f"{off} of {got.numel()} gradients are not the exact one rounded once"
    torch.testing.assert_close(got.double(), want.double(), rtol=2e-3, atol=1e-6)


def test_the_masked_cpu_attention_refuses_a_mask_with_the_causal_flag_as_pytorch_does():
    """modules/sdpa.attention with a float mask that needs a gradient: without the causal flag it is PyTorch's
    scaled_dot_product_attention (output and gradients); with it (a mask and is_causal together) it is refused
    as PyTorch refuses it, never computed without the causal part."""
    from pe_plugin.modules.sdpa import attention

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 5, 4).unbind(0)
    mask = torch.randn(1, 2, 5, 5, requires_grad=True)
    got = attention(q, k, v, mask)
    (g_mine,) = torch.autograd.grad(got.sum(), mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
    (g_torch,) = torch.autograd.grad(want.sum(), mask)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g_mine, g_torch)
    with pytest.raises(RuntimeError) as torch_error:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True, scale=1.0)
    with pytest.raises(RuntimeError) as mine:
        attention(q, k, v, mask, is_causal=True)
    assert str(mine.value) == str(torch_error.value)


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


# ---- fairseq's size error: which flag to raise -----------------------------------------------------------------
@pytest.mark.parametrize("side", ["source", "target"])
def test_the_length_hint_names_the_training_limit_when_it_is_fairseqs_limit(data_bin, side):
    """fairseq's size error for a model whose encoding has no limit of its own (RoPE) trained with
    --max-source-positions 7 and --max-target-positions 9: when fairseq-generate's limit is the training limit
    (the equal case) the model's own --max-*-positions must grow, so the hint names the training value and the
    override; when the limit is one below it (a smaller --max-*-positions at decoding), raising the decoding
    flag is enough and the hint says that alone."""
    from test_lmax_boundaries import LIMS, L_SRC, L_TGT, TINY

    from pe_plugin.cli_errors import length_hint

    _, model, _ = pe_testing.build_model(data_bin, "transformer_rope_wmt_en_de", TINY + LIMS)
    trained = L_SRC if side == "source" else L_TGT
    for limit in (trained, trained - 1):
        lims = (limit, L_TGT) if side == "source" else (L_SRC, limit)
        n = limit + 1
        sizes = (n, 2) if side == "source" else (2, n)
        error = Exception(f"Size of sample #4 is invalid (=({sizes[0]}, {sizes[1]})) since max_positions={lims}")
        hint = length_hint(error, [model])
        assert hint.startswith(f"pe_plugin: test sentence #4 has {n} {side} tokens"), hint
        at_training = f"(--max-{side}-positions {trained} at training)" in hint
        override = f"--model-overrides \"{{'max_{side}_positions': {2 * n}}}\" and --max-{side}-positions {2 * n}"
        assert at_training == (override in hint) == (limit == trained), hint
        assert (f"(its --max-{side}-positions, 1024 unless given). Fix: pass --max-{side}-positions {2 * n};"
                in hint) == (limit < trained), hint


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


# ---- T5's buckets: long whatever the distances' dtype ----------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_t5_buckets_distances_of_any_real_dtype_as_long(side, dtype):
    """``relative.t5_bucket`` of whole distances held in another dtype (float positions a caller computed, int32)
    gives the long buckets of the distances, T5's own; and T5's bias of positions given as such values is the
    table's rows at those buckets, the bias of the same positions given as long."""
    from pe_plugin.encoding_parts.relative import t5_bucket

    bidirectional = side == "encoder"
    rel = torch.arange(-30, 31)
    got = t5_bucket(rel.to(dtype), bidirectional, 8, 20)
    assert got.dtype == torch.long
    assert got.tolist() == [hf_bucket(r, bidirectional, 8, 20) for r in rel.tolist()]
    pe = pe_testing.make_pe("t5", side, dim=16, heads=2, t5_num_buckets=8, t5_max_distance=20)
    q, k = torch.tensor([[0, 3, 9, 25]]), torch.tensor([[0, 3, 9, 25, 31]])
    want = pe.position_bias(Positions(q, k))
    torch.testing.assert_close(pe.position_bias(Positions(q.to(dtype), k.to(dtype))), want, rtol=0, atol=0)
    rows = torch.tensor([[hf_bucket(j - i, bidirectional, 8, 20) for j in k[0].tolist()]
                         for i in q[0].tolist()])
    torch.testing.assert_close(want, pe.table[rows].permute(2, 0, 1).unsqueeze(0), rtol=0, atol=0)


# ---- the registry: the method table's order --------------------------------------------------------------------
def test_the_registry_lists_the_encodings_in_the_method_tables_order():
    """PE_REGISTRY, and so every list derived from it (the README's and the reports' method tables, the --pe
    choices, python -m pe_plugin), runs in each encoding's ``order``: no encoding, the absolute ones, then the
    relative ones, PosNet and RoPE, ALiBi and KERPLE, not alphabetically."""
    from pe_plugin import encodings

    want = ["nope", "sape", "lape", "rpe", "t5", "at5", "posnet_embed", "posnet_attn", "rope", "alibi", "kerple"]
    assert list(PE_REGISTRY) == want
    encodings._import_all()  # the registration pass again: idempotent, it registers nothing twice and keeps the order
    assert list(PE_REGISTRY) == want
    orders = [cls.order for cls in PE_REGISTRY.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)


# ---- AT5: the distances in the slopes' dtype -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_at5_bias_of_an_old_checkpoint_assigned_in_another_dtype_is_in_its_parameters_dtype(side, dtype):
    """An AT5 state dict in float16 or float64 saved before the slope divisor was (no ``slope_scale``: loading
    restores the old divisor, here --at5-max-length 300, as a float32 tensor), assigned onto the encoding
    (``load_state_dict(assign=True)``): the distances are taken in the slopes' dtype, so the bias is in that dtype
    and equals, bit for bit, that of the same encoding converted to it (its divisor in that dtype too: |r| / 300
    rounds differently in float32), over a full pass and a decoding step."""
    pe = pe_testing.make_pe("at5", side, dim=16, heads=2, at5_max_length=300)
    converted = copy.deepcopy(pe).to(dtype)
    old = {k: v.to(dtype) for k, v in pe.state_dict().items() if k != "slope_scale"}
    loaded = copy.deepcopy(pe)
    loaded.load_state_dict(old, assign=True)
    assert loaded.slope.dtype == dtype and loaded.slope_scale.dtype == torch.float32 and loaded.max_length == 300
    for tq, tk in ((9, 9), (1, 300)):
        pos = Positions.from_mask(None, tq, tk, "cpu")
        got, want = loaded.position_bias(pos), converted.position_bias(pos)
        assert got.dtype == want.dtype == dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---- ALiBi: the slopes in float32 ------------------------------------------------------------------------------
@pytest.mark.parametrize("default", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("side,directional", [("encoder", False), ("encoder", True), ("decoder", False)])
def test_alibi_bias_is_float32_whatever_the_default_dtype(side, directional, default):
    """ALiBi's bias is computed in float32 from the slopes rounded once to float32, then cast to the attention's
    dtype: under torch.set_default_dtype(float64 or bfloat16), where the encoding is built and called, its
    12 heads' slopes (1/2, 1/4, ..., 1/256, then 2^-1/2, 2^-3/2, ...: not all powers of two) are the float32 ones
    and the bias is -m_h |j - i| in float32 (directional: m_{H+1-h} to the right), the closed form."""
    from pe_plugin.encodings.alibi import alibi_slopes

    heads = 12
    slopes = [2 ** (-h) for h in range(1, 9)] + [2 ** (-(2 * h - 1) / 2) for h in range(1, 5)]
    assert alibi_slopes(heads) == pytest.approx(slopes, rel=1e-15)
    before = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        pe = pe_testing.make_pe("alibi", side, dim=24, heads=heads,
                                alibi_encoder="directional" if directional else "symmetric")
        bias = pe.position_bias(Positions.from_mask(None, 6, 6, "cpu"))
    finally:
        torch.set_default_dtype(before)
    left = torch.tensor(slopes, dtype=torch.float32)
    right = left.flip(0) if directional else left
    want = torch.tensor([[[-(right[h] if j > i else left[h]).item() * abs(j - i) for j in range(6)]
                          for i in range(6)] for h in range(heads)], dtype=torch.float32).unsqueeze(0)
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias, want, rtol=0, atol=0)


# ---- KERPLE: positions given as values, in the parameters' dtype -----------------------------------------------
@pytest.mark.parametrize("model_dtype,pos_dtype", [(torch.float32, torch.float64), (torch.float16, torch.float32),
                                                   (torch.float64, torch.int32)])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_kerple_bias_of_positions_given_as_values_is_in_its_parameters_dtype(side, model_dtype, pos_dtype):
    """KERPLE's bias of positions given as values (a direct call) of another dtype, float or integer: the
    distances are taken in the parameters' dtype, so the bias is in that dtype and equals, bit for bit, the bias
    of the same positions as long; that one is -r1 log(1 + r2 |j - i|) (float64 closed form, the parameters'
    precision)."""
    pe = pe_testing.make_pe("kerple", side, dim=16, heads=2).to(model_dtype)
    q, k = torch.tensor([[0, 3, 9, 40]]), torch.tensor([[0, 2, 3, 9, 40, 41]])
    want = pe.position_bias(Positions(q, k))
    got = pe.position_bias(Positions(q.to(pos_dtype), k.to(pos_dtype)))
    assert got.dtype == want.dtype == model_dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    r1, r2 = pe.r1.double().clamp_min(1e-2), pe.r2.double().clamp_min(1e-2)
    dist = (k[0].unsqueeze(0) - q[0].unsqueeze(1)).abs().double()
    tol = {torch.float16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}[model_dtype]
    torch.testing.assert_close(want.double(), -r1 * torch.log1p(r2 * dist), rtol=tol, atol=tol)


# ---- RoPE: the base ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("base,ok", [(1.0, False), (0.5, False), (1.0 + 1e-6, True), (2.0, True)])
def test_rope_base_must_be_above_one(base, ok):
    """--rope-base is refused at 1 and below (base 1 gives every pair the frequency theta_i = 1: one rotation
    for all, as if the encoding had one pair) and taken just above it: the frequencies base^(-2i/r), i = 0..r/2-1,
    are then strictly decreasing from 1."""
    build = lambda: pe_testing.make_pe("rope", dim=16, heads=2, max_positions=8, rope_base=base)  # noqa: E731
    if not ok:
        with pytest.raises(ValueError, match=rf"--rope-base must be above 1 \(RoFormer: 10000\), got {base}"):
            build()
        return
    pe = build()
    r = pe.rotary_dim
    theta = base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    torch.testing.assert_close(pe.cos[1].double(), torch.cos(theta), rtol=0, atol=1e-6)  # position 1: cos theta_i
    assert theta[0] == 1 and bool((theta[1:] < theta[:-1]).all())


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_t5_bias_converts_nothing_per_call_in_the_models_dtype(side, dtype):
    """T5's bias in a float32 encoding, and in one converted to float16 or float64 with the model (``.half()`` as
    --fp16 does, ``.double()``): one matrix product of the table with its constant one-hot of the buckets, which
    is already in the table's dtype, so a call converts and copies nothing (no ``_to_copy``); the values are the
    table's at each pair's bucket."""
    pe = pe_testing.make_pe("t5", side, dim=16, heads=2, t5_num_buckets=8, t5_max_distance=6).to(dtype)
    for tq, tk in ((9, 9), (1, 12)):
        with pe_testing.OpLog() as log:
            bias = pe.position_bias(Positions.from_mask(None, tq, tk, "cpu"))
        assert log.ops["_to_copy"] == 0 and log.ops["mm"] == 1, dict(log.ops)
        assert bias.dtype == dtype
        torch.testing.assert_close(bias, t5_reference(pe, tq, tk), rtol=0, atol=0)


# ---- the exit hook: a torch without distributed support ------------------------------------------------------
def test_the_exit_hook_does_nothing_in_a_torch_built_without_distributed_support(monkeypatch):
    """In a torch built without distributed support (USE_DISTRIBUTED=0: ``torch.distributed.is_available()`` is
    False and the module has no ``is_initialized`` or ``get_backend``), pe_plugin's atexit hook,
    gloo_exit.destroy_gloo_group, asks nothing more and returns False: a program's exit raises nothing."""
    import torch.distributed as dist

    from pe_plugin.gloo_exit import destroy_gloo_group

    monkeypatch.setattr(dist, "is_available", lambda: False)
    for name in ("is_initialized", "get_backend", "destroy_process_group"):
        monkeypatch.delattr(dist, name, raising=False)
    assert destroy_gloo_group() is False


# ---- the hub: leaving long sentences out when asked ----------------------------------------------------------
def test_the_hub_leaves_sentences_over_the_limit_out_when_told_to_skip_them(data_bin):
    """``generate(..., skip_invalid_size_inputs=True)`` on the hub of a model with 7 source positions: a sentence
    of 8 tokens between two of 7 and 2 is left out (fairseq's skipping: two translations, the others' in their
    order) rather than refused; without the flag the same call raises, naming it."""
    from test_lmax_boundaries import LIMS, L_SRC, TINY, hub, tokens

    task, model, args = pe_testing.build_model(data_bin, "transformer_rope_wmt_en_de", TINY + LIMS)
    h = hub(task, model.eval(), args)
    fits, over, short = tokens(task, L_SRC)[0], tokens(task, L_SRC + 1)[0], tokens(task, 2)[0]
    decoding = dict(beam=1, max_len_b=3, max_len_a=0)
    alone = [h.generate([s], **decoding)[0][0]["tokens"] for s in (fits, short)]
    out = h.generate([fits, over, short], skip_invalid_size_inputs=True, **decoding)
    assert len(out) == 2
    for hypos, want in zip(out, alone):
        assert torch.equal(hypos[0]["tokens"], want)
    with pytest.raises(ValueError, match=rf"sentence 1 is {L_SRC + 1} tokens long"):
        h.generate([fits, over, short], **decoding)


# ---- the log filter: that logger's notice only, wherever it is installed -----------------------------------------
def test_the_tensorboardx_filter_on_a_handler_drops_only_that_loggers_notice():
    """pe_plugin's DropTensorboardXNotice installed on a handler (which, unlike the logger it is installed on by
    pe_plugin, sees the records of every logger below it) drops the notice of fairseq's text-to-speech logger
    only: the same words from another logger and other records of that logger reach the handler."""
    import logging

    from pe_plugin.log_noise import LOGGER, NOTICE, DropTensorboardXNotice

    class Collect(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append((record.name, record.getMessage()))

    handler = Collect()
    handler.addFilter(DropTensorboardXNotice())
    parent, level = logging.getLogger("fairseq"), logging.getLogger("fairseq").level
    parent.addHandler(handler)
    parent.setLevel(logging.INFO)
    try:
        logging.getLogger(LOGGER).warning(NOTICE + ": pip install tensorboardX")
        logging.getLogger(LOGGER).warning("another record")
        logging.getLogger("fairseq.other").warning(NOTICE)
    finally:
        parent.removeHandler(handler)
        parent.setLevel(level)
    assert handler.messages == [(LOGGER, "another record"), ("fairseq.other", NOTICE)]
    record = logging.makeLogRecord({"name": LOGGER, "msg": NOTICE + ": pip install tensorboardX"})
    assert DropTensorboardXNotice().filter(record) is False


# ---- model flags: two dictionaries need unshared embeddings only -------------------------------------------------
def test_two_dictionaries_are_refused_only_with_share_all_embeddings(data_bin, tmp_path):
    """A data folder whose target dictionary differs from the source's (one word more, as fairseq-preprocess
    without --joined-dictionary gives): a model with separate embeddings (no --share-all-embeddings) builds, its
    decoder's vocabulary the target's; with --share-all-embeddings it is refused, naming --joined-dictionary."""
    import shutil

    from fairseq import options, tasks
    from test_lmax_boundaries import TINY

    from pe_plugin.models.validation import PEConfigError

    split = tmp_path / "split"
    shutil.copytree(data_bin, split)
    with open(split / "dict.de.txt", "a") as f:
        f.write("onlyintarget 1\n")
    unshared = [f for f in pe_testing.TRAIN_FLAGS if f != "--share-all-embeddings"]

    def build(*extra):
        argv = [str(split), "--user-dir", pe_testing.PLUGIN, "--arch", "transformer_sape_wmt_en_de", *unshared,
                *TINY, *extra]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        task = tasks.setup_task(args)
        return args, task, task.build_model(args)

    args, task, model = build()
    assert not args.share_all_embeddings
    assert len(task.target_dictionary) == len(task.source_dictionary) + 1
    assert model.decoder.embed_tokens.num_embeddings == len(task.target_dictionary)
    with pytest.raises(PEConfigError, match="--share-all-embeddings needs one dictionary .* --joined-dictionary"):
        build("--share-all-embeddings")


# ---- the embedding slots: positions after dropout, once per slot call ------------------------------------------
def test_dropout_then_embed_applies_the_slots_positions_once():
    """PosNet-Embed's two slots (fairseq's ``embed_positions`` and ``dropout_module``): the dropout module applies
    the positions the slot computed for the tokens to the one call that follows it (in eval mode, where dropout is
    the identity, exactly the encoding's ``embed`` at those positions, left pads included); a later call without
    a new slot call (a subclass or a user applying the stack's dropout to another tensor) is dropout alone."""
    from torch import nn

    from pe_plugin.modules.pe_embedding import DropoutThenEmbed, PositionSlot

    pe = pe_testing.make_pe("posnet_embed", dim=16, heads=2, max_positions=8)
    slot = PositionSlot(pe, nn.Embedding(20, 16, padding_idx=1))
    dropout = DropoutThenEmbed(nn.Dropout(0.3), slot).eval()
    tokens = torch.tensor([[1, 1, 5, 6, 2], [4, 5, 6, 7, 2]])  # the first sentence left-padded by two
    torch.manual_seed(0)
    x, y = torch.randn(2, 2, 5, 16)
    with torch.no_grad():
        slot(tokens)
        got = dropout(x)
        want = pe.embed(x, Positions.for_tokens(tokens, 1))
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert not torch.equal(got, x)
        assert torch.equal(dropout(y), y)  # no positions left: dropout alone (the identity in eval mode)


# ---- the translation task: iterators fairseq rebuilds every epoch are left alone ---------------------------------
def test_a_dataset_that_cannot_reuse_its_iterator_gets_fairseqs_batches_in_every_epoch(data_bin):
    """A training set whose iterator fairseq rebuilds every epoch (``can_reuse_epoch_itr_across_epochs`` False, as
    for a dataset whose contents depend on the epoch) draws its batches per epoch, so a resumed run already gets the
    uninterrupted run's: the plugin's translation task builds, in epochs 1 to 3, exactly the batches (sentence ids,
    in training order) of fairseq's own TranslationTask, which differ between epochs."""
    from fairseq import tasks
    from fairseq.tasks.translation import TranslationTask

    from pe_plugin.resume_batches import ResumableTranslationTask

    args = pe_testing.parse_train_args(data_bin, "transformer_sape_tiny", ["--max-tokens", "200", "--seed", "3"])
    cfg = tasks.setup_task(args).cfg
    batches = {}
    for task_class in (ResumableTranslationTask, TranslationTask):
        task = task_class.setup_task(cfg)
        task.load_dataset("train", epoch=1)
        dataset = task.dataset("train")
        dataset.__class__ = type("PerEpoch", (type(dataset),),
                                 {"can_reuse_epoch_itr_across_epochs": property(lambda self: False)})
        assert not task.can_reuse_epoch_itr(dataset)
        for epoch in (1, 2, 3):
            itr = task.get_batch_iterator(dataset=dataset, max_tokens=200, max_positions=(1024, 1024),
                                          required_batch_size_multiple=8, seed=3, epoch=epoch)
            batches[task_class, epoch] = [sorted(s["id"].tolist()) for s in itr.next_epoch_itr(shuffle=True)]
    for epoch in (1, 2, 3):
        assert batches[ResumableTranslationTask, epoch] == batches[TranslationTask, epoch], epoch
    assert sorted(batches[TranslationTask, 2]) != sorted(batches[TranslationTask, 3])  # other groupings


# ---- the checkpoint allow-list on numpy 1.x ------------------------------------------------------------------
def test_the_checkpoint_allow_list_takes_numpy_core_where_there_is_no_numpy_underscore_core(monkeypatch):
    """On a numpy without ``numpy._core`` (numpy 1.x, where the module is ``numpy.core``; simulated here by hiding
    the attribute, numpy 2 keeping ``numpy.core`` as its alias), safe_load's allow-list still admits the array
    reconstructor and the scalar constructor of BLEU-count arrays in a checkpoint: the same functions as numpy 2's
    ``numpy._core.multiarray``."""
    import warnings

    import numpy as np

    from pe_plugin.safe_load import checkpoint_safe_globals

    want = [np._core.multiarray._reconstruct, np._core.multiarray.scalar]
    monkeypatch.delattr(np, "_core")
    assert getattr(np, "_core", None) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy 2: numpy.core is deprecated
        allowed = checkpoint_safe_globals()
    assert all(any(a is w for a in allowed) for w in want)
