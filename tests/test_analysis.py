"""pe_plugin.analysis and its command lines pe_tools.probe (pe-probe), pe_tools.swap_probe (pe-swap-probe).

Expected values come from closed forms, small maps computed by hand, and the Locality/Symmetry table of
docs/analysis.md §Attenuated map (Chen et al.'s map at L=128), never from the code under test. The model tests
use the no-PE property (docs/encodings.md §no-PE): without positions, identical words get uniform attention and any
permutation of the source leaves the translation and its likelihood unchanged, while SAPE does not.
"""
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import pe_testing
from pe_testing import save_checkpoint
from pe_references import CHEN_TABLE, uniform_locality
from pe_plugin.analysis import indicators as ind
from pe_plugin.analysis import probing, swap
from pe_plugin.models.validation import pe_signature
from pe_tools import probe as probe_cli
from pe_tools import swap_probe as swap_probe_cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run faster on one thread, and the machine is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def dist_map(f, L):
    i = np.arange(L)
    return f(np.abs(i[:, None] - i[None, :]).astype(float))


# ---- indicators on known maps --------------------------------------------------------------------------

def test_identity_map():
    L = 16
    A = np.eye(L)
    assert ind.locality(A) == pytest.approx(1.0)
    assert ind.aiv(A) == pytest.approx(0.0, abs=1e-15)  # every diagonal is constant
    assert ind.opr(A, ties="wang") == 0.0  # (1, 0, 0, ...): decreasing, then ties
    # tie-0.5: a sequence of length n has (n-1)(n-2)/2 tied pairs out of n(n-1)/2 -> (n-2)/(2n), weighted by n
    lengths = [n for i in range(L) for n in (i + 1, L - i) if n >= 2]
    expected = sum((n - 2) / (2 * n) * n for n in lengths) / sum(lengths)
    assert ind.opr(A, ties="half") == pytest.approx(expected)
    assert ind.symmetry_deviation(A) == 0.0
    assert ind.symmetry_code(A) == 1.0
    assert np.isnan(ind.symmetry_abs(A))  # no off-diagonal mass to compare
    assert np.isnan(ind.direction_balance(A))  # 0 / 0


@pytest.mark.parametrize("L", [8, 32, 65, 128])
def test_uniform_map(L):
    A = np.full((L, L), 1.0 / L)
    brute = sum(2.0 ** -abs(i - j) for i in range(L) for j in range(L)) / L ** 2
    assert ind.locality(A) == pytest.approx(uniform_locality(L), rel=1e-12)
    assert ind.locality(A) == pytest.approx(brute, rel=1e-12)
    assert np.isnan(ind.aiv(A))  # var(A) = 0: the NaN guard
    assert ind.opr(A, ties="wang") == 0.0
    assert ind.opr(A, ties="half") == 0.5
    assert ind.opr(A, ties="half", first_k=20) == 0.5
    assert ind.symmetry_code(A) == 1.0 and ind.symmetry_abs(A) == 1.0
    assert ind.symmetry_deviation(A) == 0.0 and ind.direction_balance(A) == pytest.approx(1.0)
    assert ind.locality(A) == pytest.approx(3 / L, rel=0.2 if L >= 32 else 1)  # the ~3/L rule of thumb


@pytest.mark.parametrize("w,sym1,half,double", CHEN_TABLE)
def test_attenuated_map_table(w, sym1, half, double):
    for s, (loc, sym) in ((1.0, sym1), (0.5, half), (2.0, double)):
        A = ind.attenuated_map(128, w, s)
        assert A.sum(axis=1) == pytest.approx(np.ones(128))
        assert ind.locality(A) == pytest.approx(loc, abs=6e-4), (w, s)
        assert ind.symmetry_code(A) == pytest.approx(sym, abs=6e-4), (w, s)
        if s == 1.0:
            assert ind.symmetry_abs(A) == pytest.approx(1.0, abs=1e-12)
        else:
            assert ind.symmetry_abs(A) < 0.99
    # s > 1 suppresses the right side: more mass on preceding keys, DB > 1 in the text-consistent direction
    assert ind.direction_balance(ind.attenuated_map(128, w, 2.0)) > 1.0
    assert ind.direction_balance(ind.attenuated_map(128, w, 0.5)) < 1.0


