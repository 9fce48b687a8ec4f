"""PosNet-Embed and PosNet-Attn (Zhang et al., 2023): the kernel product against independent references (a
per-token loop of the equations, the released broadcast formulation), padding-independence, incremental
decoding, length limits, fp16, gradient accumulation and closed-form parameter counts.

    python tests/test_posnet.py      # prints the base-size parameter table (40k joined vocabulary)
"""
import sys
import tempfile
from argparse import Namespace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import pe_testing
from pe_plugin.encoding_parts.base import Dims
from pe_plugin.encodings import PE_REGISTRY
from pe_references import loop_matmul, padded_positions

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # also as a script
from pe_testing import (PLUGIN, TRAIN_FLAGS, assert_micro_batches_add_up, batch, build_model, make_pe,  # noqa: E402
                        parse_train_args, rescore_max_diff, run)

from pe_plugin.encoding_parts.base import Positions  # noqa: E402
from pe_plugin.encodings.posnet_attention import PosNetAttention, PosNetAttnConfig  # noqa: E402
from pe_plugin.encodings.posnet_embedding import PosNetEmbedConfig, PosNetEmbedding  # noqa: E402
from pe_plugin.encoding_parts.posnet_kernels import positional_matmul, rotation_index  # noqa: E402
from pe_plugin.models.validation import PEConfigError, pe_parameter_count  # noqa: E402
from pe_tools.fairseq_plugin import CPU_FP16_FLAGS  # noqa: E402

EMBED, ATTN = "transformer_posnet_embed_tiny", "transformer_posnet_attn_tiny"
RELEASED = ["--posnet-sides", "encoder", "--max-source-positions", "512", "--posnet-max-positions", "512"]  # released
# the tiny random models' branches are small under the released init; per-matrix init makes them O(1), so a
# wrong position anywhere would show far above the tolerances below
VARIANTS = [(EMBED, []), (EMBED, ["--posnet-init", "per-matrix"]), (EMBED, RELEASED + ["--posnet-init", "per-matrix"]),
            (ATTN, ["--posnet-init", "per-matrix"]), (ATTN, ["--posnet-attn-per-layer", "--posnet-init", "per-matrix"])]
IDS = ["embed", "embed-permatrix", "embed-released-cfg", "attn", "attn-per-layer"]


# ---- the kernel product ------------------------------------------------------------------------------------
@pytest.mark.parametrize("lengths,left", [
    ([7, 7, 7], False), ([7, 5, 1, 3], True), ([7, 5, 1, 3], False), ([1, 1], True), ([6, 2], True)])
def test_positional_matmul_matches_per_token_loop_and_gradients(lengths, left):
    torch.manual_seed(0)
    t, b, n, d = max(lengths), len(lengths), 2, 4
    pos, nonpad = padded_positions(lengths, t, left)
    u = torch.randn(t, b, n, d, dtype=torch.double, requires_grad=True)
    phi = torch.randn(9, d, 3, dtype=torch.double, requires_grad=True)
    mask = nonpad.t().reshape(t, b, 1, 1)  # (T,B,1,1): pads are masked downstream, so compare real tokens
    y, ref = positional_matmul(u, phi, pos) * mask, loop_matmul(u, phi, pos, nonpad)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y)
    grads = torch.autograd.grad((y * w).sum(), (u, phi))
    ref_grads = torch.autograd.grad((ref * w).sum(), (u, phi))
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lengths,left", [([7, 5, 1, 3], True), ([7, 5, 1, 3], False), ([6, 2], True), ([6, 6], False)])
def test_positional_matmul_rotated_path_matches_per_token_loop(lengths, left):
    """Positions made from a padding mask, as in every padded pass: the rotated product (``rotation_index``), not
    the gather of positions given as values, against the per-token loop; values and gradients."""
    torch.manual_seed(0)
    t, b, n, d = max(lengths), len(lengths), 2, 4
    values, nonpad = padded_positions(lengths, t, left)
    pos = Positions.from_mask(nonpad, t, t, "cpu")
    assert rotation_index(pos) is not None and pos.start is None  # the rotated path
    u = torch.randn(t, b, n, d, dtype=torch.double, requires_grad=True)
    phi = torch.randn(9, d, 3, dtype=torch.double, requires_grad=True)
    mask = nonpad.t().reshape(t, b, 1, 1)
    y, ref = positional_matmul(u, phi, pos) * mask, loop_matmul(u, phi, values, nonpad)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y)
    for g, r in zip(torch.autograd.grad((y * w).sum(), (u, phi)), torch.autograd.grad((ref * w).sum(), (u, phi))):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


