"""Every figure in a table of the README, docs/ and examples/*/README.md is read from a recorded file, so that no
number goes stale.

A table is preceded by a marker comment that names where its figures come from:

    <!-- table: PATH -->             the table of a recorded markdown file (PATH#N: its N-th table, from 1). Every
                                     row of the document's table is a row of the recorded one (the same first
                                     cell) with the same text in every column the document shows (columns are
                                     matched by their header; a document may leave columns out).
    <!-- table: computed NAME -->    rebuilt by the test ``test_computed_<NAME>`` below, from recorded files or
                                     from the code itself.
    <!-- table: no measurements -->  definitions, citations or settings, not measured figures.

test_every_table_with_figures_names_its_source fails on a table that shows a digit and has no marker. The
recorded files are what the tools wrote: pe-report (examples/multi30k/report*), pe-demo (examples/demo),
pe-length (examples/length) and pe-bench (examples/benchmarks/cpu); their READMEs say how they were made.
The outputs the documents show are checked the same way, with ``<!-- output: PATH -->`` before the code block
(``<!-- output: command -->``: the command of the bash block above, which tests/test_readme.py runs).

A figure in the prose of a document (two or three decimals) is pinned in PINNED to the one recorded value it
states, read from the recorded file (or computed from it, or from the code's own constants) and rounded as written.
"""
import csv
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pe_testing
from pe_testing import REPO

# the documents whose tables are checked; docs/benchmarks.md and docs/hub.md have other owners (their markers, if
# any, are checked all the same)
OWNED = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")
                              if p.name not in ("benchmarks.md", "hub.md")),
         *sorted(str(p.relative_to(REPO)) for p in (REPO / "examples").glob("*/README.md"))]
