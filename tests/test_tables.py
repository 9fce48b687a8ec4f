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

The figures in the prose of the same documents: tests/test_prose_figures.py.
"""
import json
import re
import shutil
import subprocess
import sys

import pytest

import pe_testing
from pe_recorded import flat, gpu_models, read_csv
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
    both pairs (the figures themselves are pinned in test_prose_figures.PINNED), and the rank agreement is over the five encodings."""
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

    from pe_plugin.naming import CLASS_OF_SUFFIX

    doc, line, header, rows = marked("architecture_sizes")
    assert [r[0].split()[0] for r in rows] == list(CLASS_OF_SUFFIX)
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
    from pe_references import BIDIRECTIONAL_STARTS, CAUSAL_STARTS

    doc, line, header, rows = marked("t5_buckets")
    assert [r[2] for r in rows] == [", ".join(map(str, s)) for s in (BIDIRECTIONAL_STARTS, CAUSAL_STARTS)]


def test_computed_attenuated_map():
    """docs/analysis.md §Attenuated map: the values tests/test_analysis.py checks against the indicators."""
    from pe_references import CHEN_TABLE

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


def test_the_gpu_fp16_check_in_its_readme():
    """examples/benchmarks/gpu/README.md: its summary of the recorded GPU fp16 check, read from the JSON."""
    gpu = REPO / "examples" / "benchmarks" / "gpu"
    rows = json.loads((gpu / "fp16_check.json").read_text())["rows"]
    text = re.sub(r"\s+", " ", (gpu / "README.md").read_text())
    from pe_documented import not_yet_in, report_pending
    from pe_plugin.encodings import PE_REGISTRY

    held = [r["pe"] for r in rows]
    assert set(held) <= set(PE_REGISTRY) and len(set(held)) == len(held) and all(r["ok"] for r in rows)
    assert f"all {['ten', 'eleven', 'twelve'][len(rows) - 10]} encodings within tolerance" in text
    assert f"largest log-probability difference {max(r['max_abs_lprob_diff'] for r in rows):.4f}" in text
    assert f"argmax agreement at least {min(r['argmax_agreement'] for r in rows):.4f}" in text
    assert f"gradients within {max(r['grad_rel_diff'] for r in rows):.4f} relative" in text
    # an encoding added since the record needs a CUDA GPU to join it (pe-bench fp16): pending, not failed
    report_pending(not_yet_in(held, PE_REGISTRY), "examples/benchmarks/gpu/fp16_check.json",
                   "pe-bench fp16 on a CUDA GPU adds it; the CPU tests check the same paths in float64")


# ------------------------------------------------------------------------------------------------
# counts and timings the documents state about the project itself

NUMBER_WORDS = {8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen"}
# how the README's opening sentence names each encoding of its method table (a reference written here, not read
# from the code; an encoding added since is in none of the README's lists: tests/pe_documented.py)
PROSE_NAMES = {"nope": "no PE", "sape": "sinusoidal (SAPE)", "lape": "learned absolute (LAPE)",
               "rpe": "relative positions (RPE)", "t5": "the T5 bias", "at5": "Adaptive-T5",
               "posnet_embed": "**PosNet** at the embedding", "posnet_attn": "and at the attention level",
               "rope": "RoPE", "alibi": "ALiBi", "kerple": "KERPLE"}
# a count of encodings below the registry's is about a subset, and its sentence says which
SUBSET_WORDS = ("trained", "of that commit", "of its commit", "seed-1")


def test_the_counts_in_the_text():
    """The README's number of encodings and its lists of them are those of its method table, which are registered
    and in the registry's order; every "N encodings" of the documents is that count or says which subset it counts.
    (An encoding added since is in none of them: tests/pe_documented.py.)"""
    from pe_documented import readme_methods
    from pe_plugin.encodings import PE_REGISTRY
    from pe_plugin.models.architectures import architecture_names

    readme = flat("README.md")
    shipped = readme_methods()
    assert shipped == [pe for pe in PE_REGISTRY if pe in shipped], "the method table names an unregistered encoding"
    assert sorted(PROSE_NAMES) == sorted(shipped), "name the new encoding in PROSE_NAMES and the README"
    opening = re.search(r"registers Transformer architectures for (\w+) positional encodings(.*?)\.\s", readme)
    assert opening and opening[1] == NUMBER_WORDS[len(shipped)], opening and opening[1]
    missing = [pe for pe, name in PROSE_NAMES.items() if name not in opening[2]]
    assert not missing, f"the README's opening list leaves out {missing}"
    listed = re.search(r"`pe_plugin\.encodings\.PE_REGISTRY` \(`([a-z0-9_ ]+)`\)", readme)
    assert listed and listed[1].split() == shipped
    assert "`python -m pe_plugin` lists the architectures, four an encoding" in readme
    assert len(architecture_names()) == 4 * len(PE_REGISTRY)
    short = {"nope": "no-PE", "sape": "SAPE", "lape": "LAPE", "rpe": "RPE", "t5": "T5", "at5": "Adaptive-T5",
             "posnet_embed": "PosNet-Embed", "posnet_attn": "PosNet-Attn", "rope": "RoPE", "alibi": "ALiBi",
             "kerple": "KERPLE"}  # setup.py's description names every encoding
    described = re.search(r'description="([^"]*)"\s*(?:"([^"]*)")?', (REPO / "setup.py").read_text())
    names = re.split(r", ", (described[1] + (described[2] or "")).split(": ", 1)[1])
    assert sorted(short) == sorted(shipped) and names == [short[pe] for pe in shipped], names
    for doc in ALL_DOCS:
        for m in re.finditer(r"\b(eight|nine|ten|eleven|twelve|thirteen) (?:[\w-]+ ){0,2}encodings\b", flat(doc)):
            if m[1] != NUMBER_WORDS[len(shipped)]:
                around = flat(doc)[max(0, m.start() - 150):m.end() + 150]
                assert any(w in around for w in SUBSET_WORDS), f"{doc}: {m[0]!r} is not the registry's count: {around}"


def recorded_timings() -> dict:
    """{(command, machine): row} of docs/dev/timings.md, each row's time checked against the recorded file it names."""
    header, rows = recorded_table("docs/dev/timings.md")
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


# every timing of the documents: (document, its text with the figure as a group, row of docs/dev/timings.md); the
# text names the machine and the load. The test suite's own times are contributor records (docs/dev/timings.md),
# which the user documents do not quote: each new test would make a quoted figure stale.
TIMED = [
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
