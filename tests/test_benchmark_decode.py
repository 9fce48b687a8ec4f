"""pe-bench decode (pe_tools/bench/decode.py): that it runs fairseq-generate's own beam search (the hypotheses of a
direct ``python -m fairseq_cli.generate`` run, and SAPE's equal to stock fairseq's), that ``--equal-length`` makes
every encoding take the same decoder steps (counted, not timed), the rotation of the order over rounds, and each
ratio taken against stock's run of the same round. Tiny models, a generated corpus of a few sentences. Also the work
of one PosNet-Embed decoder step (elements allocated, not seconds), and the records of examples/benchmarks/cpu/ with
the README's decode column."""
import hashlib
import json
import math
import multiprocessing
import subprocess
import sys

import pytest

from pe_testing import REPO
from pe_tools.bench import cli, decode
from pe_tools.bench._build import STOCK

SENTENCES, BATCH, LENGTH = 10, 4, 5
# 4 words: an untrained model ends some hypotheses early unless --min-len forbids it
TINY = ["--recipe", "wmt14", "--size", "tiny", "--sentences", str(SENTENCES), "--vocab", "8", "--mean", "5"]


def digest(hypotheses) -> str:
    return hashlib.sha256("\n".join(hypotheses).encode()).hexdigest()


@pytest.fixture(scope="module")
def every_encoding(tmp_path_factory):
    """One round of every registered encoding and stock, every hypothesis LENGTH tokens, batches of BATCH."""
    out = tmp_path_factory.mktemp("decode")
    assert cli.main(["decode", *TINY, "--equal-length", str(LENGTH), "--rounds", "1", "--out-dir", str(out),
                     "--extra", "--batch-size", str(BATCH)]) == 0
    return json.loads((out / "decode.json").read_text())


@pytest.mark.slow
def test_equal_length_makes_every_encoding_take_the_same_decoder_steps(every_encoding):
    from pe_plugin.encodings import PE_REGISTRY

    runs = every_encoding["measurements"]
    assert [m["pe"] for m in runs] == [*PE_REGISTRY, STOCK]
    batches = math.ceil(SENTENCES / BATCH)
    for m in runs:  # fairseq's search makes maximum length + 1 decoder calls a batch (the last one for the eos)
        assert (m["batches"], m["steps"], m["sentences"]) == (batches, batches * (LENGTH + 1), SENTENCES), m["pe"]
        assert m["hypothesis_lengths"] == [LENGTH + 1] and m["tokens"] == SENTENCES * (LENGTH + 1), m["pe"]


@pytest.mark.slow
def test_sape_decodes_as_stock_fairseq(every_encoding):
    """The same model (SAPE is fairseq's sinusoids) under the same seed: the same hypotheses as stock's."""
    runs = {m["pe"]: m for m in every_encoding["measurements"]}
    assert runs["sape"]["hypotheses_sha256"] == runs[STOCK]["hypotheses_sha256"]
    assert runs["t5"]["hypotheses_sha256"] != runs[STOCK]["hypotheses_sha256"]  # another model decodes otherwise


@pytest.mark.slow
def test_the_hypotheses_are_those_of_fairseq_generate_run_directly(tmp_path):
    from types import SimpleNamespace

    data = decode.generated_corpus(tmp_path / "corpus", SimpleNamespace(sentences=SENTENCES, vocab=8, seed=1, mean=5,
                                                                         pair="en-de"))
    decode.save_untrained("t5", "wmt14", "en-de", "tiny", data, tmp_path / "t5.pt")
    argv = decode.generate_argv("t5", tmp_path / "t5.pt", data, "valid", "en-de", "cpu", None,
                                ["--batch-size", str(BATCH)])
    measured = decode.decode_once(argv, cuda=False)
    # users' loader settings (no --num-workers of the benchmark's own), and their worker reaped by the decode itself
    # (left to the next collection, its shutdown waited torch's 5 s status interval, every decode)
    assert "--num-workers" not in argv and multiprocessing.active_children() == []
    direct = subprocess.run([sys.executable, "-m", "fairseq_cli.generate", *map(str, argv)], capture_output=True,
                            text=True, cwd=REPO, check=True).stdout
    hyps = dict(line.split("\t")[0::2] for line in direct.splitlines() if line.startswith("H-"))
    assert len(hyps) == SENTENCES
    assert measured["hypotheses"] == [hyps[f"H-{i}"] for i in range(SENTENCES)]
    assert measured["sentences"] == SENTENCES and measured["steps"] > 0
    assert "--lenpen" in argv and "--min-len" not in argv  # the recipe's flags, free length without --equal-length


def test_the_meter_puts_fairseqs_methods_back_even_after_an_error():
    from fairseq.sequence_generator import EnsembleModel, SequenceGenerator

    before = (SequenceGenerator._generate, EnsembleModel.forward_decoder)
    with pytest.raises(KeyError):
        with decode.StepMeter():
            assert (SequenceGenerator._generate, EnsembleModel.forward_decoder) != before
            raise KeyError("a decode that fails")
    assert (SequenceGenerator._generate, EnsembleModel.forward_decoder) == before