def test_positional_matmul_decoding_step_uses_its_own_position():
    torch.manual_seed(0)
    u, phi = torch.randn(1, 3, 1, 4), torch.randn(9, 4, 4)
    for pos in (torch.tensor([[5]]), torch.tensor([[5], [2], [0]])):  # shared step / per-row (left-padded prefix)
        torch.testing.assert_close(positional_matmul(u, phi, pos), loop_matmul(u, phi, pos, torch.ones(3, 1)))


def _module(name, lmax=12, **cfg):
    """Encoding ``name`` at L_max ``lmax``, the per-matrix initialisation unless ``cfg`` says."""
    return make_pe(name, max_positions=lmax, **{"posnet_init": "per-matrix", "posnet_max_positions": lmax, **cfg})


def test_embed_equals_released_broadcast_and_per_token_loop():
    torch.manual_seed(0)
    pe = _module("posnet_embed", posnet_dim=8)
    w1, w2, phi = (pe.kernels[k] for k in ("w1", "w2", "phi"))
    x = torch.randn(3, 6, 16)
    # released (posnet/modules.py): (X W1).unsqueeze(2).matmul(phi[:T]), ReLU, W2, dropout, residual
    released = x + F.relu((x @ w1).unsqueeze(2).matmul(phi[:6]).squeeze(2)) @ w2
    torch.testing.assert_close(pe.embed(x, Positions.for_tokens(torch.zeros(3, 6).long(), 1)), released)
    pos, nonpad = padded_positions([6, 4, 1], 6, left=True)
    loop = torch.stack([torch.stack([x[b, t] + F.relu(x[b, t] @ w1 @ phi[pos[b, t]]) @ w2 for t in range(6)])
                        for b in range(3)])
    got = pe.embed(x, Positions(pos, pos, nonpad))
    torch.testing.assert_close(got[nonpad], loop[nonpad])
    # a position off by one would be caught: the branch depends on the position far above the tolerances used
    assert (pe.embed(x, Positions(pos + 1, pos + 1, nonpad)) - got)[nonpad].abs().max() > 1e-2


def test_attn_transform_values_equals_per_token_loop():
    torch.manual_seed(0)
    pe = _module("posnet_attn", posnet_attn_per_layer=True)
    v = torch.randn(3, 2, 6, 8)  # (B,H,T,d)
    pos, nonpad = padded_positions([6, 4, 1], 6, left=True)
    for layer in (0, 1):
        phi = pe.kernels["phi"][layer]
        got = pe.transform_values(v, pe.prepare(pos, v.dtype), layer)
        for b, t in nonpad.nonzero().tolist():
            for h in (0, 1):
                torch.testing.assert_close(got[b, h, t], v[b, h, t] + F.relu(v[b, h, t] @ phi[pos[b, t]]))
    ctx = pe.prepare(pos, v.dtype)
    assert not torch.allclose(pe.transform_values(v, ctx, 0), pe.transform_values(v, ctx, 1))  # per-layer kernels