def test_symmetry_code_is_magnitude_blind():
    A = ind.attenuated_map(128, 0.05, 1.0)
    noisy = A + 1e-9 * np.random.default_rng(0).random(A.shape)
    assert ind.symmetry_code(A) == pytest.approx(1.0)
    assert ind.symmetry_code(noisy) == pytest.approx(0.618, abs=0.01)  # docs/analysis.md §Symmetry (magnitude-blind)
    assert ind.symmetry_abs(noisy) == pytest.approx(1.0, abs=1e-6)


def test_two_level_map():
    """Preceding keys weigh 1, succeeding 2 (diagonal 1): every row has constant discrepancy 1."""
    L = 30
    rel = np.arange(L)[None, :] - np.arange(L)[:, None]
    A = np.where(rel > 0, 2.0, 1.0)
    assert ind.direction_balance(A, l=20) == pytest.approx(0.5)  # preceding / succeeding
    assert ind.symmetry_deviation(A) == pytest.approx(1.0)
    assert ind.symmetry_code(A) == 1.0  # constant rows normalise to zeros: blind to the asymmetry
    assert ind.symmetry_abs(A) == pytest.approx(1 - 1 / 3)
    # DB's offset range: an asymmetry only beyond offset 20 is invisible to DB_20
    B = np.where(rel > 20, 5.0, 1.0)
    assert ind.direction_balance(B, l=20) == 1.0
    assert ind.direction_balance(B, l=29) < 1.0
    assert ind.direction_balance(np.tril(B), l=20) == float("inf")  # causal


def test_opr_known_orders():
    L = 24
    assert ind.opr(dist_map(lambda d: 0.5 ** d, L)) == 0.0  # decreasing with distance
    assert ind.opr(dist_map(lambda d: 2.0 ** d, L), ties="half") == 1.0  # increasing
    # increasing up to offset 4, then decreasing: the first-5 variant sees only the increase
    peaked = dist_map(lambda d: np.where(d <= 4, d + 1.0, 1.0 / np.maximum(d, 1)), L)
    assert ind.opr(peaked, first_k=5) == 1.0
    assert ind.opr(peaked) < 0.5
    rnd = np.random.default_rng(3).random((64, 64))
    assert ind.opr(rnd) == pytest.approx(0.5, abs=0.03)


def test_aiv_known_values():
    toeplitz = dist_map(lambda d: 1.0 / (1.0 + d), 20) + np.triu(np.ones((20, 20)), 1) * 0.3
    assert ind.aiv(toeplitz) == pytest.approx(0.0, abs=1e-12)
    rnd = np.random.default_rng(4).random((64, 64))
    assert 0.9 < ind.aiv(rnd) <= 1.0
    # causal, by hand: groups l=0 {1,.6,.5}, l=-1 {.4,.3}, l=-2 {.2}; lower-triangle variance 0.4/6
    A = np.array([[1.0, 0, 0], [0.4, 0.6, 0], [0.2, 0.3, 0.5]])
    within = (0.14 / 3 * 3 + 0.0025 * 2 + 0) / 6
    assert ind.aiv(A, causal=True) == pytest.approx(within / (0.4 / 6))
    assert ind.aiv(A, causal=True) == pytest.approx(0.3625)
    # causal OPR: S_1- = (.6, .4) decreasing, S_2- = (.2, .3, .5) increasing -> (0*2 + 1*3) / 5
    B = np.array([[1.0, 0, 0], [0.4, 0.6, 0], [0.5, 0.3, 0.2]])
    assert ind.opr(B, causal=True) == pytest.approx(0.6)


def test_drop_position_renormalises():
    A = np.array([[0.5, 0.25, 0.25], [0.2, 0.2, 0.6], [0.1, 0.3, 0.6]])
    B = ind.drop_position(A, 2)
    assert B == pytest.approx(np.array([[2 / 3, 1 / 3], [0.5, 0.5]]))


# ---- capturing attention from real models --------------------------------------------------------------