ALL_DOCS = sorted(set(OWNED) | {str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")})
MARKER = re.compile(r"^<!-- (table|output): (.+?) -->$")
M30K = REPO / "examples" / "multi30k" / "report"


# ------------------------------------------------------------------------------------------------
# markdown tables

def split_row(line: str) -> list:
    """The cells of a markdown table row; ``\\|`` (inside a signature) is not a separator."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def tables(text: str) -> list:
    """(line number of the header, marker or None, header cells, body rows) of every table of a markdown text.
    The marker is the comment line right above the table (blank lines between are allowed)."""
    lines, found, i = text.split("\n"), [], 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1].strip()):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            m = MARKER.match(lines[k].strip()) if k >= 0 else None
            marker = m[2] if m and m[1] == "table" else None
            found.append((i + 1, marker, split_row(lines[i]), [split_row(r) for r in lines[i + 2:j]]))
            i = j
        else:
            i += 1
    return found


def recorded_table(source: str):
    """(header, rows) of the table ``source`` names: PATH or PATH#N."""
    path, _, n = source.partition("#")
    found = tables((REPO / path).read_text(encoding="utf-8"))
    assert found, f"{path} holds no table"
    _, _, header, rows = found[int(n or 1) - 1]
    return header, rows


def has_figures(rows) -> bool:
    """Whether a digit shows in the body outside code spans and link targets."""
    for row in rows:
        for cell in row:
            text = re.sub(r"`[^`]*`", "", re.sub(r"\]\([^)]*\)", "]", cell))
            if re.search(r"\d", text):
                return True
    return False


def doc_tables():
    for doc in ALL_DOCS:
        for line, marker, header, rows in tables((REPO / doc).read_text(encoding="utf-8")):
            yield doc, line, marker, header, rows


def test_every_table_with_figures_names_its_source():
    missing = [f"{doc}:{line}" for doc, line, marker, header, rows in doc_tables()
               if doc in OWNED and marker is None and has_figures(rows)]
    assert not missing, "tables with figures and no `<!-- table: SOURCE -->` marker: " + ", ".join(missing)


RECORDED = [(doc, line, marker, header, rows) for doc, line, marker, header, rows in doc_tables()
            if marker and not marker.startswith(("computed ", "no measurements"))]


@pytest.mark.parametrize("doc, line, source, header, rows", RECORDED,
                         ids=[f"{d}:{n}" for d, n, *_ in RECORDED])
def test_table_equals_the_recorded_one(doc, line, source, header, rows):
    rec_header, rec_rows = recorded_table(source)
    missing = [h for h in header if h not in rec_header]
    assert not missing, f"{doc}:{line}: columns {missing} are not in {source} ({rec_header})"
    by_key = {r[0]: r for r in rec_rows}
    assert len(by_key) == len(rec_rows), f"{source}: first cells repeat"
    for row in rows:
        assert len(row) == len(header), f"{doc}:{line}: row {row[0]!r} has {len(row)} cells for {len(header)} columns"
        assert row[0] in by_key, f"{doc}:{line}: row {row[0]!r} is not in {source}"
        for name, cell in zip(header, row):
            expected = by_key[row[0]][rec_header.index(name)]
            assert cell == expected, f"{doc}:{line}: {row[0]} / {name}: {cell!r}, but {source} says {expected!r}"


def test_every_marker_names_something_that_exists():
    names = {n[len("test_computed_"):] for n in globals() if n.startswith("test_computed_")}
    for doc, line, marker, header, rows in doc_tables():
        if marker is None or marker.startswith("no measurements"):
            continue
        if marker.startswith("computed "):
            assert marker.split()[1] in names, f"{doc}:{line}: no test_computed_{marker.split()[1]}"
        else:
            assert (REPO / marker.partition("#")[0]).is_file(), f"{doc}:{line}: {marker} does not exist"


def test_a_document_shows_whole_tables_of_runs():
    """The results pages show every row of the recorded seed tables they quote (a table of runs is not cut), and
    between them both seed tables (1,500 updates and annealed)."""
    markers = set()
    for doc in ("README.md", "docs/results.md"):
        shown = [t for t in tables((REPO / doc).read_text()) if t[1] and "results_seeds" in t[1]]
        for _, marker, _, rows in shown:
            assert [r[0] for r in rows] == [r[0] for r in recorded_table(marker)[1]], (doc, marker)
            markers.add(marker)
    assert markers == {"examples/multi30k/report/results_seeds.md", "examples/multi30k/report_annealed/results_seeds.md"}


def gpu_models():
    """{(pe, length): result} of the recorded H100 runs of pe-bench models (fp16, base, one process): every row of
    models.json, the encodings re-measured after a change (models_after.json, each against its own run's SAPE)
    in their place."""
    rows = {}
    for name in ("models", "models_after"):
        data = json.loads((REPO / "examples" / "benchmarks" / "gpu" / f"{name}.json").read_text())
        assert data["complete"] and data["settings"]["fp16"] and data["settings"]["device"] == "cuda"
        rows.update({(r["pe"], r["length"]): r for r in data["results"]
                     if r["size"] == "base" and (name == "models" or r["pe"] not in ("sape", "stock"))})
    return rows


def test_computed_cost_beside_gpu():
    """The README's cost table: pe-bench cost's saved-bytes and op ratios to SAPE at base size (every length), beside
    the H100's busy time, kernel count and peak memory from pe-bench models (fp16), for every row of the cost run."""
    cost = {(r["pe"], int(r["length"])): r for r in read_csv(REPO / "examples" / "benchmarks" / "cost" / "cost.csv")
            if r["size"] == "base"}
    gpu = gpu_models()
    doc, line, header, rows = marked("cost_beside_gpu")
    assert [r[0] for r in rows] == list(dict.fromkeys(pe for pe, _ in cost))
    lengths = sorted({n for _, n in cost})
    assert lengths == sorted({n for _, n in gpu})
    by = " / ".join(map(str, lengths))
    for row in rows:
        pe, cells = row[0], dict(zip(header, row))
        assert cells[f"saved for backward / SAPE, L = {by}"] == " / ".join(
            f"{float(cost[pe, n]['saved_bytes_to_sape']):.3f}x" for n in lengths), row
        ops = sorted({f"{float(cost[pe, n]['ops_to_sape']):.3f}x" for n in lengths})
        assert cells["ATen ops / SAPE"] == " - ".join(ops), row
        assert cells[f"H100 busy time / SAPE, L = {by}"] == " / ".join(
            f"{gpu[pe, n]['kernel_ratio']:.2f}x" for n in lengths), row
        kernels = sorted({f"{gpu[pe, n]['kernels_ratio']:.2f}x" for n in lengths})
        assert cells["H100 kernels / SAPE"] == " - ".join(kernels), row
        assert cells["H100 peak memory / SAPE, largest"] == f"{max(gpu[pe, n]['peak_ratio'] for n in lengths):.3f}x"
    assert max(float(r["flops_to_sape"]) for r in cost.values()) < 1.02  # "FLOPs are within 1.02x"
    assert all(float(r["saved_bytes_to_sape"]) == 1 for (pe, _), r in cost.items() if pe == "stock")


def test_the_gpu_findings_in_the_text():
    """The README's statements about the H100 run, read from the recorded JSON."""
    gpu = gpu_models()
    text = re.sub(r"\s+", " ", (REPO / "README.md").read_text().split("## What the encodings cost")[1].split("\n## ")[0])
    busy = [r["kernel_s"] for r in gpu.values()]
    wall = [r["step_s"] for r in gpu.values()]
    shown = re.search(r"busy for (\d+)-(\d+) ms of a (\d+)-(\d+) ms step", text)
    assert shown, "the busy/wall statement"
    assert (int(shown[1]), int(shown[2])) == (int(min(busy) * 1e3), round(max(busy) * 1e3))
    assert int(shown[3]) <= min(wall) * 1e3 and round(max(wall) * 1e3) <= int(shown[4])
    over = sorted({pe for (pe, _), r in gpu.items() if r["kernel_ratio"] > 1.10 or r["peak_ratio"] > 1.05})
    named = re.search(r"Over the goal \(1\.10x busy time, 1\.05x peak memory\): ([a-z_, ]+)\.", text)
    assert named and sorted(named[1].replace(" ", "").split(",")) == over, (named and named[1], over)


def test_computed_annealed_side_by_side():
    side_by_side("annealed_side_by_side", "report_annealed")


def test_computed_en_fr_side_by_side():
    side_by_side("en_fr_side_by_side", "report_en_fr")


def side_by_side(table, report):
    """A README trained table (En-De, En-Fr): each encoding's seed-1 sacreBLEU and chrF++ (with their marks) of
    the average (REPORT/results.md) and the last checkpoint (results_last.md), every recorded encoding."""
    doc, line, header, rows = marked(table)
    avg, last = ({r[0]: dict(zip(h, r)) for r in body} for h, body in (
        recorded_table(f"examples/multi30k/{report}/{name}.md") for name in ("results", "results_last")))
    assert sorted(r[0] for r in rows) == sorted(avg) == sorted(last)
    for row in rows:
        cells = dict(zip(header, row))
        a, b = avg[row[0]], last[row[0]]
        assert cells["BLEU, average"] == a["sacreBLEU"].split(" (")[0] and cells["BLEU, last"] == b["sacreBLEU"].split(" (")[0]
        assert cells["chrF++, average"] == a["chrF++"].split(" (")[0] and cells["chrF++, last"] == b["chrF++"].split(" (")[0]
        assert cells["Params"] == a["Params"] == b["Params"], row


def test_the_trained_multi30k_findings_in_the_text():
    """The README's statements about the trained table, read from the recorded reports."""
    rd = lambda name: {r["system"]: r for r in read_csv(REPO / "examples" / "multi30k" / "report_annealed" / f"{name}.csv")}
    avg, last, budget = rd("results"), rd("results_last"), rd("budget")
    text = re.sub(r"\s+", " ", (REPO / "README.md").read_text().split("## Results on real language")[1].split("\n## ")[0])
    results = re.sub(r"\s+", " ", (REPO / "docs" / "results.md").read_text().split("## Trained models")[1].split("\n## ")[0])
    assert all(float(last[m]["bleu"]) > float(avg[m]["bleu"]) for m in avg)  # "the last checkpoint beats the average"
    assert float(budget["annealed6k"]["bleu_delta"]) > 1 and "**The budget is not converged yet.**" in text
    held = {m for m in ("nope", "lape", "posnet_attn", "at5") if avg[m]["bleu_mark"] == last[m]["bleu_mark"] == "--"}
    assert held == {"nope", "lape", "posnet_attn", "at5"} and "No-PE, LAPE, PosNet-Attn and Adaptive-T5 stay" in results
    assert not avg["rpe"]["bleu_mark"] and avg["alibi"]["bleu_mark"] == "--"
    assert not avg["t5"]["bleu_mark"] and not avg["posnet_embed"]["bleu_mark"]
    assert last["t5"]["bleu_mark"] == last["posnet_embed"]["bleu_mark"] == "--"
    agreement = json.loads((REPO / "examples" / "multi30k" / "agreement" / "small_vs_annealed_bleu.md.json").read_text())
    assert f"Kendall tau-b {agreement['rows'][0]['kendall_tau']:.2f}, p = {agreement['rows'][0]['kendall_p']:.2g}" in text


def test_the_en_fr_findings_in_the_text():
    """The README's "Does En-De hold on En-Fr?": each claim is the paired tests' marks of the recorded reports of
    both pairs (the figures themselves are pinned in PINNED), and the rank agreement is over the five encodings."""
    m30k = REPO / "examples" / "multi30k"
    rd = lambda report, name: {r["system"]: r for r in read_csv(m30k / report / f"{name}.csv")}  # noqa: E731
    de = {d: rd("report_annealed", name) for d, name in (("avg", "results"), ("last", "results_last"))}
    fr = {d: rd("report_en_fr", name) for d, name in (("avg", "results"), ("last", "results_last"))}
    text = re.sub(r"\s+", " ", (REPO / "README.md").read_text().split("**Does En-De hold on En-Fr?**")[1].split("\n## ")[0])
    # RoPE leads on both pairs: significantly above SAPE in every En-Fr test, and above it on En-De
    assert all(fr[d]["rope"][f"{k}_mark"] == "++" for d in fr for k in ("bleu", "chrf")) and "RoPE leads on both" in text
    assert all(float(de[d]["rope"]["bleu_delta"]) > 0 for d in de)
    # PosNet-Embed below SAPE on both, significantly on En-Fr in every test
    assert all(fr[d]["posnet_embed"][f"{k}_mark"] == "--" for d in fr for k in ("bleu", "chrf"))
    assert all(float(de[d]["posnet_embed"]["bleu_delta"]) < 0 for d in de)
    assert "the paper's PosNet-Embed above SAPE holds on neither pair" in text
    # RPE: level on En-De, above on En-Fr with the average only
    assert not de["avg"]["rpe"]["bleu_mark"] and fr["avg"]["rpe"]["bleu_mark"] == "++" and not fr["last"]["rpe"]["bleu_mark"]
    # KERPLE below SAPE on both; significant: En-De chrF++ (average), En-Fr last checkpoint
    assert all(float(t[d]["kerple"]["bleu_delta"]) < 0 for t in (de, fr) for d in t)
    assert de["avg"]["kerple"]["chrf_mark"] == "--" and fr["last"]["kerple"]["bleu_mark"] == "--"
    assert not de["avg"]["kerple"]["bleu_mark"] and not fr["avg"]["kerple"]["bleu_mark"]
    for name in ("en_de_vs_en_fr_bleu", "en_de_vs_en_fr_last_bleu"):
        agreement = json.loads((m30k / "agreement" / f"{name}.md.json").read_text())["rows"][0]
        assert agreement["systems"] == sorted(fr["avg"]) and agreement["n"] == 5
    # the order behind "KERPLE and PosNet-Embed swapping the last two places" with the average
    order = lambda t: sorted(fr["avg"], key=lambda m: -float(t["avg"][m]["bleu"]))  # noqa: E731  the five
    assert order(de)[-2:] == ["posnet_embed", "kerple"] and order(fr)[-2:] == ["kerple", "posnet_embed"]
    assert order(de)[:3] == order(fr)[:3]


# ------------------------------------------------------------------------------------------------
# outputs shown in code blocks

def outputs():
    """(doc, marker line, source, lines of the code block after the marker) of every ``<!-- output: PATH -->``."""
    found = []
    for doc in ALL_DOCS:
        lines = (REPO / doc).read_text(encoding="utf-8").split("\n")
        for n, line in enumerate(lines):
            m = MARKER.match(line.strip())
            if m and m[1] == "output" and m[2] != "command":  # `command`: tests/test_readme.py runs it
                start = lines.index("```", n + 1) if "```" in lines[n + 1:n + 3] else None
                assert start is not None, f"{doc}:{n + 1}: no code block right after the output marker"
                end = lines.index("```", start + 1)
                found.append((doc, n + 1, m[2], lines[start + 1:end]))
    return found


@pytest.mark.parametrize("doc, line, source, shown", outputs(), ids=[f"{d}:{n}" for d, n, *_ in outputs()])
def test_shown_output_is_the_recorded_one(doc, line, source, shown):
    """Every line shown (but `...`) is a line of the recorded output, in the same order."""
    recorded = (REPO / source).read_text(encoding="utf-8").split("\n")
    at = 0
    for text in shown:
        if text.strip() == "...":
            continue
        assert text in recorded[at:], f"{doc}:{line}: {text!r} is not in {source} (after line {at})"
        at = recorded.index(text, at) + 1


# ------------------------------------------------------------------------------------------------
# computed tables

def marked(name: str):
    """(doc, line, header, rows) of the one table marked ``computed NAME``."""
    found = [(doc, line, header, rows) for doc, line, marker, header, rows in doc_tables()
             if marker == f"computed {name}"]
    assert len(found) == 1, f"{len(found)} tables marked computed {name}"
    return found[0]


def test_computed_architecture_sizes():
    """The README's size table: what fairseq's parser makes of transformer_sape_<suffix>."""
    from fairseq import options

    from pe_plugin.naming import SIZES

    doc, line, header, rows = marked("architecture_sizes")
    assert [r[0].split()[0] for r in rows] == list(SIZES)
    for row in rows:
        suffix = row[0].split()[0]
        args = options.parse_args_and_arch(options.get_training_parser(), [
            "data", "--user-dir", str(REPO / "pe_plugin"), "--arch", f"transformer_sape_{suffix}"])
        cells = dict(zip(header, row))
        assert cells["layers"] == f"{args.encoder_layers}+{args.decoder_layers}"
        assert (cells["d_model"], cells["FFN"], cells["heads"]) == tuple(
            str(v) for v in (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_attention_heads))
        assert float(cells["dropout"]) == args.dropout
        from pe_plugin.models.architectures import PARENTS

        assert PARENTS[suffix].__name__ == cells["fairseq parent"]


def read_csv(path: Path) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def p_text(p: float) -> str:
    return f"{p:.2g}"


def posnet_variant_rows():
    """The PosNet-Embed investigation's rows, from the recorded reports: BLEU minus SAPE's (mean over the runs,
    run i against SAPE run i), and the runs worse than SAPE at p < 0.05 (mark ``--``) with every run's p-value."""
    seeds = {r["system"]: r for r in read_csv(M30K / "results_seeds.csv")}
    runs = read_csv(M30K / "results_seeds_runs.csv")
    seed1 = {r["system"]: r for r in read_csv(M30K / "results.csv")}
    rows = {}
    for system in ("posnet_embed_user", "posnet_embed_lmax256", "posnet_embed_dp64", "posnet_embed_noshare",
                   "posnet_embed_drop03", "posnet_embed_released"):
        if system in seeds:
            mine = [r for r in runs if r["system"] == system]
            delta = float(seeds[system]["bleu_delta"])
        else:
            mine = [seed1[system]]
            delta = float(seed1[system]["bleu_delta"])
        worse = sum(r["bleu_mark"] == "--" for r in mine)
        ps = ", ".join(p_text(float(r["bleu_p"])) for r in mine)
        rows[system] = (str(len(mine)), f"{delta:+.2f}", f"{worse} of {len(mine)} (p = {ps})")
    return rows


def test_computed_posnet_variants():
    doc, line, header, rows = marked("posnet_variants")
    expected = posnet_variant_rows()
    assert [r[0].split()[0] for r in rows] == list(expected)
    for row in rows:
        cells = dict(zip(header, row))
        seeds, delta, worse = expected[row[0].split()[0]]
        assert (cells["seeds"], cells["BLEU vs SAPE (mean)"], cells["seeds significantly worse"]) == (seeds, delta, worse), row


def test_computed_gpus_and_update_freq():
    """examples/wmt14/README.md: --gpus N keeps the recipe's tokens per update (what launch.py sets)."""
    from pe_tools.recipes import load_table
    from pe_tools.recipes.train import train_argv

    doc, line, header, rows = marked("gpus_and_update_freq")
    table = load_table("wmt14")
    flags = table["common"]["flags"]
    tokens = int(flags[flags.index("--max-tokens") + 1])
    for row in rows:
        gpus = int(row[0].split()[0])
        argv = train_argv(table, "sape", "en-de", "base", 1, "data", "run", gpus=gpus)
        freq = int(argv[len(argv) - 1 - argv[::-1].index("--update-freq") + 1])  # the last one wins
        shown = f"--max-tokens {tokens} --update-freq {freq}" + (f" --distributed-world-size {gpus}" if gpus > 1 else "")
        assert row[1] == f"`{shown}`", (row, shown)
        assert row[2] == f"{tokens * freq * gpus:,}"


def test_computed_micro_batch_by_memory():
    """README §Reproducing: one GPU's --max-tokens x --update-freq per memory class and size, as pe-train
    --max-tokens-per-gpu MEMgb chooses them (pe_tools/recipes/batching.py), 32,768 tokens per update in each."""
    from pe_tools.recipes import batching, load_table
    from pe_tools.recipes.train import train_argv

    doc, line, header, rows = marked("micro_batch_by_memory")
    assert header[1:] == [f"{gb} GB" for gb in batching.MEMORY_CLASSES]
    assert [r[0] for r in rows] == list(batching.FOOTPRINTS)
    for row in rows:
        for gb, cell in zip(batching.MEMORY_CLASSES, row[1:]):
            split, _ = batching.choose_plan(32768, 1, f"{gb}GB", row[0], 4096)
            argv = train_argv(load_table("wmt14"), "sape", "en-de", row[0], 1, "data", "run", max_tokens=split.max_tokens)
            tokens, freq = (int(argv[len(argv) - 1 - argv[::-1].index(f) + 1]) for f in ("--max-tokens", "--update-freq"))
            assert cell == f"{tokens} × {freq}" and tokens * freq == 32768, (row[0], gb, cell)


def test_computed_t5_buckets():
    """docs/encodings.md §T5: the first distance of each log bucket, as tests/test_relative.py checks them."""
    from test_relative import BIDIRECTIONAL_STARTS, CAUSAL_STARTS

    doc, line, header, rows = marked("t5_buckets")
    assert [r[2] for r in rows] == [", ".join(map(str, s)) for s in (BIDIRECTIONAL_STARTS, CAUSAL_STARTS)]


def test_computed_attenuated_map():
    """docs/analysis.md §Attenuated map: the values tests/test_analysis.py checks against the indicators."""
    from test_analysis import CHEN_TABLE

    doc, line, header, rows = marked("attenuated_map")
    assert [[r[0], *r[1:]] for r in rows] == [
        [str(w), *(f"{loc:.3f} / {sym:.3f}" for loc, sym in cols)] for w, *cols in CHEN_TABLE]


def closed_form(pe: str, lmax: int, d: int = 512, dp: int = 128, heads: int = 8) -> int:
    """Parameters of PosNet at base size (docs/encodings.md §PosNet-Embed, §PosNet-Attn)."""
    if pe == "posnet_embed":
        return 2 * d * dp + lmax * dp * dp
    return lmax * (d // heads) ** 2


def test_computed_parameter_counts():
    """docs/design.md: totals and encoding parameters at base size. The recipe's models are the recorded
    benchmark's (it builds them as the WMT14 recipe does, 40,000 symbols); the other L_max are SAPE's total plus
    the closed forms that tests/test_posnet.py checks against built models; the paper's column is
    examples/wmt14/paper_results.md."""
    bench = {r["pe"]: r for r in read_csv(REPO / "examples" / "benchmarks" / "cpu" / "models" / "benchmark.csv")
             if r["size"] == "base"}
    sape = int(bench["sape"]["params"])
    paper_header, paper_rows = recorded_table("examples/wmt14/paper_results.md")
    paper = {r[0]: float(r[paper_header.index("params base En-De")].rstrip("M")) for r in paper_rows}
    paper_of = {"sape": "SAPE (`sape`)", "posnet_embed": "PosNet-Embed (`posnet_embed`)",
                "posnet_attn": "PosNet-Attn (`posnet_attn`)", "rpe": "RPE (`rpe`)"}
    doc, line, header, rows = marked("parameter_counts")
    m = lambda n: f"{n / 1e6:.2f}M"  # noqa: E731
    for row in rows:
        cells = dict(zip(header, row))
        pe = re.match(r"transformer_(\w+?)_wmt_en_de", row[0])[1]
        if "(recipe" in row[0] or pe == "sape":
            own = int(bench[pe]["pe_params"])
            assert cells["L_max"] == {"posnet_embed": "200", "posnet_attn": "251"}.get(pe, cells["L_max"])
        elif pe == "rpe":  # --rpe-shared-heads: one table per layer, 12 x 33 x 64 x 2
            own = 12 * 33 * 64 * 2
        else:
            own = closed_form(pe, int(cells["L_max"]))
        assert cells["params total"] == m(sape + own), row
        assert cells["encoding only"] == (m(own) if own else "0"), row
        assert cells["vs SAPE"] == (f"+{m(own)}" if pe != "sape" else "-"), row
        p = paper[paper_of[pe]]
        expected = f"{p:.2f}M" + ("" if pe == "sape" else f" (+{p - paper[paper_of['sape']]:.2f}M)")
        assert cells["paper total (vs SAPE)"] == expected, row


# ------------------------------------------------------------------------------------------------
# figures in the text

def test_the_multi30k_ranking_in_the_text():
    """The README's and docs/results.md's "The ranking": each method's three-seed BLEU minus SAPE's."""
    seeds = {r["system"]: float(r["bleu_delta"] or 0) for r in read_csv(M30K / "results_seeds.csv")}
    seed1 = {r["system"]: float(r["bleu_delta"] or 0) for r in read_csv(M30K / "results.csv")}
    names = {"RoPE": "rope", "Shaw RPE": "rpe", "ALiBi": "alibi", "PosNet-Embed": "posnet_embed_lmax256",
             "T5": "t5", "Adaptive-T5": "at5", "LAPE": "lape"}
    for doc in ("docs/results.md",):
        text = (REPO / doc).read_text()
        bullet = re.sub(r"\s+", " ", re.search(r"\*\*The ranking\.\*\*(.*?)\n- ", text, re.S)[1])
        shown = dict(re.findall(r"((?:Shaw |Adaptive-)?[A-Za-z0-9-]+) \(([+-]\d+\.\d\d)", bullet))
        assert set(shown) == set(names), (doc, shown)
        for name, value in shown.items():
            assert value == f"{seeds[names[name]]:+.2f}", (doc, name, value)
        assert f"no-PE is {-seeds['nope']:.2f} below" in bullet
        assert "PosNet-Attn (seed 1 only" in bullet and f"is {-seed1['posnet_attn']:.2f} below" in bullet


def test_the_ngram_figures_in_the_text():
    rows = read_csv(M30K / "results_seeds_ngram.csv")
    gap = {(r["system"], int(r["order"])): float(r["gap"]) for r in rows if r["analysis"] == "bleu"}
    text = (REPO / "docs" / "results.md").read_text()
    assert f"unigrams ({gap['nope', 1]:.2f} BLEU-1)" in text and f"4-grams ({gap['nope', 4]:.2f})" in text
    assert f"bigrams ({gap['rope', 2]:+.2f})" in text and f"8-grams ({gap['rope', 8]:+.2f})" in text
    assert max(range(1, 9), key=lambda n: gap["rope", n]) == 2 and min(range(1, 9), key=lambda n: gap["rope", n]) == 8


def test_the_cpu_cross_check_in_the_text():
    cpu = {r["system"]: r for r in read_csv(REPO / "examples" / "multi30k" / "report_cpu" / "results.csv")}
    gpu = {r["system"]: r for r in read_csv(M30K / "results.csv")}
    text = re.sub(r"\s+", " ", (REPO / "docs" / "results.md").read_text().split("## CPU cross-check")[1])
    for system, name in (("sape", "SAPE"), ("posnet_embed_dp64", "`posnet_embed_dp64`"),
                         ("posnet_embed_drop03", "`posnet_embed_drop03`")):
        assert f"{name} {float(cpu[system]['bleu']):.2f}" in text and f"against {float(gpu[system]['bleu']):.2f}" in text
    assert f"PosNet-Embed is {-float(cpu['posnet_embed']['bleu_delta']):.2f} BLEU below" in text
    assert f"(p = {float(cpu['posnet_embed']['bleu_p']):.2f}; chrF++ p = {float(cpu['posnet_embed']['chrf_p']):.2f})" in text
    assert f"PosNet-Attn is {-float(cpu['posnet_attn']['bleu_delta']):.2f} below" in text
    runs = len(list((REPO / "examples" / "multi30k" / "results_cpu").glob("*.en-de.*")))  # En-Fr: report_cpu_en_fr
    assert runs == len(cpu) and f"{['Three', 'Four', 'Five', 'Six'][runs - 3]} runs trained on one CPU core" in text


# ------------------------------------------------------------------------------------------------
# the recorded reports are what pe-report makes of the recorded runs

def recorded_runs_with_reference(tmp_path, results, tgt="de"):
    """A folder like the checkout for pe-report: a copy of examples/multi30k/RESULTS and the test reference where
    the recipe keeps it (data-bin/multi30k_en_TGT/work/raw.test.TGT), written from the Multi30k test set found."""
    shutil.copytree(REPO / "examples" / "multi30k" / results, tmp_path / "examples" / "multi30k" / results)
    work = tmp_path / "data-bin" / f"multi30k_en_{tgt}" / "work"
    work.mkdir(parents=True)
    (work / f"raw.test.{tgt}").write_text("".join(line + "\n" for line in pe_testing.multi30k_test(tgt)),
                                          encoding="utf-8")


def assert_same_reports(recorded, out, skip=("ngram",)):
    """Every table and CSV of the recorded report folder is the one just made, byte for byte (n-gram CSVs and
    what is not a score table, named by ``skip``, left out)."""
    compared = 0
    for f in sorted([*recorded.glob("*.md"), *recorded.glob("*.csv")]):
        if not any(word in f.name for word in skip):
            assert (out / f.name).read_text() == f.read_text(), f.name
            compared += 1
    assert compared >= 3


def run_ok(argv, cwd):
    proc = subprocess.run([sys.executable, "-m", *argv], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.needs_multi30k  # collected only where the test set is found (conftest.py): tests never need the corpus
@pytest.mark.parametrize("results, report", [("results", "report"), ("results_cpu", "report_cpu")])
def test_recorded_report_is_what_pe_report_makes(results, report, tmp_path):
    """pe-report of the recorded runs gives the recorded tables (the bootstrap is seeded): under a minute each."""
    recorded_runs_with_reference(tmp_path, results)
    run_ok(["pe_tools.recipes.launch", "report", "--recipe", "multi30k", "--results", f"examples/multi30k/{results}",
            "--out-dir", "out"], tmp_path)
    if report == "report":  # stock fairseq's learned positions against ours, the two seeds both have
        hyps = {s: ",".join(f"examples/multi30k/{results}/{s}.en-de.small.seed{i}/hyp.detok.de" for i in (1, 2))
                for s in ("lape", "fairseq_transformer_lape")}
        run_ok(["pe_tools.scoring.cli", "--ref", "data-bin/multi30k_en_de/work/raw.test.de", "--trg-lang", "de",
                "--baseline", f"lape={hyps['lape']}", "--system",
                f"fairseq_transformer_lape={hyps['fairseq_transformer_lape']}", "--prefix", "lape_parity",
                "--out-dir", "out"], tmp_path)
    assert_same_reports(REPO / "examples" / "multi30k" / report, tmp_path / "out")


@pytest.mark.slow
@pytest.mark.needs_multi30k
def test_recorded_annealed_report_is_what_pe_report_makes(tmp_path):
    """The README's headline tables (examples/multi30k/report_annealed/, docs/results.md#trained-models-the-annealed-setting): pe-report
    --size annealed of the recorded runs, for the averaged and the last checkpoint, and the budget check (SAPE's
    6,000 against 3,000 updates, pe-evaluate on the two runs). The validation curves come from the training logs,
    not from the translations: not re-made here."""
    recorded_runs_with_reference(tmp_path, "results")
    report = ["pe_tools.recipes.launch", "report", "--recipe", "multi30k", "--size", "annealed", "--results",
              "examples/multi30k/results", "--out-dir", "out"]
    run_ok(report, tmp_path)
    run_ok(report + ["--decode", "last"], tmp_path)
    runs = "examples/multi30k/results/sape.en-de"
    for prefix, decode in (("budget", ""), ("budget_last", "last/")):
        run_ok(["pe_tools.scoring.cli", "--ref", "data-bin/multi30k_en_de/work/raw.test.de", "--trg-lang", "de",
                "--baseline", f"annealed={runs}.annealed.seed1/{decode}hyp.detok.de",
                "--system", f"annealed6k={runs}.annealed6k.seed1/{decode}hyp.detok.de", "--prefix", prefix,
                "--out-dir", "out", "--allow-mismatch"], tmp_path)  # two budgets, compared marked (issue 56)
    assert_same_reports(REPO / "examples" / "multi30k" / "report_annealed", tmp_path / "out",
                        skip=("ngram", "curves"))


@pytest.mark.slow
@pytest.mark.needs_multi30k
@pytest.mark.parametrize("results, report", [("results_en_fr", "report_en_fr"), ("results_cpu", "report_cpu_en_fr")])
def test_recorded_en_fr_reports_are_what_pe_report_makes(results, report, tmp_path):
    """The En-Fr tables (the README's, fp16 on a GPU; docs/results.md's CPU cross-check): pe-report --pair en-fr of
    the recorded runs, for the averaged and the last checkpoint."""
    recorded_runs_with_reference(tmp_path, results, "fr")
    report_argv = ["pe_tools.recipes.launch", "report", "--recipe", "multi30k", "--pair", "en-fr", "--size", "annealed",
                   "--results", f"examples/multi30k/{results}", "--out-dir", "out"]
    run_ok(report_argv, tmp_path)
    run_ok(report_argv + ["--decode", "last"], tmp_path)
    assert_same_reports(REPO / "examples" / "multi30k" / report, tmp_path / "out")


def test_the_long_split_lengths_in_the_text(monkeypatch):
    """docs/length.md states the words of the long split that pe-length writes with its default arguments."""
    from pe_tools import length_experiment as length
    from pe_tools.synthetic import grammar

    seen = {}

    class Capture:  # pe-length's arguments, parsed by its own parser, instead of the experiment
        def __init__(self, a):
            seen["a"] = a

        def run(self):
            return 0

    monkeypatch.setattr(length, "LengthExperiment", Capture)
    assert length.main([]) == 0
    a = seen["a"]
    splits = grammar.generate(a.train, a.heldout, a.heldout, seed=a.seed, max_train_words=a.max_train_words,
                              n_long=a.long, long_clauses=a.long_clauses)
    words = [grammar.n_words(src) for src, _ in splits["long"]]
    text = re.sub(r"\s+", " ", (REPO / "docs" / "length.md").read_text())
    assert f"long split of {a.long} pairs of more than {a.max_train_words} words" in text
    assert f"(seed {a.seed}) they have {min(words)} to {max(words)} words" in text


def test_computed_wmt14_corpora():
    """examples/wmt14/README.md: the validation and test sets' sentences are the line counts that
    pe_tools/recipes/wmt14/corpora.toml expects (and pe-prepare checks)."""
    import tomllib

    corpora = tomllib.loads((REPO / "pe_tools" / "recipes" / "wmt14" / "corpora.toml").read_text())
    doc, line, header, rows = marked("wmt14_corpora")
    for row in rows:
        if row[0] in ("valid", "test"):
            for pair, cell in zip(("en-de", "en-fr"), row[1:]):
                assert re.findall(r"\((\d+)", cell) == [str(corpora["pair"][pair][row[0]]["lines"])], (row, pair)
    assert [r[0] for r in rows] == ["train", "valid", "test"]


# ------------------------------------------------------------------------------------------------
# figures in the prose of the documents: each is the one recorded (or computed) value it states, as rounded

# A pinned page: each figure of its prose, in the order of the page, with the one recorded value it states (not any
# number of any file: a random two-decimal figure would match one of those more often than not). A row is (figure,
# source file, column, the key columns naming one row, format): format "" x, "+" x signed, "-" -x (a deficit stated as
# "below"), "p" a p-value to two significant digits, "3" x to three decimals, "M" (or "+M") a count in millions, "<" a
# bound the value stays under, the tightest as written; a source "computed:NAME" is a figure of COMPUTED. Sources that
# are not CSV: a JSON file's column is a path of keys ("rows.0.kendall_tau"), within the one row of its "results" that
# ``where`` names if it names one; any other file's column is a regular expression whose one group is the value,
# ``where`` {"match": n} its n-th match (the first by default). A source "exempt" is a figure no file of the tree
# records or left to another check, its column the reason.
PROSE_FIGURE = re.compile(r"(?<![\w.])[+-]?\d+\.\d{2,3}(?=[xM]?(?![\w]|\.\d))")  # also before a full stop
THRESHOLDS = re.compile(r"p < 0\.(05|10)\b( / 0\.10\b)?")  # the significance levels, not results
M30K_REPORT = "examples/multi30k/report/"
ANNEALED = "examples/multi30k/report_annealed/"
EN_FR = "examples/multi30k/report_en_fr/"
CPU_EN_FR = "examples/multi30k/report_cpu_en_fr/"
AGREEMENT = "examples/multi30k/agreement/"
SETUP_ENV = "scripts/setup_env.sh"  # the versions make setup installs and the Pythons it accepts
QUICKSTART = "examples/quickstart/toy_posnet.txt"
TOY_SAPE = "examples/quickstart/toy_sape.txt"  # docs/recipes.md's toy block, on two machines
LENGTH = "examples/length/"
CPU_BENCH = "examples/benchmarks/cpu/models/benchmark.csv"
DEMO = "examples/demo/results.csv"
COST = "examples/benchmarks/cost/cost.csv"
PAPER = "examples/wmt14/paper_results.md"
PAPER_BLEU = r"(?m)^\| [^|]*\(`{}`\) \| ([\d.]+)"  # the paper's base En-De BLEU of an encoding
PAPER_PARAMS = r"(?m)^\| [^|]*\(`{}`\) \|.*\| ([\d.]+)M \|$"  # its Table 1 total for En-De, millions
CPU_BENCH_JSON = "examples/benchmarks/cpu/models/benchmark.json"
KERNEL_BENCH = "examples/benchmarks/cpu/posnet_kernel.json"
WMT14_METHODS = "pe_tools/recipes/wmt14/methods.toml"
ADAM_BETA2 = r'"--adam-betas", "\([\d.]+, ([\d.]+)\)"'  # the recipe's Adam beta 2, a setting of the table
FAIRSEQ = (SETUP_ENV, r"ve-fairseq==(\d+\.\d+)", {}, "")  # the fairseq release, major.minor
TORCH = (SETUP_ENV, r"torch==(\d+\.\d+)", {}, "")
PY_MIN = (SETUP_ENV, r"needs Python (\d+\.\d+) or", {}, "")  # the oldest Python make setup accepts
PY_MAX = (SETUP_ENV, r"needs Python \d+\.\d+ or (\d+\.\d+)", {}, "")  # the newest

GPU_MODELS = "examples/benchmarks/gpu/models.json"  # JSON sources with ``where``: the one row of "results" that matches
GPU_MODELS_AFTER = "examples/benchmarks/gpu/models_after.json"
GPU_FLEX = "examples/benchmarks/gpu/flex.json"
GPU_TRAIN_SPEED = "examples/benchmarks/gpu/train_speed.json"
TESTED_PYTHON = (QUICKSTART, r"ve-fairseq [\d.]+, Python (\d+\.\d+)\)", {}, "")  # the recorded run's Python


def cost_history(figures: list) -> list:
    """Figures of examples/benchmarks/cost/README.md's "What moved": counts before a change, no longer in the tree."""
    return [(f, "exempt", "examples/benchmarks/cost/cost.csv before the change the sentence names (git history)", {},
             "") for f in figures]


PINNED = {
    "docs/results.md": [
        ("38.13", ANNEALED + "results_seeds_last.csv", "bleu", {"system": "sape"}, ""),
        ("39.11", ANNEALED + "results_seeds_last.csv", "bleu", {"system": "rope"}, ""),
        ("+1.08", ANNEALED + "results_seeds.csv", "bleu_delta", {"system": "rope"}, "+"),
        ("+0.98", ANNEALED + "results_seeds_last.csv", "bleu_delta", {"system": "rope"}, "+"),
        ("+2.24", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "rope"}, "+"),
        ("+1.09", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "rpe"}, "+"),
        ("+0.21", ANNEALED + "results.csv", "bleu_delta", {"system": "rpe"}, "+"),
        ("0.22", ANNEALED + "results.csv", "bleu_p", {"system": "rpe"}, "p"),
        ("-1.44", ANNEALED + "results.csv", "bleu_delta", {"system": "alibi"}, "+"),
        ("-0.32", ANNEALED + "results.csv", "bleu_delta", {"system": "t5"}, "+"),
        ("-0.40", ANNEALED + "results.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
        ("-0.83", ANNEALED + "results_last.csv", "bleu_delta", {"system": "t5"}, "+"),
        ("-0.97", ANNEALED + "results_last.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
        ("38.32", ANNEALED + "results_last.csv", "bleu", {"system": "sape"}, ""),
        ("37.58", ANNEALED + "results.csv", "bleu", {"system": "sape"}, ""),
        ("0.82", AGREEMENT + "small_vs_annealed_bleu.md.json", "rows.0.kendall_tau", {}, ""),
        ("0.82", "computed:small_lr_at_the_end", None, {}, ""),
        ("33.38", M30K_REPORT + "results_seeds.csv", "bleu", {"system": "sape"}, ""),
        ("+2.24", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "rope"}, "+"),
        ("+1.09", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "rpe"}, "+"),
        ("-0.62", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "alibi"}, "+"),
        ("-0.34", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "posnet_embed_lmax256"}, "+"),
        ("-0.97", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "t5"}, "+"),
        ("-1.70", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "at5"}, "+"),
        ("-2.69", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "lape"}, "+"),
        ("6.92", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "nope"}, "-"),
        ("2.18", M30K_REPORT + "results.csv", "bleu_delta", {"system": "posnet_attn"}, "-"),
        ("2.33", "examples/multi30k/report_cpu/results.csv", "bleu_delta", {"system": "posnet_attn"}, "-"),
        ("-4.50", M30K_REPORT + "results_seeds_ngram.csv", "gap",
         {"analysis": "bleu", "order": "1", "system": "nope"}, "+"),
        ("-6.92", M30K_REPORT + "results_seeds_ngram.csv", "gap",
         {"analysis": "bleu", "order": "4", "system": "nope"}, "+"),
        ("+2.48", M30K_REPORT + "results_seeds_ngram.csv", "gap",
         {"analysis": "bleu", "order": "2", "system": "rope"}, "+"),
        ("+1.30", M30K_REPORT + "results_seeds_ngram.csv", "gap",
         {"analysis": "bleu", "order": "8", "system": "rope"}, "+"),
        ("2.69", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "lape"}, "-"),
        ("30.31", M30K_REPORT + "lape_parity_runs.csv", "bleu", {"system": "fairseq_transformer_lape", "run": "1"}, ""),
        ("31.17", M30K_REPORT + "lape_parity_runs.csv", "bleu", {"system": "fairseq_transformer_lape", "run": "2"}, ""),
        ("30.27", M30K_REPORT + "lape_parity_runs.csv", "bleu", {"system": "lape", "run": "1"}, ""),
        ("31.11", M30K_REPORT + "lape_parity_runs.csv", "bleu", {"system": "lape", "run": "2"}, ""),
        ("-1.70", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "at5"}, "+"),
        ("-0.97", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "t5"}, "+"),
        ("0.76", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "posnet_embed_user"}, "-"),
        ("0.26", M30K_REPORT + "results_seeds_runs.csv", "bleu_p", {"system": "posnet_embed_user", "run": "1"}, "p"),
        ("0.023", M30K_REPORT + "results_seeds_runs.csv", "bleu_p", {"system": "posnet_embed_user", "run": "2"}, "p"),
        ("0.001", M30K_REPORT + "results_seeds_runs.csv", "bleu_p", {"system": "posnet_embed_user", "run": "3"}, "p"),
        ("0.42", "computed:user_default_less_lmax256", None, {}, ""),
        ("0.51", M30K_REPORT + "results_seeds.csv", "bleu_sd", {"system": "sape"}, ""),
        ("32.64", "examples/multi30k/report_cpu/results.csv", "bleu", {"system": "sape"}, ""),
        ("32.89", M30K_REPORT + "results.csv", "bleu", {"system": "sape"}, ""),
        ("32.21", "examples/multi30k/report_cpu/results.csv", "bleu", {"system": "posnet_embed_dp64"}, ""),
        ("31.75", M30K_REPORT + "results.csv", "bleu", {"system": "posnet_embed_dp64"}, ""),
        ("31.20", "examples/multi30k/report_cpu/results.csv", "bleu", {"system": "posnet_embed_drop03"}, ""),
        ("31.53", M30K_REPORT + "results.csv", "bleu", {"system": "posnet_embed_drop03"}, ""),
        ("0.36", "examples/multi30k/report_cpu/results.csv", "bleu_delta", {"system": "posnet_embed"}, "-"),
        ("0.14", "examples/multi30k/report_cpu/results.csv", "bleu_p", {"system": "posnet_embed"}, ""),
        ("0.10", "examples/multi30k/report_cpu/results.csv", "chrf_p", {"system": "posnet_embed"}, ""),
        ("2.33", "examples/multi30k/report_cpu/results.csv", "bleu_delta", {"system": "posnet_attn"}, "-"),
        ("0.001", "examples/multi30k/report_cpu/results.csv", "bleu_p", {"system": "posnet_attn"}, "p"),
        ("56.69", CPU_EN_FR + "results.csv", "bleu", {"system": "sape"}, ""),
        ("57.40", EN_FR + "results.csv", "bleu", {"system": "sape"}, ""),
        ("-0.84", CPU_EN_FR + "results.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
        ("0.044", CPU_EN_FR + "results.csv", "bleu_p", {"system": "posnet_embed"}, "p"),
        ("-1.43", CPU_EN_FR + "results_last.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
        ("0.006", CPU_EN_FR + "results_last.csv", "bleu_p", {"system": "posnet_embed"}, "p"),
        ("-1.39", EN_FR + "results.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
        ("-1.30", EN_FR + "results_last.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
    ],
    "README.md": [
        ("3.11", SETUP_ENV, r"needs Python (\d+\.\d+) or", {}, ""),
        ("3.12", SETUP_ENV, r"needs Python \d+\.\d+ or (\d+\.\d+)", {}, ""),
        ("3.11", QUICKSTART, r"ve-fairseq [\d.]+, Python (\d+\.\d+)\)", {}, ""),  # the recorded run's Python
        ("2.13", SETUP_ENV, r"torch==(\d+\.\d+)", {}, ""),
        ("0.12", SETUP_ENV, r"ve-fairseq==(\d+\.\d+)", {}, ""),
        ("81.32", QUICKSTART, r"BLEU4 = ([\d.]+)", {"match": 0}, ""),
        ("81.58", QUICKSTART, r"BLEU4 = ([\d.]+)", {"match": 1}, ""),
        ("+1.16", EN_FR + "results.csv", "bleu_delta", {"system": "rope"}, "+"),
        ("+0.98", EN_FR + "results_last.csv", "bleu_delta", {"system": "rope"}, "+"),
        ("-1.39", EN_FR + "results.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
        ("-1.30", EN_FR + "results_last.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
        ("-0.40", ANNEALED + "results.csv", "bleu_delta", {"system": "posnet_embed"}, "+"),
        ("0.14", ANNEALED + "results.csv", "bleu_p", {"system": "posnet_embed"}, "p"),
        ("+0.21", ANNEALED + "results.csv", "bleu_delta", {"system": "rpe"}, "+"),
        ("0.22", ANNEALED + "results.csv", "bleu_p", {"system": "rpe"}, "p"),
        ("+1.04", EN_FR + "results.csv", "bleu_delta", {"system": "rpe"}, "+"),
        ("+0.44", EN_FR + "results_last.csv", "bleu_delta", {"system": "rpe"}, "+"),
        ("0.12", EN_FR + "results_last.csv", "bleu_p", {"system": "rpe"}, "p"),
        ("-0.52", ANNEALED + "results.csv", "bleu_delta", {"system": "kerple"}, "+"),
        ("0.10", ANNEALED + "results.csv", "bleu_p", {"system": "kerple"}, ""),
        ("-0.38", EN_FR + "results.csv", "bleu_delta", {"system": "kerple"}, "+"),
        ("0.14", EN_FR + "results.csv", "bleu_p", {"system": "kerple"}, "p"),
        ("-0.88", EN_FR + "results_last.csv", "bleu_delta", {"system": "kerple"}, "+"),
        ("0.80", AGREEMENT + "en_de_vs_en_fr_bleu.md.json", "rows.0.kendall_tau", {}, ""),
        ("0.083", AGREEMENT + "en_de_vs_en_fr_bleu.md.json", "rows.0.kendall_p", {}, "p"),
        ("1.00", AGREEMENT + "en_de_vs_en_fr_last_bleu.md.json", "rows.0.kendall_tau", {}, ""),
        ("0.017", AGREEMENT + "en_de_vs_en_fr_last_bleu.md.json", "rows.0.kendall_p", {}, "p"),
        ("1.43", ANNEALED + "budget.csv", "bleu_delta", {"system": "annealed6k"}, ""),
        ("1.02", ANNEALED + "budget_last.csv", "bleu_delta", {"system": "annealed6k"}, ""),
        ("2.446", ANNEALED + "budget_curves.csv", "nll_loss", {"run": "sape.en-de.annealed.seed1", "updates": "3000"},
         "3"),
        ("2.244", ANNEALED + "budget_curves.csv", "nll_loss", {"run": "sape.en-de.annealed6k.seed1", "updates": "6000"},
         "3"),
        ("0.82", AGREEMENT + "small_vs_annealed_bleu.md.json", "rows.0.kendall_tau", {}, ""),
        ("1.10", "computed:goal_step", None, {}, ""),
        ("1.05", "computed:goal_peak", None, {}, ""),
        ("1.10", "computed:kerple_and_t5_busy_at_200", None, {}, ""),
    ],
    "docs/length.md": [
        ("98.49", LENGTH + "test.csv", "bleu", {"system": "rpe"}, ""),
        ("97.54", LENGTH + "test.csv", "bleu", {"system": "rope"}, ""),
        ("96.44", LENGTH + "test.csv", "bleu", {"system": "posnet_embed"}, ""),
        ("98.28", LENGTH + "test.csv", "bleu", {"system": "sape"}, ""),
        ("82.03", LENGTH + "test.csv", "bleu", {"system": "alibi"}, ""),
        ("81.19", LENGTH + "test.csv", "bleu", {"system": "at5"}, ""),
        ("68.69", LENGTH + "test.csv", "bleu", {"system": "t5"}, ""),
        ("80.06", LENGTH + "all_length.csv", "bleu", {"bucket": "16-20", "system": "rpe"}, ""),
        ("72.20", LENGTH + "all_length.csv", "bleu", {"bucket": "16-20", "system": "sape"}, ""),
        ("29.27", LENGTH + "all_length.csv", "bleu", {"bucket": "31-35", "system": "rpe"}, ""),
        ("18.10", LENGTH + "all_length.csv", "bleu", {"bucket": "31-35", "system": "sape"}, ""),
        ("65.86", LENGTH + "all_length.csv", "bleu", {"bucket": "16-20", "system": "rope"}, ""),
        ("72.20", LENGTH + "all_length.csv", "bleu", {"bucket": "16-20", "system": "sape"}, ""),
        ("28.62", LENGTH + "all_length.csv", "bleu", {"bucket": "21-25", "system": "rope"}, ""),
        ("47.00", LENGTH + "all_length.csv", "bleu", {"bucket": "21-25", "system": "sape"}, ""),
        ("44.96", LENGTH + "all_length.csv", "chrf", {"bucket": "31-35", "system": "alibi"}, ""),
        ("42.18", LENGTH + "all_length.csv", "chrf", {"bucket": "31-35", "system": "sape"}, ""),
        ("13.64", LENGTH + "all_length.csv", "bleu", {"bucket": "26-30", "system": "posnet_embed"}, ""),
        ("14.95", LENGTH + "all_length.csv", "bleu", {"bucket": "26-30", "system": "posnet_attn"}, ""),
        ("37.06", LENGTH + "all_length.csv", "bleu", {"bucket": "26-30", "system": "sape"}, ""),
        ("25.72", LENGTH + "all_length.csv", "bleu", {"bucket": "26-30", "system": "lape"}, ""),
    ],
    "docs/encodings.md": [
        ("0.12", SETUP_ENV, r"ve-fairseq==(\d+\.\d+)", {}, ""),
        ("1.05", CPU_BENCH, "pe_params", {"pe": "lape", "size": "base"}, "M"),
        ("+0.41", CPU_BENCH, "pe_params", {"pe": "rpe", "size": "base"}, "+M"),
        ("+0.05", "computed:rpe_one_table_per_layer", None, {}, "+M"),
        ("+0.29", "computed:paper_rpe_less_sape", None, {}, "+M"),
        ("1.14", COST, "ops_to_sape", {"pe": "rpe", "size": "base", "length": "50"}, ""),
        ("0.98", COST, "saved_bytes_to_sape", {"pe": "rpe", "size": "base", "length": "200"}, ""),
        ("1.02", COST, "saved_bytes_to_sape", {"pe": "rpe", "size": "base", "length": "50"}, ""),
        *[(f, "exempt", "RPE's explicit product, measured before commit 6290677 (examples/benchmarks/cost/cost.csv "
                        "at 6290677^): history, not in the tree", {}, "") for f in ("1.30", "1.06", "1.08")],
        ("0.76", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "posnet_embed_user"}, "-"),
        ("0.34", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "posnet_embed_lmax256"}, "-"),
        ("-1.35", M30K_REPORT + "results_seeds.csv", "bleu_delta", {"system": "posnet_embed_dp64"}, "+"),
        ("1.09", CPU_BENCH, "step_ratio", {"pe": "posnet_embed", "size": "base"}, ""),
        ("8.52", "computed:posnet_embed_params_512", None, {}, "M"),
        ("3.41", CPU_BENCH, "pe_params", {"pe": "posnet_embed", "size": "base"}, "M"),  # built at L_max 200
        ("66.49", PAPER, PAPER_PARAMS.format("posnet_embed"), {}, ""),
        ("63.08", PAPER, PAPER_PARAMS.format("sape"), {}, ""),
        ("4.33", "computed:posnet_embed_params_256", None, {}, "M"),
        ("64.11", PAPER, PAPER_PARAMS.format("posnet_attn"), {}, ""),
        ("63.08", PAPER, PAPER_PARAMS.format("sape"), {}, ""),
        ("1.03", "computed:paper_posnet_attn_less_sape", None, {}, "M"),
        ("+1.03", CPU_BENCH, "pe_params", {"pe": "posnet_attn", "size": "base"}, "+M"),  # built at L_max 251
        ("23.12", PAPER, PAPER_BLEU.format("posnet_attn"), {}, ""),
        ("0.12", SETUP_ENV, r"ve-fairseq==(\d+\.\d+)", {}, ""),
        ("0.088", "computed:xavier_std_of_a_kernel", None, {}, "3"),
        ("7.81", "examples/benchmarks/cpu/posnet_kernel.md", r"(?m)^\| bmm \| [\d.]+ \| ([\d.]+)x", {}, ""),
        ("6.10", "examples/benchmarks/cpu/posnet_kernel.md", r"(?m)^\| bmm \|(?: [^|]+ \|){5} ([\d.]+)x \|$", {},
         ""),
        ("24.34", PAPER, PAPER_BLEU.format("lape"), {}, ""),
        ("27.48", PAPER, PAPER_BLEU.format("sape"), {}, ""),
    ],
    "docs/demo.md": [
        ("29.48", DEMO, "bleu", {"system": "nope"}, ""),
        ("97.71", DEMO, "bleu", {"system": "rpe"}, ""),
        ("97.78", DEMO, "bleu", {"system": "rope"}, ""),
        ("95.53", DEMO, "bleu", {"system": "sape"}, ""),
        ("57.11", DEMO, "bleu", {"system": "t5"}, ""),
        ("68.97", DEMO, "bleu", {"system": "alibi"}, ""),
        ("71.32", DEMO, "bleu", {"system": "posnet_attn"}, ""),
        ("92.50", DEMO, "bleu", {"system": "posnet_embed"}, ""),
        ("0.730", "examples/demo/analysis.md", r"\| model \| locality \| sym_code \|[^\n]*\n(?:[^\n]*\n)*?\| rpe \| [^|]+ \| "
                                               r"([\d.]+) \|", {}, "3"),  # the demo's probe table, its Sym_code
    ],
    "docs/design.md": [
        ("0.12", SETUP_ENV, r"ve-fairseq==(\d+\.\d+)", {}, ""),
        ("1.54", "computed:bench_sape_less_paper_sape", None, {}, "M"),
        ("+3.41", "computed:paper_posnet_embed_less_sape", None, {}, "+M"),  # "exactly the paper's"
        ("+1.03", CPU_BENCH, "pe_params", {"pe": "posnet_attn", "size": "base"}, "+M"),  # built at L_max 251
        ("+0.29", "computed:paper_rpe_less_sape", None, {}, "+M"),
        ("63.08", PAPER, PAPER_PARAMS.format("sape"), {}, ""),
        ("+1.05", CPU_BENCH, "pe_params", {"pe": "lape", "size": "base"}, "+M"),
        ("+1.05", "computed:paper_lape_less_sape", None, {}, "+M"),
        ("+0.41", CPU_BENCH, "pe_params", {"pe": "rpe", "size": "base"}, "+M"),
        ("+0.05", "computed:rpe_one_table_per_layer", None, {}, "+M"),
    ],
    "docs/recipes.md": [
        ("0.98", WMT14_METHODS, ADAM_BETA2, {}, ""),
        ("29.29", "computed:fairseq_scaling_nmt_bleu", None, {}, ""),
        ("88.78", TOY_SAPE, r"(?s)on the project's 2-core machine.*?BLEU4 = ([\d.]+)", {}, ""),
        ("92.62", TOY_SAPE, r"(?s)16-core Intel Xeon.*?BLEU4 = ([\d.]+)", {}, ""),
    ],
    "docs/benchmarks_cpu.md": [
        ("1.46", CPU_BENCH_JSON, "settings.loadavg_start.0", {}, ""),
        ("2.23", CPU_BENCH_JSON, "settings.loadavg_end.0", {}, ""),
        ("1.09", "computed:cpu_bench_max_step_ratio", None, {}, ""),  # "every encoding ... within"
        ("1.06", "computed:cpu_bench_max_step_mem_ratio", None, {}, ""),
        ("1.09", CPU_BENCH, "step_ratio", {"pe": "posnet_embed", "size": "base"}, ""),
        ("1.02", CPU_BENCH, "step_mem_ratio", {"pe": "posnet_embed", "size": "base"}, ""),
        ("1.08", CPU_BENCH, "step_ratio", {"pe": "rpe", "size": "base"}, ""),
        ("1.06", CPU_BENCH, "step_mem_ratio", {"pe": "rpe", "size": "base"}, ""),
        ("1.05", CPU_BENCH, "step_ratio", {"pe": "rope", "size": "base"}, ""),
        ("1.01", CPU_BENCH, "step_mem_ratio", {"pe": "rope", "size": "base"}, ""),
        ("1.07", CPU_BENCH, "step_ratio", {"pe": "alibi", "size": "base"}, ""),
        ("1.00", CPU_BENCH, "step_mem_ratio", {"pe": "alibi", "size": "base"}, ""),
        ("1.15", "computed:cpu_bench_max_forward_ratio", None, {}, ""),  # "up to PosNet-Attn's"
        ("0.95", CPU_BENCH, "forward_ratio", {"pe": "nope", "size": "base"}, ""),
        ("1.05", "computed:cpu_bench_max_cpu_ratio", None, {}, ""),  # "within 1.05x for every encoding"
        ("1.06", "computed:paper_table3_memory_ratio", None, {}, ""),
        ("7.81", "computed:kernel_speed_up_bmm", None, {}, ""),
        ("6.10", "computed:kernel_memory_saving_bmm", None, {}, ""),
        ("7.47", "computed:kernel_speed_up_bmm-leftpad", None, {}, ""),
        ("6.42", "computed:kernel_memory_saving_bmm-leftpad", None, {}, ""),
    ],
    # versions: the stack make setup installs and the Pythons it accepts (scripts/setup_env.sh), the recorded run's
    "docs/fairseq.md": [("0.12", *FAIRSEQ), ("2.13", *TORCH), ("3.11", *TESTED_PYTHON), ("3.11", *PY_MIN),
                        ("3.11", *PY_MIN), ("3.11", *PY_MIN), ("3.12", *PY_MAX), ("3.11", *PY_MIN), ("3.12", *PY_MAX),
                        ("3.11", *TESTED_PYTHON), ("3.11", *PY_MIN), *[("0.12", *FAIRSEQ)] * 4],
    "docs/troubleshooting.md": [("3.11", *PY_MIN), ("3.11", *PY_MIN), ("3.11", *PY_MIN), ("3.12", *PY_MAX),
                                ("0.12", *FAIRSEQ), ("0.12", *FAIRSEQ)],
    "docs/hub.md": [("0.12", *FAIRSEQ), ("0.12", *FAIRSEQ)],
    "docs/tools.md": [("0.12", *FAIRSEQ)],
    "docs/evaluation.md": [
        ("0.98", WMT14_METHODS, ADAM_BETA2, {}, ""),
        ("0.001", "computed:smallest_bootstrap_p", None, {}, "3"),
        ("29.29", "computed:fairseq_scaling_nmt_bleu", None, {}, ""),
    ],
    "examples/benchmarks/cost/README.md": [
        *cost_history(["1.300", "1.147", "1.092", "1.061", "1.061", "1.080"]),  # Shaw RPE before its own core
        *[(f, COST, "saved_bytes_to_sape", {"pe": "rpe", "size": "base", "length": n}, "3")
          for f, n in (("1.034", "20"), ("1.024", "50"), ("1.009", "100"), ("0.980", "200"))],
        *cost_history(["1.055"]), ("0.953", COST, "saved_bytes_to_sape", {"pe": "t5", "size": "base", "length": "200"},
                                   "3"),
        *cost_history(["1.071"]), ("1.027", COST, "ops_to_sape", {"pe": "t5", "size": "base", "length": "200"}, "3"),
        *cost_history(["1.057"]), ("0.953", COST, "saved_bytes_to_sape",
                                   {"pe": "kerple", "size": "base", "length": "200"}, "3"),
        *cost_history(["1.079"]), ("1.038", COST, "ops_to_sape", {"pe": "kerple", "size": "base", "length": "200"},
                                   "3"),
        *cost_history(["1.011"]), ("1.002", COST, "saved_bytes_to_sape",
                                   {"pe": "at5", "size": "base", "length": "200"}, "3"),
        *cost_history(["1.108", "1.059", "1.063", "1.073", "1.063", "1.046", "1.015"]),  # PosNet-Attn before 8168c40
        *[(f, COST, "saved_bytes_to_sape", {"pe": "posnet_attn", "size": "base", "length": n}, "3")
          for f, n in (("1.043", "20"), ("1.033", "50"), ("1.018", "100"), ("0.989", "200"))],
        *cost_history(["1.059"]), ("1.063", COST, "ops_to_sape",
                                   {"pe": "posnet_attn", "size": "base", "length": "50"}, "3"),
        *cost_history(["1.147"]), ("1.139", COST, "ops_to_sape", {"pe": "rpe", "size": "base", "length": "50"}, "3"),
        *cost_history(["1.006"]), ("1.000", "computed:cost_rpe_flops_min", None, {}, "3"),
        ("1.006", "computed:cost_rpe_flops_max", None, {}, "3"),
        ("2.571", COST, "attn_bytes_to_sape", {"pe": "rpe", "size": "base", "length": "200"}, "3"),
    ],
    "docs/cluster.md": [  # the GPU-hours estimate: the other timed encodings' speed, and seconds per update
        ("0.99", GPU_TRAIN_SPEED, "wps_to_sape", {"pe": "nope", "size": "base"}, ""),
        ("1.51", GPU_TRAIN_SPEED, "wps_to_sape", {"pe": "t5", "size": "base"}, ""),
        ("1.15", "computed:gpu_sape_seconds_per_32k_update", None, {}, ""),
    ],
    "docs/benchmarks.md": [
        ("1.084", "computed:cpu_bench_malloc_default_step_rpe", None, {}, "3"),
        ("1.057", CPU_BENCH, "step_mem_ratio", {"pe": "rpe", "size": "base"}, "3"),
        ("1.029", "computed:cpu_bench_malloc_default_step_t5", None, {}, "3"),
        ("1.008", CPU_BENCH, "step_mem_ratio", {"pe": "t5", "size": "base"}, "3"),
        ("1.10", "computed:goal_step", None, {}, ""),
        ("1.05", "computed:goal_peak", None, {}, ""),
        ("2.13", *TORCH),
        ("0.42", GPU_FLEX, "memory_ratio", {"bias": "t5", "T": 50}, ""),
        ("0.61", GPU_FLEX, "memory_ratio", {"bias": "alibi", "T": 50}, ""),
    ],
    "examples/benchmarks/gpu/README.md": [
        ("3.12", "computed:gpu_python", None, {}, ""),
        *[(f, "exempt", "stock's wall-time ratios of an earlier H100 run (commit 8e19c57), not in the tree", {}, "")
          for f in ("0.67", "1.42")],
        ("1.10", "computed:gpu_busy_goal_held_but_rpe", None, {}, ""),  # "every encoding within ... except RPE"
        ("1.05", "computed:gpu_peak_goal_held_but_rpe", None, {}, ""),
        ("1.16", GPU_MODELS, "kernel_ratio", {"pe": "rpe", "length": 20}, ""),
        ("1.40", GPU_MODELS, "kernel_ratio", {"pe": "rpe", "length": 200}, ""),
        ("1.23", "computed:gpu_rpe_kernels_min", None, {}, ""),
        ("1.26", "computed:gpu_rpe_kernels_max", None, {}, ""),
        ("1.056", GPU_MODELS, "peak_ratio", {"pe": "rpe", "length": 20}, "3"),
        ("1.10", "computed:gpu_t5_and_kerple_busy_at_200", None, {}, ""),
        ("0.995", "computed:gpu_after_rpe_peak_min", None, {}, "3"),
        ("1.010", "computed:gpu_after_rpe_peak_max", None, {}, "3"),
        ("1.029", "computed:gpu_rpe_peak_min", None, {}, "3"),
        ("1.056", "computed:gpu_rpe_peak_max", None, {}, "3"),
        ("1.15", "computed:gpu_after_rpe_kernels_min", None, {}, ""),
        ("1.18", "computed:gpu_after_rpe_kernels_max", None, {}, ""),
        ("1.23", "computed:gpu_rpe_kernels_min", None, {}, ""),
        ("1.26", "computed:gpu_rpe_kernels_max", None, {}, ""),
        *[(f, GPU_MODELS_AFTER, "kernel_ratio", {"pe": "rpe", "length": n}, "")
          for f, n in (("1.11", 20), ("1.20", 50), ("1.27", 100), ("1.37", 200))],
        ("1.10", "computed:goal_step", None, {}, ""),
        ("1.10", "computed:gpu_after_t5_and_kerple_busy_at_200", None, {}, ""),
        ("1.22", "computed:gpu_kernel_ms_released", None, {}, ""),
        ("2.20", "computed:gpu_kernel_ms_bmm", None, {}, ""),
        ("2.04", "computed:gpu_kernel_ms_bmm-leftpad", None, {}, ""),
        ("0.42", GPU_FLEX, "memory_ratio", {"bias": "t5", "T": 50}, ""),
        ("0.61", GPU_FLEX, "memory_ratio", {"bias": "alibi", "T": 50}, ""),
        ("1.51", GPU_TRAIN_SPEED, "wps_to_sape", {"pe": "t5", "size": "base"}, ""),
    ],
    "examples/multi30k/analysis/README.md": [("0.000", "computed:nope_swap_largest_change", None, {}, "3")],
    "examples/wmt14/README.md": [("0.98", WMT14_METHODS, ADAM_BETA2, {}, "")],
    "examples/multi30k/README.md": [
        ("0.98", "pe_tools/recipes/multi30k/methods.toml", ADAM_BETA2, {}, ""),
        ("0.82", "computed:small_lr_at_the_end", None, {}, ""),
    ],
    "examples/multi30k/agreement/README.md": [
        ("0.91", "computed:seeds_tau_min_bleu", None, {}, ""),
        ("0.97", "computed:seeds_tau_max_bleu", None, {}, ""),
        ("0.78", "computed:seeds_tau_min_chrf", None, {}, ""),
        ("1.00", "computed:seeds_tau_max_chrf", None, {}, ""),
        ("0.001", "computed:seeds_p_max", None, {}, "<"),  # "all with p < 0.001", the tightest bound as written
    ],
}


def _small_lr_at_the_end() -> float:
    """The learning rate at the last update of size small (inverse-sqrt after linear warm-up) over its peak."""
    from pe_tools.recipes import load_table

    flags = load_table("multi30k")["size"]["small"]["flags"]
    value = lambda flag: float(flags[len(flags) - 1 - flags[::-1].index(flag) + 1])  # noqa: E731  (the last one)
    assert flags[flags.index("--lr-scheduler") + 1] == "inverse_sqrt"
    return math.sqrt(value("--warmup-updates") / value("--max-update"))


def _user_default_less_lmax256() -> float:
    """What capping L_max at 256 (posnet_embed_lmax256) gains over PosNet-Embed's old default (posnet_embed_user):
    the difference of their three-seed mean BLEU deltas."""
    rows = {r["system"]: r for r in read_csv(REPO / M30K_REPORT / "results_seeds.csv")}
    return float(rows["posnet_embed_lmax256"]["bleu_delta"]) - float(rows["posnet_embed_user"]["bleu_delta"])


def _goal(name: str) -> float:
    """The GPU benchmark's goal for an encoding's cost to SAPE (examples/benchmarks/gpu/goals.json, what
    pe-bench train-speed --goals checks): time per update, peak memory."""
    return json.loads((REPO / "examples" / "benchmarks" / "gpu" / "goals.json").read_text(encoding="utf-8"))[name]


def _kerple_and_t5_busy_at_200() -> float:
    """The H100 busy time to SAPE at L = 200 (the longest) that KERPLE and T5 both reach, as the table rounds it."""
    gpu = gpu_models()
    longest = max(n for _, n in gpu)
    kerple, t5 = (gpu[pe, longest]["kernel_ratio"] for pe in ("kerple", "t5"))
    assert longest == 200 and f"{kerple:.2f}" == f"{t5:.2f}", (longest, kerple, t5)
    return kerple


def _posnet_embed_params(lmax: int) -> float:
    """PosNet-Embed's parameters at base size (C 512, d_p 128) and an L_max, counted on the module itself."""
    from pe_plugin.encoding_parts.base import Dims
    from pe_plugin.encodings.posnet_embedding import PosNetEmbedConfig, PosNetEmbedding

    cfg = PosNetEmbedConfig(posnet_dim=128, posnet_max_positions=lmax, posnet_init="per-matrix")
    dims = Dims(embed_dim=512, num_heads=8, num_layers=6, max_positions=lmax, padding_idx=1, side="encoder")
    return sum(p.numel() for p in PosNetEmbedding.build(cfg, dims, {}).parameters())


def _rpe_one_table_per_layer() -> float:
    """Shaw RPE's base-size tables shared by the heads of a layer: the recorded per-head count over fairseq's base
    number of heads."""
    from argparse import Namespace

    from fairseq.models.transformer import base_architecture

    args = Namespace()
    base_architecture(args)
    rows = [r for r in read_csv(REPO / CPU_BENCH) if r["pe"] == "rpe" and r["size"] == "base"]
    return int(rows[0]["pe_params"]) / args.encoder_attention_heads


def _paper_params_less_sape(pe: str) -> float:
    """What an encoding adds to the paper's Table 1 total (millions), as transcribed."""
    total = lambda name: stated_value(PAPER, PAPER_PARAMS.format(name), {})  # noqa: E731
    return (total(pe) - total("sape")) * 1e6


def _xavier_std_of_a_kernel() -> float:
    """torch's Xavier-normal std for one d_p x d_p kernel at base size (d_p 128)."""
    import torch

    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(128, 128))
    return math.sqrt(2.0 / (fan_in + fan_out))


def _bench_sape_less_paper_sape() -> float:
    """How many more parameters our SAPE model has than the paper's Table 1 total (our 40k vocabulary against ~37k)."""
    rows = [r for r in read_csv(REPO / CPU_BENCH) if r["pe"] == "sape" and r["size"] == "base"]
    return int(rows[0]["params"]) - stated_value(PAPER, PAPER_PARAMS.format("sape"), {}) * 1e6


def _cpu_bench_max(column: str) -> float:
    """The largest ratio to SAPE of the recorded base-size CPU benchmark ("every encoding within ...")."""
    return max(float(r[column]) for r in read_csv(REPO / CPU_BENCH) if r["size"] == "base")


def _fairseq_scaling_nmt_bleu() -> float:
    """The compound-split BLEU that fairseq's authors print for their WMT14 En-De model, in the README of
    fairseq's examples/scaling_nmt that the installed ve-fairseq ships."""
    import importlib.util

    folder = Path(importlib.util.find_spec("fairseq").submodule_search_locations[0])
    text = (folder / "examples" / "scaling_nmt" / "README.md").read_text(encoding="utf-8")
    return float(re.findall(r"BLEU4 = ([\d.]+)", text)[0])


def _paper_table3_memory_ratio() -> float:
    """The paper's Table 3 GPU memory of RPE and PosNet over SAPE's, from the two figures the sentence quotes."""
    m = re.search(r"Table 3: RPE and PosNet ([\d.]+) GB against SAPE's ([\d.]+) GB", flat("docs/benchmarks_cpu.md"))
    return float(m[1]) / float(m[2])


def _smallest_bootstrap_p() -> float:
    """The smallest p-value paired bootstrap resampling can give at its default number of resamples, 1/(n+1)."""
    from pe_tools.scoring.significance import DEFAULT_SAMPLES

    return 1 / (DEFAULT_SAMPLES["bs"] + 1)


def _seeds_agreement(metric: str, column: str, pick) -> float:
    """The least or greatest Kendall tau-b (or p-value) of the recorded seed-against-seed rank agreements."""
    path = REPO / "examples" / "multi30k" / "agreement" / f"seeds_{metric}.md.json"
    return pick(float(r[column]) for r in json.loads(path.read_text(encoding="utf-8"))["rows"])


def _cost_rpe_flops(pick) -> float:
    """The least or greatest ratio of Shaw RPE's FLOPs to SAPE's over the recorded lengths of the cost benchmark."""
    return pick(float(r["flops_to_sape"]) for r in read_csv(REPO / COST) if r["pe"] == "rpe" and r["size"] == "base")


def _gpu(name: str) -> dict:
    """A recorded H100 run of pe-bench models (fp16, base): {(pe, length): result}, each against its own run's SAPE."""
    data = json.loads((REPO / "examples" / "benchmarks" / "gpu" / f"{name}.json").read_text(encoding="utf-8"))
    return {(r["pe"], r["length"]): r for r in data["results"] if r["size"] == "base"}


def _gpu_goal_held_but_rpe(goal: str, column: str) -> float:
    """Issue 40's goal that every encoding but Shaw RPE stays within in the first H100 run (its README says so)."""
    rows = _gpu("models")
    worst = max(r[column] for (pe, _), r in rows.items() if pe != "rpe")
    assert worst <= _goal(goal) < max(r[column] for (pe, _), r in rows.items() if pe == "rpe"), (goal, worst)
    return _goal(goal)


def _gpu_t5_and_kerple_busy_at_200(name: str) -> float:
    """The busy time to SAPE at L = 200 that T5 and KERPLE both reach in a run, as the README rounds it."""
    t5, kerple = (_gpu(name)[pe, 200]["kernel_ratio"] for pe in ("t5", "kerple"))
    assert f"{t5:.2f}" == f"{kerple:.2f}", (name, t5, kerple)
    return t5


def _gpu_rpe(name: str, column: str, pick) -> float:
    """The least or greatest ratio of Shaw RPE over the lengths of a recorded H100 run."""
    return pick(r[column] for (pe, _), r in _gpu(name).items() if pe == "rpe")


def _gpu_python() -> float:
    """The Python (major.minor) of the recorded H100 runs."""
    versions = {json.loads((REPO / GPU_MODELS).read_text())["settings"]["python"].rsplit(".", 1)[0],
                json.loads((REPO / GPU_MODELS_AFTER).read_text())["settings"]["python"].rsplit(".", 1)[0]}
    assert len(versions) == 1, versions
    return float(versions.pop())


def _gpu_kernel_ms(candidate: str) -> float:
    """PosNet-Embed's kernel product on the H100: a candidate's median wall time, milliseconds."""
    record = json.loads((REPO / "examples" / "benchmarks" / "gpu" / "posnet_kernel.json").read_text(encoding="utf-8"))
    return record["median_wall_s"][candidate] * 1e3


def _cpu_bench_malloc_default_step(pe: str) -> float:
    """An encoding's step memory over SAPE's in the recorded CPU benchmark as the timing interpreter (glibc's default
    allocator) measured it."""
    rows = {r["pe"]: r for r in read_csv(REPO / CPU_BENCH) if r["size"] == "base"}
    return int(rows[pe]["malloc_default_step_bytes"]) / int(rows["sape"]["malloc_default_step_bytes"])


def _nope_swap_largest_change() -> float:
    """No-PE's largest change under the recorded word-swap probes (output chrF++/BLEU, NLL per token, share changed)."""
    rows = [r for r in read_csv(REPO / "examples" / "multi30k" / "analysis" / "analysis.csv")
            if r["pe"] == "nope" and r["kind"] == "model"]
    columns = [c for c in rows[0] if re.match(r"(dout_chrf|dout_bleu|dnll|changed)_(local|global|shuffle)$", c)]
    assert len(rows) == 1 and len(columns) == 12, (len(rows), columns)
    return max(abs(float(rows[0][c])) for c in columns)


def _kernel(candidate: str, what: str) -> float:
    """PosNet-Embed's kernel benchmark: the released broadcast's median wall time (or peak) over a candidate's."""
    record = json.loads((REPO / KERNEL_BENCH).read_text(encoding="utf-8"))[what]
    return record["released"] / record[candidate]


COMPUTED = {"small_lr_at_the_end": _small_lr_at_the_end, "user_default_less_lmax256": _user_default_less_lmax256,
            "bench_sape_less_paper_sape": _bench_sape_less_paper_sape,
            "paper_posnet_embed_less_sape": lambda: _paper_params_less_sape("posnet_embed"),
            "paper_lape_less_sape": lambda: _paper_params_less_sape("lape"),
            "fairseq_scaling_nmt_bleu": _fairseq_scaling_nmt_bleu,
            "paper_table3_memory_ratio": _paper_table3_memory_ratio,
            "smallest_bootstrap_p": _smallest_bootstrap_p,
            "nope_swap_largest_change": _nope_swap_largest_change,
            **{f"cpu_bench_malloc_default_step_{pe}": (lambda pe=pe: _cpu_bench_malloc_default_step(pe))
               for pe in ("rpe", "t5")},
            "gpu_python": _gpu_python,
            # docs/cluster.md: "32,768 / 28,452" seconds per update at SAPE's recorded speed (the WMT14 tokens per update)
            "gpu_sape_seconds_per_32k_update": lambda: 32768 / stated_value(GPU_TRAIN_SPEED, "wps",
                                                                            {"pe": "sape", "size": "base"}),
            "gpu_busy_goal_held_but_rpe": lambda: _gpu_goal_held_but_rpe("step", "kernel_ratio"),
            "gpu_peak_goal_held_but_rpe": lambda: _gpu_goal_held_but_rpe("peak", "peak_ratio"),
            "gpu_t5_and_kerple_busy_at_200": lambda: _gpu_t5_and_kerple_busy_at_200("models"),
            "gpu_after_t5_and_kerple_busy_at_200": lambda: _gpu_t5_and_kerple_busy_at_200("models_after"),
            **{f"gpu_{run}rpe_{what}_{name}": (lambda r=r, c=c, f=f: _gpu_rpe(r, c, f))
               for run, r in (("", "models"), ("after_", "models_after"))
               for what, c in (("kernels", "kernels_ratio"), ("peak", "peak_ratio"))
               for name, f in (("min", min), ("max", max))},
            **{f"gpu_kernel_ms_{c}": (lambda c=c: _gpu_kernel_ms(c)) for c in ("released", "bmm", "bmm-leftpad")},
            "cost_rpe_flops_min": lambda: _cost_rpe_flops(min), "cost_rpe_flops_max": lambda: _cost_rpe_flops(max),
            **{f"seeds_tau_{name}_{m}": (lambda m=m, f=f: _seeds_agreement(m, "kendall_tau", f))
               for m in ("bleu", "chrf") for name, f in (("min", min), ("max", max))},
            "seeds_p_max": lambda: max(_seeds_agreement(m, c, max) for m in ("bleu", "chrf")
                                       for c in ("kendall_p", "spearman_p")),
            **{f"cpu_bench_max_{c}": (lambda c=c: _cpu_bench_max(c))
               for c in ("step_ratio", "step_mem_ratio", "forward_ratio", "cpu_ratio")},
            **{f"kernel_{k}_{c}": (lambda c=c, w=w: _kernel(c, w)) for c in ("bmm", "bmm-leftpad")
               for k, w in (("speed_up", "median_wall_s"), ("memory_saving", "peak_bytes"))},
            "goal_step": lambda: _goal("step"), "goal_peak": lambda: _goal("peak"),
            "kerple_and_t5_busy_at_200": _kerple_and_t5_busy_at_200,
            "posnet_embed_params_512": lambda: _posnet_embed_params(512),
            "posnet_embed_params_256": lambda: _posnet_embed_params(256),
            "rpe_one_table_per_layer": _rpe_one_table_per_layer,
            "paper_rpe_less_sape": lambda: _paper_params_less_sape("rpe"),
            "paper_posnet_attn_less_sape": lambda: _paper_params_less_sape("posnet_attn"),
            "xavier_std_of_a_kernel": _xavier_std_of_a_kernel}


def stated_value(source: str, column, where: dict) -> float:
    if source.startswith("computed:"):
        return COMPUTED[source.split(":", 1)[1]]()
    if source.endswith(".json"):
        value = json.loads((REPO / source).read_text(encoding="utf-8"))
        if where:  # the one row of its "results" with these values
            rows = [r for r in value["results"] if all(r[k] == v for k, v in where.items())]
            assert len(rows) == 1, (source, where, len(rows))
            value = rows[0]
        for key in column.split("."):
            value = value[int(key)] if isinstance(value, list) else value[key]
        return float(value)
    if not source.endswith(".csv"):
        return float(re.findall(column, (REPO / source).read_text(encoding="utf-8"))[where.get("match", 0)])
    rows = [r for r in read_csv(REPO / source) if all(r[k] == v for k, v in where.items())]
    assert len(rows) == 1, (source, where, len(rows))
    return float(rows[0][column])


def prose_figures(doc: str) -> list:
    """The figures of a page's prose (tables, code and inline code left out), significance levels removed."""
    text = (REPO / doc).read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", "", "\n".join(line for line in text.split("\n") if not line.startswith("|")), flags=re.S)
    return PROSE_FIGURE.findall(THRESHOLDS.sub("", re.sub(r"`[^`]*`", "", prose)))


def shown(x: float, form: str, figure: str) -> str:
    """A value as PINNED's format writes it; "<" the tightest bound above it with the figure's decimals (0.001 for
    0.00044: "p < 0.001", not "p < 0.01")."""
    if form == "<":
        decimals = len(figure.split(".")[1])
        return f"{math.floor(x * 10 ** decimals + 1) / 10 ** decimals:.{decimals}f}"
    fmt = {"": "{:.2f}", "+": "{:+.2f}", "-": "{:.2f}", "p": "{:.2g}", "3": "{:.3f}"}
    return fmt[form.rstrip("M")].format((-x if form == "-" else x) / (1e6 if form.endswith("M") else 1))


@pytest.mark.parametrize("doc", sorted(PINNED))
def test_each_figure_of_the_prose_is_the_value_it_states(doc):
    """Every figure of the page's prose, in order, is listed in PINNED, and each is its one recorded (or computed)
    value as rounded: a figure gone stale, added without a source or pointing at another row fails."""
    assert prose_figures(doc) == [f for f, *_ in PINNED[doc]]
    wrong = [(f, source, column, where, shown(x, form, f))
             for f, source, column, where, form in PINNED[doc] if source != "exempt"
             for x in [stated_value(source, column, where)] if shown(x, form, f) != f]
    assert not wrong, f"{doc}: figures that are not the value they state: {wrong}"


def test_the_parameter_counts_in_the_design_prose():
    """docs/design.md's whole-number parameter counts (not two-decimal figures, so not in PINNED): each encoding's
    count in the recorded benchmark, and the products that spell them out."""
    bench = {r["pe"]: int(r["pe_params"]) for r in read_csv(REPO / CPU_BENCH) if r["size"] == "base"}
    text = flat("docs/design.md")
    stated = {"rpe": r"2 stacks x 6 layers x 8 heads x 33 x 64 x 2 = ([\d,]+)", "t5": r"T5 \+([\d,]+) \(32 buckets",
              "at5": r"Adaptive-T5 \+([\d,]+) \(paper"}
    for pe, pattern in stated.items():
        m = re.search(pattern, text)
        assert m and m[1] == f"{bench[pe]:,}", (pe, m and m[1], bench[pe])
    assert bench["rpe"] == 2 * 6 * 8 * 33 * 64 * 2 and bench["t5"] == 32 * 8 * 2 and bench["lape"] == 2 * 1026 * 512
    assert "LAPE +1.05M (paper +1.05M, 2 x 1026 x 512)" in text


def test_the_cpu_benchmark_settings_in_the_text():
    """docs/benchmarks_cpu.md's whole-number settings of the recorded models run are those of benchmark.json."""
    s = json.loads((REPO / CPU_BENCH_JSON).read_text(encoding="utf-8"))["settings"]
    text = flat("docs/benchmarks_cpu.md")
    m = re.search(r"Its settings line, as `benchmark\.md` records it: B=(\d+), T=(\d+), vocab (\d+), device (\w+), "
                  r"memory [\w-]+ \(`MALLOC_MMAP_THRESHOLD_=(\d+)`\), (\d+) threads, fastest of (\d+) steps and of "
                  r"(\d+)-pass forward blocks x (\d+) rounds, warmup (\d+), torch ([\w.+]+);", text)
    assert m, "the settings line"
    assert list(m.groups()) == [str(s[k]) for k in ("batch", "length", "vocab", "device")] + [
        s["memory_env"]["MALLOC_MMAP_THRESHOLD_"]] + [str(s[k]) for k in (
            "threads", "steps", "forward_passes", "rounds", "warmup")] + [s["torch"]]
    assert f"measures on one fixed batch (B={s['batch']}, T={s['length']}, 40k joined vocabulary)" in text
    assert s["vocab"] == 40000 and s["cpu_count"] == 2  # "40k", "a 2-core machine"


def test_the_gpu_fp16_check_in_its_readme():
    """examples/benchmarks/gpu/README.md: its summary of the recorded GPU fp16 check, read from the JSON."""
    gpu = REPO / "examples" / "benchmarks" / "gpu"
    rows = json.loads((gpu / "fp16_check.json").read_text())["rows"]
    text = re.sub(r"\s+", " ", (gpu / "README.md").read_text())
    from pe_plugin.encodings import PE_REGISTRY

    assert sorted(r["pe"] for r in rows) == sorted(PE_REGISTRY) and all(r["ok"] for r in rows)
    assert f"all {['ten', 'eleven', 'twelve'][len(rows) - 10]} encodings within tolerance" in text
    assert f"largest log-probability difference {max(r['max_abs_lprob_diff'] for r in rows):.4f}" in text
    assert f"argmax agreement at least {min(r['argmax_agreement'] for r in rows):.4f}" in text
    assert f"gradients within {max(r['grad_rel_diff'] for r in rows):.4f} relative" in text


# ------------------------------------------------------------------------------------------------
# counts and timings the documents state about the project itself

NUMBER_WORDS = {8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen"}
# how the README's opening sentence names each encoding (a reference written here, not read from the code)
PROSE_NAMES = {"nope": "no PE", "sape": "sinusoidal (SAPE)", "lape": "learned absolute (LAPE)",
               "rpe": "relative positions (RPE)", "t5": "the T5 bias", "at5": "Adaptive-T5",
               "posnet_embed": "**PosNet** at the embedding", "posnet_attn": "and at the attention level",
               "rope": "RoPE", "alibi": "ALiBi", "kerple": "KERPLE"}
# a count of encodings below the registry's is about a subset, and its sentence says which
SUBSET_WORDS = ("trained", "of that commit", "of its commit", "seed-1")


def flat(doc: str) -> str:
    return re.sub(r"\s+", " ", (REPO / doc).read_text(encoding="utf-8"))


def test_the_counts_in_the_text():
    """The README's number of encodings, its lists of them and its number of architectures are the registry's;
    every "N encodings" of the documents is the registry's count or says which subset it counts."""
    from pe_plugin.encodings import PE_REGISTRY
    from pe_plugin.models.architectures import architecture_names

    readme = flat("README.md")
    assert sorted(PROSE_NAMES) == sorted(PE_REGISTRY), "name the new encoding in PROSE_NAMES and the README"
    opening = re.search(r"registers Transformer architectures for (\w+) positional encodings(.*?)\.\s", readme)
    assert opening and opening[1] == NUMBER_WORDS[len(PE_REGISTRY)], opening and opening[1]
    missing = [pe for pe, name in PROSE_NAMES.items() if name not in opening[2]]
    assert not missing, f"the README's opening list leaves out {missing}"
    listed = re.search(r"`pe_plugin\.encodings\.PE_REGISTRY` \(`([a-z0-9_ ]+)`\)", readme)
    assert listed and listed[1].split() == list(PE_REGISTRY)
    assert f"`python -m pe_plugin` lists the {len(architecture_names())} architectures" in readme
    short = {"nope": "no-PE", "sape": "SAPE", "lape": "LAPE", "rpe": "RPE", "t5": "T5", "at5": "Adaptive-T5",
             "posnet_embed": "PosNet-Embed", "posnet_attn": "PosNet-Attn", "rope": "RoPE", "alibi": "ALiBi",
             "kerple": "KERPLE"}  # setup.py's description names every encoding
    described = re.search(r'description="([^"]*)"\s*(?:"([^"]*)")?', (REPO / "setup.py").read_text())
    names = re.split(r", ", (described[1] + (described[2] or "")).split(": ", 1)[1])
    assert sorted(short) == sorted(PE_REGISTRY) and names == [short[pe] for pe in PE_REGISTRY], names
    for doc in ALL_DOCS:
        for m in re.finditer(r"\b(eight|nine|ten|eleven|twelve|thirteen) (?:[\w-]+ ){0,2}encodings\b", flat(doc)):
            if m[1] != NUMBER_WORDS[len(PE_REGISTRY)]:
                around = flat(doc)[max(0, m.start() - 150):m.end() + 150]
                assert any(w in around for w in SUBSET_WORDS), f"{doc}: {m[0]!r} is not the registry's count: {around}"


def recorded_timings() -> dict:
    """{(command, machine): row} of examples/timings.md, each row's time checked against the recorded file it names."""
    header, rows = recorded_table("examples/timings.md")
    out = {}
    for row in rows:
        r = dict(zip(header, row))
        out[r["command"].strip("`"), r["machine"]] = r
        value, unit = r["wall time"].split()
        source = re.search(r"`((?:examples)/[\w./]+)`", r["printed or recorded"])
        if source and unit == "min":
            assert f" {value} min] done" in (REPO / source[1]).read_text(), r
        elif source:
            assert f"{value} s in all" in (REPO / source[1]).read_text(), r
        elif r["command"] == "`make test`":
            assert re.search(rf" in {value}\.\d\ds \(", r["printed or recorded"]), r
    return out


# every timing of the documents: (document, its text with the figure as a group, row of examples/timings.md); the
# text names the machine and the load
TIMED = [
    ("README.md", r"whole test suite: (\d+) minutes on 2 idle CPU cores \(at cf75261\)",
     ("make test", "2 CPU cores, 2 test processes")),
    ("README.md", r"calls of 5 s or more\): (\d+) s on 2 idle CPU cores",
     ("make test-fast", "2 CPU cores, 2 test processes, tiers by measured time")),
    ("README.md", r"At commit 58cdc7c `make test-fast` ended `(.*?)`",
     ("make test-fast", "2 CPU cores, 2 test processes, tiers by measured time")),
    ("README.md", r"make demo # ([\d.]+) minutes on an idle 2-core machine", ("make demo", "a 2-core machine")),
    ("README.md", r"one model at a time, beside a benchmark: ([\d.]+) minutes", ("pe-demo --jobs 1", "a 2-core machine")),
    ("README.md", r": (\d+) s on 2 idle cores of a 16-core Intel Xeon", ("quick start", "2 cores of a 16-core Intel Xeon")),
    ("README.md", r", (\d+) s on a 2-core machine at load 3.6 to 4.1", ("quick start", "the project's 2-core machine")),
    ("docs/demo.md", r"CPU: ([\d.]+) minutes on an idle 2-core machine", ("make demo", "a 2-core machine")),
    ("docs/demo.md", r"train: ([\d.]+) minutes, beside a benchmark on the other core of a 2-core machine",
     ("pe-demo --jobs 1", "a 2-core machine")),
    ("docs/length.md", r"([\d.]+) minutes on 2 idle CPU cores", ("make length", "a 2-core machine")),
    ("docs/length.md", r"beside other work on the second core of a 2-core machine: ([\d.]+) minutes",
     ("pe-length --jobs 1", "a 2-core machine")),
]


@pytest.mark.parametrize("doc, text, key", TIMED, ids=[f"{d}:{k[0]}:{i}" for i, (d, _, k) in enumerate(TIMED)])
def test_timings_in_the_text(doc, text, key):
    row = recorded_timings()[key]
    m = re.search(text, flat(doc))
    assert m, f"{doc} no longer says {text!r}"
    value, unit = row["wall time"].split()
    if re.match(r"(\d+ failed, )?\d+ passed", m[1]):  # the printed summary line
        assert f"`{m[1]}`" == row["printed or recorded"]
    elif "minutes" in text and unit == "s":
        assert m[1] == str(round(float(value) / 60)), (m[1], row)
    else:
        assert m[1] == value, (m[1], row)


def test_every_timing_of_the_readme_is_checked():
    """A timing the README states ("N minutes on", "N s on") is one of TIMED's."""
    readme = flat("README.md")
    stated = {m.start() for m in re.finditer(r"\b\d+(?:\.\d)? (?:s|minutes) on\b", readme)}
    checked = {m.start(1) for doc, text, _ in TIMED if doc == "README.md" for m in re.finditer(text, readme)}
    assert stated <= checked, [readme[i:i + 60] for i in sorted(stated - checked)]