def test_decode_flags_are_pe_generates_with_equal_length_forcing_the_length():
    from pe_tools.recipes.generate import DECODE_BATCH, DECODE_FLAGS

    def pairs(flags):
        return dict(zip(flags[::2], flags[1::2]))

    assert pairs(decode.decode_flags()) == pairs(DECODE_FLAGS + DECODE_BATCH)
    forced = pairs(decode.decode_flags(30))
    assert {k: forced[k] for k in ("--max-len-a", "--max-len-b", "--min-len")} == {
        "--max-len-a": "0", "--max-len-b": "30", "--min-len": "30"}
    assert {k: v for k, v in forced.items() if not k.startswith(("--max-len", "--min-len"))} == {
        k: v for k, v in pairs(DECODE_FLAGS + DECODE_BATCH).items() if not k.startswith("--max-len")}


# ------------------------------------------------------------------------------------------------
# rounds and ratios, with the decodes replaced by a stand-in that records their order

@pytest.fixture
def fake_decodes(monkeypatch):
    calls = []

    def save(pe, recipe, pair, size, data, path):
        return dict(arch=f"arch_{pe}", params=1)

    def decode_once(argv, cuda):
        pe = argv[argv.index("--path") + 1].rsplit("/", 1)[1][:-3]
        calls.append(pe)
        v = float(len(calls))  # a figure unique to each call
        return dict(batches=1, steps=10, sentences=2, tokens=12, generate_wall_s=v, generate_cpu_s=v,
                    sentences_per_s=2 / v, tokens_per_s=12 / v, step_wall_s=2 * v, step_cpu_s=v, decoder_cpu_s=v / 2,
                    peak_bytes=100 * v, decode_bytes=10 * v, hypotheses=["a b"], hypothesis_lengths=[6])

    monkeypatch.setattr(decode, "save_untrained", save)
    monkeypatch.setattr(decode, "decode_once", decode_once)
    return calls


def test_the_order_is_rotated_each_round_after_one_discarded_warm_up(tmp_path, fake_decodes):
    assert cli.main(["decode", *TINY, "--pe", "sape", "t5", "--rounds", "3", "--out-dir", str(tmp_path)]) == 0
    assert fake_decodes == ["sape",  # the warm-up, discarded
                            "sape", "t5", STOCK, "t5", STOCK, "sape", STOCK, "sape", "t5"]
    runs = json.loads((tmp_path / "decode.json").read_text())["measurements"]
    assert [(m["pe"], m["round"], m["step_cpu_s"]) for m in runs] == [
        ("sape", 1, 2.0), ("t5", 1, 3.0), (STOCK, 1, 4.0), ("t5", 2, 5.0), (STOCK, 2, 6.0), ("sape", 2, 7.0),
        (STOCK, 3, 8.0), ("sape", 3, 9.0), ("t5", 3, 10.0)]


def test_each_ratio_is_against_stocks_run_of_the_same_round(tmp_path, fake_decodes):
    assert cli.main(["decode", *TINY, "--pe", "sape", "t5", "--rounds", "3", "--out-dir", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "decode.json").read_text())
    runs = data["measurements"]
    stock = {m["round"]: m for m in runs if m["pe"] == STOCK}
    by_pe = {r["pe"]: r for r in data["results"]}
    for pe in ("sape", "t5"):
        mine = [m for m in runs if m["pe"] == pe]
        for figure, ratio in decode.RATIOS.items():
            want = sorted(m[figure] / stock[m["round"]][figure] for m in mine)
            got = by_pe[pe][ratio]
            assert (got["min"], got["median"], got["max"], got["n"]) == pytest.approx((*want, 3)), (pe, ratio)
    assert data["settings"]["basis"] == "step_cpu_to_stock"  # a CPU: the process's CPU time per step


@pytest.mark.parametrize("ratio, bound, verdict", [(1.15, 1.15, "meets"), (1.1501, 1.15, "misses"),
                                                    (1.05, 1.05, "meets"), (1.0501, 1.05, "misses")])
def test_the_goal_holds_up_to_its_bound_and_not_past_it(ratio, bound, verdict):
    pe = "sape" if bound == decode.SAPE_GOAL else "t5"
    rows = [dict(pe=pe, arch="a", params=1, batches=1, steps=1, sentences=1, tokens=1, round=k,
                 step_cpu_to_stock=ratio) for k in (1, 2, 3)]
    (result,) = decode.summarise(rows, "step_cpu_to_stock")
    assert result["goal"] == {"figure": "step_cpu_to_stock", "bound": bound, "verdict": verdict}


@pytest.mark.slow
def test_bad_options_name_the_flag_and_the_fix(tmp_path, capsys):
    assert cli.main(["decode", "--data", str(tmp_path)]) == 2
    assert f"--data {tmp_path}: no fairseq dictionary" in capsys.readouterr().err
    assert cli.main(["decode", "--recipe", "wmt14", "--size", "huge"]) == 2
    assert "--size huge: not a size of recipe wmt14; its sizes: base, big" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# the work of one decoder step, counted