def test_capture_matches_recomputation_and_restores(data_bin):
    """fairseq MultiheadAttention (sape) and PEAttention (t5): head-wise probabilities, rows sum to 1, the
    decoder's are causal, the model output is unchanged, and everything is restored afterwards."""
    for arch in ("transformer_sape_tiny", "transformer_t5_tiny"):
        task, model, _ = pe_testing.build_model(data_bin, arch)
        sample = pe_testing.batch(task, n=4)
        net = sample["net_input"]
        with torch.no_grad():
            plain, _ = model(**net)
            inputs = {}
            hook = model.encoder.layers[0].self_attn.register_forward_pre_hook(
                lambda m, a, kw: inputs.update(x=kw["query"]), with_kwargs=True)  # returns None: no change
            with probing.capture_self_attention(model) as cap:
                captured, _ = model(**net)
            hook.remove()
        assert torch.equal(plain, captured) or (plain - captured).abs().max() < 1e-5
        enc0 = cap[("encoder", 0)][0]  # (B,H,S,S)
        heads = model.encoder.layers[0].self_attn.num_heads
        assert enc0.shape == (4, heads, net["src_tokens"].size(1), net["src_tokens"].size(1))
        assert torch.allclose(enc0.sum(-1), torch.ones(()), atol=1e-5)
        dec = cap[("decoder", 1)][0]  # (B,H,T,T)
        assert torch.all(dec.triu(1) == 0)
        assert len(cap) == 2 * len(model.encoder.layers)
        if arch == "transformer_sape_tiny":  # independent recomputation of layer 1 from its input and weights
            mha = model.encoder.layers[0].self_attn
            x = inputs["x"]  # (S,B,C)
            q = mha.q_proj(x) * mha.scaling
            k = mha.k_proj(x)
            split = lambda t: t.view(t.size(0), t.size(1), heads, -1).permute(1, 2, 0, 3)  # noqa: E731
            logits = split(q) @ split(k).transpose(-1, -2)  # (B,H,S,S)
            pad = net["src_tokens"].eq(task.source_dictionary.pad()).view(4, 1, 1, -1)
            ref = logits.masked_fill(pad, float("-inf")).softmax(-1)
            assert torch.allclose(enc0, ref, atol=1e-5)
            assert mha.skip_embed_dim_check is False
        for side in probing.SIDES:
            for layer in getattr(model, side).layers:
                assert not layer.self_attn._forward_hooks and not layer.self_attn._forward_pre_hooks
                assert getattr(layer.self_attn, "capture_weights", False) is False


def test_identical_word_probe_on_untrained_models(data_bin):
    """no-PE and PosNet-Attn (values only, docs/analysis.md §Identical-word probing): exactly uniform layer-1
    maps; SAPE not; RPE (relative logits) nearly translation invariant, SAPE not."""
    L = 12
    tables, dev = {}, {}
    for pe in ("nope", "posnet_attn", "sape", "rpe"):
        task, model, _ = pe_testing.build_model(data_bin, f"transformer_{pe}_tiny")
        words, info = probing.probe_words(task.source_dictionary, 5, seed=0)
        assert info["used"] == 5 and info["rule"] != "any symbol"
        maps = probing.identical_word_maps(model, words, words, L, task.source_dictionary.eos())
        assert maps["encoder"].shape == (2, L + 1, L + 1) and maps["decoder"].shape == (2, L, L)
        layer1 = probing.variants("encoder", maps["encoder"])["without_special"][0]
        dev[pe] = np.abs(layer1 - 1.0 / L).max()
        tables[pe] = probing.indicator_table(maps)
    assert dev["nope"] < 1e-12 and dev["posnet_attn"] < 1e-12 and dev["sape"] > 1e-3
    for pe in ("nope", "posnet_attn"):
        row = tables[pe]["encoder"]["without_special"]["layer1"]
        assert row["locality"] == pytest.approx(uniform_locality(L), abs=1e-9)
        assert np.isnan(row["aiv"]) and row["opr"] == 0.0 and row["opr_tie_half"] == 0.5
        assert row["sym_code"] == 1.0 and row["sym_abs"] == pytest.approx(1.0) and row["sd"] < 1e-12
    nope = tables["nope"]
    for name in ("layer2", "mean"):  # identical inputs stay identical through a position-free encoder
        assert nope["encoder"]["without_special"][name]["locality"] == pytest.approx(uniform_locality(L), abs=1e-9)
    # decoder layer 1 without EOS: row i attends uniformly to its i+1 identical words,
    # Loc = mean_i (2 - 2^-i) / (i + 1)
    causal = np.mean([(2 - 2.0 ** -i) / (i + 1) for i in range(L - 1)])
    dec = nope["decoder"]["without_special"]["layer1"]
    assert dec["locality"] == pytest.approx(causal, abs=1e-9)
    assert dec["db20"] == float("inf") and np.isnan(dec["sym_code"]) and np.isnan(dec["sd"])
    sape, rpe = (tables[pe]["encoder"]["without_special"]["layer1"] for pe in ("sape", "rpe"))
    assert rpe["aiv"] < 0.2 < 0.5 < sape["aiv"]