@pytest.mark.parametrize("from_mask", [True, False], ids=["rotated", "gathered"])
def test_attn_training_applies_its_dropout_to_the_branch_only(from_mask):
    """v' = v + Dropout(ReLU(v phi_p)) in training (--posnet-dropout 0.3): the reference draws the same mask from
    the same seed (a dropout of ones of v's shape) and applies it to the per-token loop's branch, not to v."""
    pe = _module("posnet_attn", posnet_dropout=0.3)
    pe.train()
    torch.manual_seed(0)
    v = torch.randn(3, 2, 6, 8)  # (B,H,T,d)
    values, nonpad = padded_positions([6, 4, 1], 6, left=True)
    pos = Positions.from_mask(nonpad, 6, 6, "cpu") if from_mask else Positions(values, values, nonpad)
    torch.manual_seed(7)
    mask = F.dropout(torch.ones_like(v), 0.3, training=True)  # 0 or 1 / 0.7
    torch.manual_seed(7)
    got = pe.transform_values(v, pe.prepare(pos, v.dtype), 0)
    phi = pe.kernels["phi"][0].detach()
    for b, t in nonpad.nonzero().tolist():
        for h in (0, 1):
            branch = F.relu(v[b, h, t] @ phi[values[b, t]])
            torch.testing.assert_close(got[b, h, t], v[b, h, t] + branch * mask[b, h, t])
    assert (mask == 0).any() and (got[nonpad.unsqueeze(1).expand(3, 2, 6)] != 0).all()  # v itself is never dropped


@pytest.mark.parametrize("from_mask", [True, False], ids=["rotated", "gathered"])
def test_attn_branch_equals_relu_and_saves_only_its_product_input(from_mask):
    """transform_values' where(y <= 0, 0, y) against the equation with F.relu, in float64: the same values and
    gradients. A full pass (positions from the padding mask: the rotated product) keeps for backward one float
    tensor of v's size (the rotated values, bmm's input), a bool mask and indices; F.relu kept its output too."""
    torch.manual_seed(0)
    pe = _module("posnet_attn").double()
    phis = pe.kernels["phi"]  # (1, L_max, d, d)
    v = torch.randn(3, 2, 6, 8, dtype=torch.double, requires_grad=True)  # (B,H,T,d)
    pos, nonpad = padded_positions([6, 4, 1], 6, left=True)
    if from_mask:
        pos = Positions.from_mask(nonpad, 6, 6, "cpu")
    ctx = pe.prepare(pos, v.dtype)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        got = pe.transform_values(v, ctx, 0)
    y = positional_matmul(v.permute(2, 0, 1, 3), phis[0], pos).permute(1, 2, 0, 3)  # (B,H,T,d)
    ref = v + F.relu(y)
    assert torch.equal(got, ref)
    w = torch.randn_like(ref)
    for g, r in zip(torch.autograd.grad((got * w).sum(), (v, phis)), torch.autograd.grad((ref * w).sum(), (v, phis))):
        assert torch.equal(g, r)
    if from_mask:
        floats = [t for t in saved if t.is_floating_point() and t.untyped_storage().data_ptr() != phis.data_ptr()]
        assert [t.numel() for t in floats] == [v.numel()]
        assert {t.dtype for t in saved} == {torch.double, torch.bool, torch.long}


def test_the_batched_kernel_product_is_the_released_broadcast():
    """PosNet-Embed's kernel product as the plugin computes it (one bmm over positions) against the released
    code's per-token broadcast, ``x + ReLU((x W1).unsqueeze(2).matmul(phi[:T])) W2``: the same outputs and
    gradients of the input and of every kernel (the candidates of docs/benchmarks_cpu.md's recorded decision)."""
    from pe_plugin.encodings import PE_REGISTRY, Dims

    b, t, d = 3, 5, 16
    torch.manual_seed(0)
    cls = PE_REGISTRY["posnet_embed"]
    pe = cls.build(cls.config_cls(posnet_dim=4, posnet_init="per-matrix", posnet_max_positions=8),
                   Dims(d, 8, 6, 8, 1, "encoder"), {})
    w1, w2, phi = (pe.kernels[k] for k in ("w1", "w2", "phi"))
    x = torch.randn(b, t, d, requires_grad=True)
    grad = torch.randn(b, t, d)
    candidates = {
        # (B,T,1,d_p) @ (T,d_p,d_p), broadcast over the batch
        "released": lambda: x + F.relu((x @ w1).unsqueeze(2).matmul(phi[:t]).squeeze(2)) @ w2,
        "bmm": lambda: pe.embed(x, Positions.for_tokens(x.new_zeros(b, t).long(), 1)),
    }
    runs = []
    for forward in candidates.values():
        for leaf in (x, w1, w2, phi):
            leaf.grad = None
        out = forward()
        out.backward(grad)
        runs.append([out.detach()] + [leaf.grad.clone() for leaf in (x, w1, w2, phi)])
    for a, c in zip(*runs):
        torch.testing.assert_close(a, c)