def step_allocations(pe: str, beams: int = 64, steps: int = 3, vocab: int = 50) -> list:
    """Elements of the tensors that the ops of each incremental decoder step allocate (views and in-place ops left
    out), for ``pe``'s tiny model decoding ``beams`` rows of a 5-token source; every step after the first (the first
    also computes the cross-attention's keys and values)."""
    import torch
    from torch.utils._pytree import tree_flatten

    from pe_tools.bench import _common
    from pe_tools.bench._build import EOS, build_model

    model, _ = build_model(pe, "tiny", vocab, "none", "cpu")
    model.eval()
    src = torch.randint(4, vocab, (beams, 5), generator=torch.Generator().manual_seed(0))
    counts = []

    def on_op(func, args, kwargs, out):
        if all(r.alias_info is None for r in func._schema.returns):
            counts[-1] += sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))

    with torch.no_grad():
        enc = model.encoder(src, src_lengths=torch.full((beams,), 5))
        state, prev = {}, torch.full((beams, 1), EOS)
        for _ in range(steps):
            counts.append(0)
            with _common.op_mode(on_op):
                logits, _ = model.decoder(prev, encoder_out=enc, incremental_state=state)
            logits[..., :4] = float("-inf")  # no specials: no padding in the prefix
            prev = torch.cat([prev, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return counts[1:]


def test_a_posnet_embed_decoder_step_copies_no_kernel_per_token():
    """One decoding step's kernel product reads each row's kernel phi_p in place: PosNet-Embed's step allocates
    fewer elements beyond SAPE's step than the beams' B kernels of d_p x d_p would take alone (a gather of them,
    as before, made the step 1.2x stock's on a CPU at Multi30k's small shape)."""
    from pe_plugin.encodings.posnet_embedding import PosNetEmbedding

    beams, dp = 64, PosNetEmbedding.size_defaults["tiny"]["posnet_dim"]
    sape, posnet = step_allocations("sape", beams), step_allocations("posnet_embed", beams)
    for s, p in zip(sape, posnet):
        assert 0 < p - s < beams * dp * dp, (s, p)



# ------------------------------------------------------------------------------------------------
# the record and the README

RECORD = REPO / "examples" / "benchmarks" / "cpu" / "decode.json"
README_COLUMN = "decode step / stock, CPU"


def readme_cost_table() -> dict:
    """The README's cost table (the one under its ``computed cost_beside_gpu`` marker): first cell -> {header: cell}."""
    lines = (REPO / "README.md").read_text().splitlines()
    at = lines.index("<!-- table: computed cost_beside_gpu -->") + 1
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    header, rows = cells(lines[at]), {}
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        rows[cells(line)[0]] = dict(zip(header, cells(line)))
    return rows


def test_the_record_is_a_complete_cpu_run_of_equal_work():
    from pe_plugin.encodings import PE_REGISTRY

    data = json.loads(RECORD.read_text())
    s = data["settings"]
    assert data["complete"] and s["device"] == "cpu" and s["rounds"] == 3 and s["basis"] == "step_cpu_to_stock"
    assert s["recipe"] == "multi30k" and s["size"] == "small" and s["equal_length"] and s["threads"] == 1
    assert [r["pe"] for r in data["results"]] == [*PE_REGISTRY, STOCK]
    steps = {m["steps"] for m in data["measurements"]}
    assert len(steps) == 1 and {tuple(m["hypothesis_lengths"]) for m in data["measurements"]} == {
        (s["equal_length"] + 1,)}  # every decode the same decoder steps and tokens


def test_the_readme_decode_column_is_the_records():
    """Each row's CPU time per decoder step over stock's: the median over the record's rounds."""
    results = {r["pe"]: r for r in json.loads(RECORD.read_text())["results"]}
    rows = readme_cost_table()
    assert set(rows) == set(results)
    for pe, row in rows.items():
        assert row[README_COLUMN] == f"{results[pe]['step_cpu_to_stock']['median']:.2f}x", pe


def test_the_base_size_record_is_a_complete_cpu_run_of_equal_work():
    from pe_plugin.encodings import PE_REGISTRY

    data = json.loads(RECORD.with_name("decode_base.json").read_text())
    s = data["settings"]
    assert data["complete"] and s["device"] == "cpu" and s["rounds"] == 3 and s["basis"] == "step_cpu_to_stock"
    assert (s["recipe"], s["size"], s["vocab"]) == ("wmt14", "base", 40000) and s["equal_length"]
    assert [r["pe"] for r in data["results"]] == [*PE_REGISTRY, STOCK]
    assert len({m["steps"] for m in data["measurements"]}) == 1
    assert {tuple(m["hypothesis_lengths"]) for m in data["measurements"]} == {(s["equal_length"] + 1,)}