def test_probe_words_rules():
    from fairseq.data import Dictionary

    d = Dictionary()
    for s in ["the", "a", "house@@", "x1", "1990", "cat", ",", "dogs", "walk"]:
        d.add_symbol(s)
    words, info = probing.probe_words(d, 3, seed=0)
    assert info["rule"].startswith("whole word, alphabetic") and info["used"] == 3
    assert {d[i] for i in words} <= {"the", "cat", "dogs", "walk"}
    words, info = probing.probe_words(d, 100, max_rank=5)  # too few strict words: the largest relaxed set
    assert info["used"] == 5 and info["rule"] == "any symbol"
    prefer = np.zeros(len(d), bool)
    prefer[d.index("dogs")] = prefer[d.index("walk")] = True
    words, info = probing.probe_words(d, 10, prefer=prefer)
    assert sorted(d[i] for i in words) == ["dogs", "walk"]


# ---- command-line tools on a saved checkpoint ----------------------------------------------------------


def test_probe_and_swap_cli(data_bin, tmp_path):
    task, model, args = pe_testing.build_model(data_bin, "transformer_rpe_tiny")
    ckpt = save_checkpoint(model, args, tmp_path / "checkpoint_last.pt")
    assert probe_cli.main([str(ckpt), "--data", str(data_bin), "--length", "16", "--words", "40",
                                  "--out", str(tmp_path / "probe")]) == 0
    report = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert report["pe_signature"] == pe_signature(model) and report["pe_signature"].startswith("pe:rpe")
    # joined dictionary: encoder words from the source side (w*), decoder words from the target side (W*)
    assert report["words"]["encoder"]["used"] == 30 and report["words"]["encoder"]["language_filter"]
    assert all(w.startswith("w") for w in report["words"]["encoder"]["sample"])
    assert all(w.startswith("W") for w in report["words"]["decoder"]["sample"])
    enc, dec = report["indicators"]["encoder"], report["indicators"]["decoder"]
    assert set(enc) == {"with_special", "without_special"}
    assert set(enc["with_special"]) == {"layer1", "layer2", "mean"}
    row = enc["with_special"]["layer1"]
    assert {"locality", "sym_code", "sym_abs", "aiv", "opr", "opr_tie_half", "opr_first20", "sd", "db20"} <= set(row)
    assert all(isinstance(v, float) for v in row.values())
    assert dec["with_special"]["mean"]["db20"] == "inf" and dec["with_special"]["mean"]["sym_code"] is None
    maps = np.load(tmp_path / "probe" / "probe_maps.npz")
    assert maps["encoder"].shape == (2, 17, 17) and maps["decoder"].shape == (2, 16, 16)
    for side in ("encoder", "decoder"):
        png = (tmp_path / "probe" / f"probe_{side}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) < 200_000
    assert not list((tmp_path / "probe").glob(".*tmp"))

    assert swap_probe_cli.main([str(ckpt), "--data", str(data_bin), "--max-sentences", "6", "--beam", "2",
                                       "--max-len-b", "8", "--out", str(tmp_path / "swap")]) == 0
    rep = json.loads((tmp_path / "swap" / "swap_probe.json").read_text())
    assert rep["pe_signature"] == pe_signature(model) and rep["n_sentences"] == 6
    assert set(rep["perturbations"]) == {"local", "global", "shuffle"}
    assert rep["perturbations"]["shuffle"]["n"] == 6
    assert "nc:6|nw:2" in rep["metric_signatures"]["chrf"]


# ---- word-swap probe: the no-PE permutation property ---------------------------------------------------

def test_perturbations_are_word_permutations():
    from fairseq.data import Dictionary

    d = Dictionary()
    syms = "the big@@ gest house@@ s are in a very old town".split()
    ids = [d.add_symbol(s) for s in syms]
    src = torch.tensor(ids + [d.eos()])
    for kind in swap.PERTURBATIONS:
        for seed in range(20):
            new = swap.perturb(src, d, kind, random.Random(seed))
            assert new is not None and new[-1] == d.eos() and not torch.equal(new, src)
            assert sorted(new.tolist()) == sorted(src.tolist())
            text = d.string(new, bpe_symbol="subword_nmt").split()
            assert sorted(text) == sorted(d.string(src, bpe_symbol="subword_nmt").split())  # words kept whole
    assert swap.local_order(2, random.Random(0)) is None and swap.global_order(2, random.Random(0)) is None
    order = swap.global_order(10, random.Random(5))
    moved = [i for i, j in enumerate(order) if i != j]
    assert max(moved) - min(moved) >= 5


def test_nope_translation_is_permutation_invariant_and_sape_is_not(data_bin):
    results = {}
    for pe in ("nope", "sape"):
        task, model, _ = pe_testing.build_model(data_bin, f"transformer_{pe}_tiny")
        task.load_dataset("test")
        srcs = [task.dataset("test").src[i] for i in range(12)]
        rep = swap.swap_probe(model, task, srcs, beam=2, max_len_b=8)
        # and two arbitrary permutations: reversal and a random shuffle of the tokens
        hyps = swap.translate(model, task, srcs, 2, 0.0, 8)
        gen = torch.Generator().manual_seed(0)
        perms = [torch.cat([s[:-1].flip(0), s[-1:]]) for s in srcs]
        perms += [torch.cat([s[:-1][torch.randperm(len(s) - 1, generator=gen)], s[-1:]]) for s in srcs]
        base = swap.forced_nll(model, task, srcs + srcs, hyps + hyps)
        moved = swap.forced_nll(model, task, perms, hyps + hyps)
        results[pe] = (rep, np.abs(moved - base).max())
    nope, nope_direct = results["nope"]
    for kind, r in nope["perturbations"].items():
        assert r["n"] >= 8, kind
        assert r["delta_out_chrf"] == 0.0 and r["changed_outputs"] == 0.0, kind
        assert abs(r["delta_out_bleu"]) < 1e-9, kind
        assert r["delta_nll_per_token_abs_max"] <= 1e-5, kind
    assert nope_direct <= 1e-5
    assert all(np.isnan(v) for v in nope["sensitivity_ratio_global_over_local"].values())  # noise / noise
    sape, sape_direct = results["sape"]
    assert max(r["delta_nll_per_token_abs_max"] for r in sape["perturbations"].values()) > 1e-3
    assert sape_direct > 1e-3


@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (2, 2, 2), (4,)])
def test_an_attention_map_that_is_not_square_is_refused(shape):
    with pytest.raises(ValueError, match=r"an attention map must be square \(L, L\), got shape"):
        ind.as_map(np.ones(shape))
    assert ind.as_map(torch.eye(3)).shape == (3, 3)


def test_word_groups_keep_a_last_word_left_open_by_bpe():
    """Tokens grouped into words by BPE's "@@" continuation mark; a last token that still carries it (a sentence
    cut inside a word) is a word of its own, not dropped."""
    from pe_plugin.analysis.swap import word_groups

    assert word_groups(["the", "ca@@", "t", "sat"]) == [[0], [1, 2], [3]]
    assert word_groups(["a@@", "b", "c@@"]) == [[0, 1], [2]]
    assert word_groups(["x@@"]) == [[0]]


@pytest.mark.parametrize("n", [3, 4, 5, 9])
def test_local_order_permutes_a_window_that_fits_even_one_as_long_as_the_sentence(n):
    """A window of 3-5 consecutive words (among the sizes that fit: a sentence of 3 words takes a window of all 3)
    is shuffled into another order; the words outside it keep their places. Fewer than 3 words: None."""
    from pe_plugin.analysis.swap import local_order

    for seed in range(20):
        perm = local_order(n, random.Random(seed))
        assert perm is not None and sorted(perm) == list(range(n)) and perm != list(range(n))
        moved = [i for i, p in enumerate(perm) if p != i]
        assert moved[-1] - moved[0] < 5
    assert local_order(2, random.Random(0)) is None