# ---- model level -------------------------------------------------------------------------------------------
def collate(task, ids, left_pad_source=True, split="test"):
    task.load_dataset(split)
    ds = task.dataset(split)
    ds.left_pad_source = left_pad_source
    return ds.collater([ds[i] for i in ids])


def per_sentence(model, sample, pad):
    """{sentence id: (encoder states of its real tokens (n,C), decoder logits of its real targets)}."""
    src, lens, prev = (sample["net_input"][k] for k in ("src_tokens", "src_lengths", "prev_output_tokens"))
    with torch.no_grad():
        enc = model.encoder(src, lens)["encoder_out"][0].transpose(0, 1)  # (B,T,C)
        logits, _ = model(src, lens, prev)
    tgt_real = sample["target"].ne(pad)
    return {int(i): (enc[b][src[b].ne(pad)], logits[b][tgt_real[b]]) for b, i in enumerate(sample["id"])}


@pytest.mark.parametrize("arch,extra", VARIANTS, ids=IDS)
def test_outputs_do_not_depend_on_padding_side_or_batch(arch, extra, data_bin):
    task, model, _ = build_model(data_bin, arch, extra)
    pad = task.target_dictionary.pad()
    ids = list(range(8))
    left, right = (per_sentence(model, collate(task, ids, lp), pad) for lp in (True, False))
    for i in ids:
        alone = per_sentence(model, collate(task, [i]), pad)[i]
        for other in (right[i], alone):
            for a, b in zip(left[i], other):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    # --left-pad-source has no effect on beam search results
    gen = task.build_generator([model], Namespace(beam=4, max_len_b=20, max_len_a=0, min_len=1))
    hyps = [task.inference_step(gen, [model], collate(task, ids, lp)) for lp in (True, False)]
    for a, b in zip(*hyps):
        for ha, hb in zip(a, b):
            assert torch.equal(ha["tokens"], hb["tokens"])
            torch.testing.assert_close(ha["positional_scores"], hb["positional_scores"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("arch,blind", [(ATTN, True), (EMBED, False)])
def test_attn_encoder_gives_equal_tokens_equal_states_wherever_they_stand(arch, blind, data_bin):
    """PosNet-Attn (Eq. 20-23) puts positions on the values only. The encoder's queries and keys never carry a
    position, so its state at position i is f(word_i, {(state_j, p_j)}): two equal words get equal states in
    every layer, wherever they stand (no query knows its own position; each word sees the ordered sentence).
    This is why identical-word probing finds no position signal in its encoder. The decoder's causal mask
    breaks the symmetry, and PosNet-Embed puts the position into each token itself (the controls)."""
    task, model, _ = build_model(data_bin, arch, ["--posnet-init", "per-matrix"])
    d = task.source_dictionary
    a, b, c = (d.index(w) for w in d.symbols[d.nspecial:d.nspecial + 3])
    tokens = torch.tensor([[a, b, a, c, a, d.eos()]])  # (1, T): word a at positions 0, 2 and 4
    with torch.no_grad():
        enc = model.encoder(tokens, torch.tensor([6]))["encoder_out"][0][:, 0]  # (T, C)
        _, extra = model(tokens, torch.tensor([6]), tokens, return_all_hiddens=False)
        dec = extra["inner_states"][-1][:, 0]  # (T, C) decoder states, teacher-forced on the same tokens
    same = [float((enc[0] - enc[j]).abs().max()) for j in (2, 4)]
    scale = float(enc.abs().max())
    if blind:
        assert max(same) <= 1e-6 * scale, same
        assert float((dec[0] - dec[2]).abs().max()) > 1e-3 * scale  # causal decoder: prefixes differ
    else:
        assert min(same) > 1e-3 * scale, same


def test_embedding_branch_runs_after_the_embedding_dropout(data_bin):
    task, model, _ = build_model(data_bin, EMBED, ["--dropout", "0.3"])
    model.train()
    enc, src = model.encoder, collate(task, range(4))["net_input"]["src_tokens"]
    torch.manual_seed(3)
    got, _ = enc.forward_embedding(src)
    torch.manual_seed(3)
    dropped = F.dropout(enc.embed_scale * enc.embed_tokens(src), 0.3, training=True)
    expected = enc.pe.embed(dropped, Positions.for_tokens(src, 1))  # h = d(x) + branch(d(x)), as released
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("arch,extra", VARIANTS, ids=IDS)
def test_incremental_decoding_equals_full_pass(arch, extra, data_bin):
    task, model, _ = build_model(data_bin, arch, extra)
    assert rescore_max_diff(task, model, batch(task, n=8), beam=4) < 1e-4


def test_attn_cache_holds_values_transformed_once(data_bin):
    task, model, _ = build_model(data_bin, ATTN, ["--posnet-init", "per-matrix"])
    dec, pe = model.decoder, model.decoder.pe
    sample = collate(task, range(4))
    src, lens, prev = (sample["net_input"][k] for k in ("src_tokens", "src_lengths", "prev_output_tokens"))
    calls, method = [], pe.transform_values

    def recording(v, k_pos, layer):
        out = method(v, k_pos, layer)
        calls.append((layer, v.size(2), out))
        return out

    pe.transform_values = recording
    with torch.no_grad():
        enc = model.encoder(src, lens)
        dec(prev, encoder_out=enc)  # full pass: one call per layer over all T positions
        full = {layer: out for layer, _, out in calls}
        calls.clear()
        state = {}
        for t in range(1, prev.size(1) + 1):
            dec(prev[:, :t], encoder_out=enc, incremental_state=state)
    assert [n for _, n, _ in calls] == [1] * (2 * prev.size(1))  # each new value transformed once, then cached
    for layer in (0, 1):
        cached = dec.layers[layer].self_attn._get_input_buffer(state)["prev_value"]  # (B,H,T,d)
        real = prev.ne(1).view(prev.size(0), 1, -1, 1)
        torch.testing.assert_close(cached * real, full[layer] * real, rtol=0, atol=1e-5)


# ---- lengths, sharing, flags -------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", [EMBED, ATTN])
def test_max_positions_reach_fairseq_and_long_inputs_raise(arch, data_bin):
    lims = ["--max-source-positions", "20", "--max-target-positions", "30"]
    for share, lmax_enc in (("enc-dec", 30), ("none", 20)):
        task, model, _ = build_model(data_bin, arch, lims + ["--posnet-share", share])
        enc, dec = model.encoder, model.decoder
        assert (enc.pe.max_positions, dec.pe.max_positions) == (lmax_enc, 30)  # shared: the larger limit
        assert enc.embed_positions.max_positions == enc.pe.max_positions  # PositionSlot exposes L_max
        assert model.max_positions() == (20, 30)  # what fairseq filters training pairs with
        assert (enc.pe.kernels is dec.pe.kernels) == (share == "enc-dec")
        src = torch.full((2, lmax_enc + 1), 5)
        with pytest.raises(ValueError, match=f"exceeds the {lmax_enc} positions"):
            enc(src, torch.tensor([lmax_enc + 1] * 2))
        enc(src[:, :-1], torch.tensor([lmax_enc] * 2))  # L_max itself is fine
    out, state = enc(src[:, :10], torch.tensor([10, 10])), {}
    prev = torch.full((2, 31), 5)
    with torch.no_grad(), pytest.raises(ValueError, match="decoder sequence of length 31 exceeds the 30"):
        for t in range(1, 32):
            dec(prev[:, :t], encoder_out=out, incremental_state=state)
    assert t == 31  # the first 30 steps decode


def test_lmax_is_capped_by_posnet_max_positions(data_bin):
    """L_max = min(--posnet-max-positions, --max-source/target-positions); the cap defaults to 256 (the paper's
    parameter counts; at fairseq's 1024 PosNet-Embed trailed SAPE on Multi30k). fairseq filters with it, the
    signature shows the L_max built, and the length error names the flag that set it."""
    fairseq_default = ["--max-source-positions", "1024", "--max-target-positions", "1024"]
    _, model, _ = build_model(data_bin, EMBED, fairseq_default)
    sig = model.encoder.pe.signature()
    assert model.encoder.pe.kernels["phi"].shape[0] == 256 and model.max_positions() == (256, 256)
    assert sig.endswith("|lmax:256") and "posnet_max_positions" not in sig
    _, model, _ = build_model(data_bin, EMBED, fairseq_default + ["--posnet-max-positions", "1024"])
    assert model.encoder.pe.max_positions == 1024 and model.max_positions() == (1024, 1024)
    _, model, _ = build_model(data_bin, ATTN, ["--max-source-positions", "20", "--max-target-positions", "30",
                                               "--posnet-max-positions", "25"])
    enc = model.encoder
    assert (enc.pe.max_positions, model.decoder.pe.max_positions) == (25, 25) and model.max_positions() == (20, 25)
    with pytest.raises(ValueError, match="exceeds the 25 positions.*retrain with a larger --posnet-max-positions"):
        enc(torch.full((1, 26), 5), torch.tensor([26]))
    _, model, _ = build_model(data_bin, ATTN, ["--max-source-positions", "20", "--max-target-positions", "30"])
    with pytest.raises(ValueError, match="exceeds the 30 positions.*retrain with a larger --max-source-positions"):
        model.encoder(torch.full((1, 31), 5), torch.tensor([31]))
    with pytest.raises(PEConfigError, match="--posnet-max-positions must be at least 1"):
        build_model(data_bin, EMBED, ["--posnet-max-positions", "0"])


def test_sides_and_flag_validation(data_bin):
    _, model, _ = build_model(data_bin, EMBED, ["--posnet-sides", "decoder"])
    assert model.encoder.pe.name == "nope" and model.decoder.pe.name == "posnet_embed"
    _, model, _ = build_model(data_bin, EMBED, RELEASED)
    assert model.encoder.pe.max_positions == 512 and model.decoder.pe.name == "nope"  # no position signal
    assert not model.decoder.pe.has_embedding_hook() and not model.decoder.pe.has_attention_hooks()
    with pytest.raises(PEConfigError, match="--posnet-dim is a flag of pe 'posnet_embed'"):
        build_model(data_bin, ATTN, ["--posnet-dim", "8"])
    _, model, _ = build_model(data_bin, ATTN)
    for layer in model.decoder.layers:  # self-attention carries the kernels, cross-attention is fairseq's own
        assert type(layer.self_attn).__name__ == "PEAttention"
        assert type(layer.encoder_attn).__name__ == "MultiheadAttention"


def test_init_and_dropout_flags():
    torch.manual_seed(0)
    for init, std in (("released", (2 / (32 ** 2 + 500 * 32)) ** 0.5), ("per-matrix", 32 ** -0.5)):
        phi = _module("posnet_embed", lmax=500, posnet_dim=32, posnet_init=init).kernels["phi"]
        assert abs(phi.std().item() / std - 1) < 0.01, (init, phi.std().item(), std)  # 512k samples
    pe = _module("posnet_embed", posnet_dim=8, posnet_dropout=0.5)
    x, pos = torch.randn(2, 5, 16), Positions.for_tokens(torch.zeros(2, 5).long(), 1)
    evaluated = pe.embed(x, pos)
    branch = pe.train().embed(x, pos) - x  # the dropped-out branch: zeros or 2x the eval branch
    kept = branch != 0
    assert 0 < kept.float().mean() < 1
    torch.testing.assert_close(branch[kept], 2 * (evaluated - x)[kept])


# ---- fp16 --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("cls,cfg_cls", [(PosNetEmbedding, PosNetEmbedConfig), (PosNetAttention, PosNetAttnConfig)])
def test_half_precision_matches_float32(cls, cfg_cls, left):
    """CPU float16 (bmm, matmul, relu, index ops all run in half on CPU, no bfloat16 stand-in needed) is within
    2e-3 of the output's scale of float32 (measured ~5e-4, one half-precision rounding of the output)."""
    torch.manual_seed(0)
    pe = _module(cls.name, lmax=64)
    pos, nonpad = padded_positions([40, 25, 3], 40, left=True) if left else (torch.arange(40).unsqueeze(0), None)
    x = torch.randn(3, 40, 16) if cls is PosNetEmbedding else torch.randn(3, 2, 40, 8)

    def run_(m, t):
        if cls is PosNetEmbedding:
            return m.embed(t, Positions(pos, pos, nonpad))
        return m.transform_values(t, m.prepare(pos, t.dtype), 0)

    full = run_(pe, x)
    half = run_(pe.half(), x.half())
    assert half.dtype == torch.float16
    err = (half.float() - full).abs().max() / full.abs().max()
    assert err < 2e-3, err


@pytest.mark.slow
@pytest.mark.parametrize("arch", [EMBED, ATTN])
def test_fp16_training_runs(arch, data_bin, tmp_path):
    log = run("fairseq_cli.train", [data_bin, "--user-dir", PLUGIN, "--arch", arch, *TRAIN_FLAGS, *CPU_FP16_FLAGS,
                                    "--max-update", "3", "--no-save",
                                    "--save-dir", tmp_path]).stdout
    assert "num_updates 3" in log or "num_updates=3" in log, log[-3000:]
    assert "loss_scale" in log and " nan" not in log.lower()


# ---- gradient accumulation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", [EMBED, ATTN])
def test_two_half_batches_give_the_gradients_of_the_full_batch(arch, data_bin):
    """What --update-freq 2 computes (fairseq sums the summed losses' gradients of the micro-batches, then
    divides by the total sample size) equals one batch of twice the size."""
    task, model, args = build_model(data_bin, arch, ["--posnet-init", "per-matrix"])
    model.double().train()
    criterion = task.build_criterion(args)

    g = assert_micro_batches_add_up(model, criterion, lambda ids: collate(task, ids, split="train"))
    assert g[next(k for k in g if "phi" in k)].abs().max() > 0  # the kernels are trained


# ---- parameter counts --------------------------------------------------------------------------------------
def closed_form(pe, c, h, dp, lmax):
    return 2 * c * dp + lmax * dp * dp if pe == "posnet_embed" else lmax * (c // h) ** 2


@pytest.mark.parametrize("arch,pe,extra,count", [  # L_max 256: the default cap under fairseq's 1024 positions
    (EMBED, "posnet_embed", [], 2 * 64 * 16 + 256 * 16 ** 2),
    (EMBED, "posnet_embed", ["--posnet-share", "none"], 2 * (2 * 64 * 16 + 256 * 16 ** 2)),
    (ATTN, "posnet_attn", [], 256 * 32 ** 2),
    (ATTN, "posnet_attn", ["--posnet-attn-per-layer"], 2 * 256 * 32 ** 2)])
def test_tiny_parameter_counts_are_closed_form(arch, pe, extra, count, data_bin):
    _, model, _ = build_model(data_bin, arch, extra)
    assert count == pe_parameter_count(model)
    assert closed_form(pe, 64, 2, 16, 256) * (2 if extra else 1) == count


def parameter_table(vocab=40000):
    """Rows (arch, L_max, total, PosNet-only) at base size with a dummy joined dictionary of ``vocab``."""
    from fairseq import options, tasks

    rows = []
    with tempfile.TemporaryDirectory() as data:
        for lang in ("en", "de"):  # + 4 special symbols
            Path(data, f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(vocab - 4)))
        for pe, lmax in (("sape", 1024), ("posnet_embed", 1024), ("posnet_embed", 512), ("posnet_embed", 256),
                         ("posnet_embed", 200), ("posnet_attn", 1024), ("posnet_attn", 256), ("posnet_attn", 200)):
            argv = [data, "--user-dir", PLUGIN, "--arch", f"transformer_{pe}_wmt_en_de", "-s", "en", "-t", "de",
                    "--share-all-embeddings", "--max-source-positions", lmax, "--max-target-positions", lmax]
            argv += ["--posnet-max-positions", lmax] if pe != "sape" else []  # lift the default cap of 256
            args = options.parse_args_and_arch(options.get_training_parser(), list(map(str, argv)))
            with torch.device("meta"):  # parameter counts only: no storage, no initialisation
                model = tasks.setup_task(args).build_model(args)
            rows.append((pe, lmax, sum(p.numel() for p in model.parameters()), pe_parameter_count(model)))
            del model
    return rows


@pytest.mark.slow
def test_base_parameter_counts():
    rows = parameter_table()
    sape = rows[0][2]
    for pe, lmax, total, own in rows[1:]:
        assert own == closed_form(pe, 512, 8, 128, lmax) and total == sape + own
    assert [own for pe, lmax, _, own in rows if lmax == 200] == [3_407_872, 819_200]  # Table 1: +3.41M, +1.03M


if __name__ == "__main__":
    paper = {"sape": 63.08, "posnet_embed": 66.49, "posnet_attn": 64.11}  # Table 1, total parameters (M)
    print("| model | L_max | params total | PosNet-only | vs SAPE | paper total (vs SAPE) |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = parameter_table()
    for pe, lmax, total, own in rows:
        print(f"| transformer_{pe}_wmt_en_de | {lmax} | {total:,} ({total / 1e6:.2f}M) | {own:,} ({own / 1e6:.2f}M) | "
              f"+{(total - rows[0][2]) / 1e6:.2f}M | {paper[pe]:.2f}M (+{paper[pe] - paper['sape']:.2f}M) |")


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


@pytest.mark.parametrize("dec_dim, dec_heads, ok", [(16, 2, True), (32, 4, True), (32, 2, False), (16, 4, False)])
def test_posnet_attn_shares_kernels_only_between_stacks_of_one_head_size(dec_dim, dec_heads, ok):
    """PosNet-Attn kernels shared by the encoder (dim 16, 2 heads: head size 8) and the decoder: the (d, d) kernels
    fit a decoder of the same head size whatever its width (32 with 4 heads); another head size is refused, naming
    --posnet-share none, not left to fail in a matrix product."""
    cls = PE_REGISTRY["posnet_attn"]
    cfg, shared = cls.config_cls(posnet_share="enc-dec"), {}
    enc = cls.build(cfg, Dims(16, 2, 2, 32, 1, "encoder", 32), shared)
    build_decoder = lambda: cls.build(cfg, Dims(dec_dim, dec_heads, 2, 32, 1, "decoder", 32), shared)  # noqa: E731
    if ok:
        assert build_decoder().kernels is enc.kernels
    else:
        with pytest.raises(ValueError, match=rf"kernels \(1 x 8x8\) do not fit the decoder's 2 layers of head dim "
                                             rf"{dec_dim // dec_heads}; pass --posnet-share none"):
            build_decoder()
