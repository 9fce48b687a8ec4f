"""examples/multi30k/analysis/: what the eleven annealed Multi30k En-De models learned (issue 32, part 5; KERPLE
added by issue 41).

The CSV holds what pe-probe, pe-swap-probe and pe-evaluate wrote (gathered by devtools/collect_analysis.py); these
tests need neither the checkpoints nor the corpus. They check that the CSV is whole, that the models without an
encoder position signal give their exact references, that summary.md (the tables docs/analysis.md shows) is what
devtools.collect_analysis renders from the CSV, that collect_analysis keeps the recorded rows of an encoding it has
no probes of (and that KERPLE's map in probe_maps.csv is the one its rows describe), and that every number and
comparison stated in docs/analysis.md §What the trained Multi30k models learned is read from the CSV. Where the test
reference exists, the CSV's BLEU is re-scored from the recorded translations.
"""
import csv
import io
import math
import re

import pytest

import pe_testing
from pe_references import uniform_locality
from pe_testing import REPO

FOLDER = REPO / "examples" / "multi30k" / "analysis"
CSV = FOLDER / "analysis.csv"
DOC = REPO / "docs" / "analysis.md"
SECTION = "## What the trained Multi30k models learned"
# figures of the section quoted from the papers or docs/analysis.md's definitions, not measured here
QUOTED = {"0.354": "Wang et al.'s monotonicity (OPR), Table 7", "0.084": "Wang et al.'s OPR over the first 20",
          "0.0214": "Wang et al.'s translation invariance (AIV)", "0.8074": "Wang et al.'s direction balance",
          "0.0002": "Wang et al.'s symmetry (SD)", "0.16": "Chen et al.'s BERT-like locality",
          "0.17": "Chen et al.'s BERT-like locality", "0.162": "Chen et al.'s BERT locality (Table 3, 16.2%)",
          "0.879": "Chen et al.'s BERT symmetry (Table 3, 87.9%)",
          "0.54": "Wang et al.'s OPR of their model without positions"}
# a figure: two to four decimals (also before a full stop), or a percentage with one
FIGURE = re.compile(r"(?<![\w.])[+-]?\d+\.\d{2,4}(?![\w]|\.\d)|(?<![\w.])\d+\.\d%")


def load_collect():
    from devtools import collect_analysis

    return collect_analysis


@pytest.fixture(scope="module")
def rows():
    with open(CSV, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def probe(rows, pe, side="encoder", length=20, layer="mean", variant="without_special"):
    found = [r for r in rows if r["kind"] == "probe" and r["pe"] == pe and r["side"] == side and r["layer"] == layer
             and r["variant"] == variant and int(r["length"]) == length]
    assert len(found) == 1, (pe, side, length, layer, variant)
    return found[0]


def model(rows, pe):
    found = [r for r in rows if r["kind"] == "model" and r["pe"] == pe]
    assert len(found) == 1, pe
    return found[0]


def num(x: str) -> float:
    return math.nan if x == "" else float(x)


def test_every_encoding_side_layer_and_length_has_a_row(rows):
    methods = load_collect().METHODS
    assert len(methods) == 11 and methods[-1] == "kerple"
    for pe in methods:
        for length in (20, 64):
            for side in ("encoder", "decoder"):
                for variant in ("with_special", "without_special"):
                    for layer in ("1", "2", "3", "mean"):
                        r = probe(rows, pe, side, length, layer, variant)
                        assert r["words"] == "100" and r["locality"] != ""
        m = model(rows, pe)
        assert m["swap_sentences"] == "500"
        assert all(m[k] != "" for k in m if k.startswith(("bleu", "chrf", "dout_", "dnll_")))
    assert len(rows) == 11 * (2 * 2 * 2 * 4 + 1)


@pytest.mark.parametrize("pe", ["nope", "posnet_attn"])
def test_no_encoder_position_signal_gives_the_exact_references(rows, pe):
    """No-PE and PosNet-Attn (values only) have uniform encoder maps on a repeated word (docs/analysis.md
    §What identical-word probing cannot see): Locality of the uniform map, symmetric, AIV undefined, OPR 0 / 0.5
    by the tie rule."""
    for length in (20, 64):
        for layer in ("1", "2", "3", "mean"):
            r = probe(rows, pe, length=length, layer=layer)
            assert float(r["locality"]) == pytest.approx(uniform_locality(length), abs=1e-6)
            assert float(r["sym_abs"]) == pytest.approx(1.0, abs=1e-6) and r["aiv"] == ""
            assert float(r["opr"]) == 0.0 and float(r["opr_tie_half"]) == 0.5
            assert float(r["db20"]) == pytest.approx(1.0, abs=1e-6)
    # a negative control: an encoding with positions is not uniform
    for other in ("sape", "rope", "t5", "alibi", "kerple"):
        assert float(probe(rows, other)["locality"]) > uniform_locality(20) + 0.02


def test_nope_is_blind_to_word_order_and_the_others_are_not(rows):
    """docs/analysis.md §Word-swap probes: no encoder position signal gives Δout = 0 and ΔNLL = 0 exactly (up to
    float summation order) for every permutation."""
    nope = model(rows, "nope")
    for kind in ("local", "global", "shuffle"):
        assert float(nope[f"dout_chrf_{kind}"]) == 0.0 and float(nope[f"changed_{kind}"]) == 0.0
        assert abs(float(nope[f"dnll_{kind}"])) < 1e-5
        for pe in ("sape", "posnet_attn", "rope"):
            assert float(model(rows, pe)[f"dnll_{kind}"]) > 0.05
    for pe in load_collect().METHODS[1:]:  # every model with positions: global swaps cost more than local ones
        m = model(rows, pe)
        assert float(m["dnll_global"]) > float(m["dnll_local"]) and float(m["dnll_shuffle"]) > float(m["dnll_global"])


def test_summary_is_rendered_from_the_csv():
    collect = load_collect()
    text = CSV.read_text(encoding="utf-8")
    assert (FOLDER / "summary.md").read_text(encoding="utf-8") == \
        collect.render_summary(list(csv.DictReader(io.StringIO(text))))


def test_the_folder_is_small():
    files = [p for p in FOLDER.iterdir() if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 2_000_000
    assert {p.suffix for p in files} <= {".csv", ".md", ".png", ".py"}


def test_the_readme_shows_sapes_swap_probe_output(rows):
    """The three lines pe-swap-probe printed for SAPE (and for KERPLE, added later), as the folder's README shows
    them (in the code block after the line that names them), are the CSV's."""
    text = (FOLDER / "README.md").read_text(encoding="utf-8")
    line = (r"^(local|global|shuffle) +n= +(\d+) +Δout\(chrF\+\+\) +([\d.]+) +Δout\(BLEU\) +([\d.]+) +"
            r"ΔNLL/token ([+-][\d.]+) +changed +([\d.]+)%$")
    assert len(re.findall(line, text, flags=re.M)) == 6
    for pe, name in (("sape", "SAPE's"), ("kerple", "KERPLE's")):
        block = re.search(rf"{name}[^\n]*:\n```\n(.*?)```", text, flags=re.S)
        assert block, name
        shown = re.findall(line, block[1], flags=re.M)
        assert [k for k, *_ in shown] == ["local", "global", "shuffle"], name
        m = model(rows, pe)
        for kind, n, chrf, bleu, nll, changed in shown:
            assert (n, chrf, bleu, nll, changed) == (m["swap_sentences"], f"{float(m[f'dout_chrf_{kind}']):.3f}",
                                                     f"{float(m[f'dout_bleu_{kind}']):.3f}",
                                                     f"{float(m[f'dnll_{kind}']):+.5f}",
                                                     f"{100 * float(m[f'changed_{kind}']):.1f}"), (pe, kind)


# ---- collect_analysis adds a model to the recorded analysis -------------------------------------------------

def evaluate_folder(rows, folder, bleu_of=None):
    """A stand-in for pe-evaluate's --out-dir: results.csv and results_length.csv with the CSV's scores (the columns
    collect_analysis reads); ``bleu_of`` {pe: BLEU} replaces a model's whole-test BLEU."""
    collect = load_collect()
    models = [r for r in rows if r["kind"] == "model"]
    keys = [k[len("bleu_"):] for k in models[0] if k.startswith("bleu_")]
    whole = [{"system": r["pe"], "bleu": (bleu_of or {}).get(r["pe"], r["bleu"]), "chrf": r["chrf"]} for r in models]
    length = [{"system": r["pe"], "bucket": collect.label(k), "bleu": r[f"bleu_{k}"], "chrf": r[f"chrf_{k}"]}
              for r in models for k in keys]
    folder.mkdir()
    (folder / "results.csv").write_text(collect.csv_text(whole), encoding="utf-8")
    (folder / "results_length.csv").write_text(collect.csv_text(length), encoding="utf-8")
    return folder


def recorded_copy(folder):
    """A copy of the recorded analysis (the CSV, summary.md, probe_maps.csv) and a stand-in probe_maps.png."""
    folder.mkdir()
    for name in ("analysis.csv", "summary.md", "probe_maps.csv"):
        (folder / name).write_bytes((FOLDER / name).read_bytes())
    (folder / "probe_maps.png").write_bytes(b"the recorded figure")
    return folder


def test_collect_keeps_the_recorded_rows_of_encodings_without_probes(rows, tmp_path):
    """With no probe folder at all, collect_analysis writes the recorded analysis as it is: every encoding keeps
    its probe rows and word-swap columns, its BLEU and chrF++ come from pe-evaluate, summary.md and probe_maps.csv
    are unchanged, and probe_maps.png (no map of ten encodings) is left as it was."""
    collect = load_collect()
    out = recorded_copy(tmp_path / "out")
    (tmp_path / "probes").mkdir()
    evaluate = evaluate_folder(rows, tmp_path / "evaluate")
    table, maps, kept = collect.gather(tmp_path / "probes", evaluate, 20, out)
    assert kept == collect.METHODS and set(maps) == {"kerple"}
    assert collect.csv_text(table) == CSV.read_text(encoding="utf-8")
    assert collect.main(["--probes", str(tmp_path / "probes"), "--evaluate", str(evaluate), "--out", str(out)]) == 0
    for name in ("analysis.csv", "summary.md", "probe_maps.csv"):
        assert (out / name).read_bytes() == (FOLDER / name).read_bytes(), name
    assert (out / "probe_maps.png").read_bytes() == b"the recorded figure"
    assert all((out / f"{name}.png").stat().st_size > 10_000
               for name in ("probe_indicators", "swap_probe", "bleu_by_length"))


def test_collect_refuses_recorded_probes_of_other_translations(rows, tmp_path):
    """A kept encoding whose pe-evaluate BLEU is not the recorded one (other translations, so another model) stops
    the run; so does an encoding with neither a probe folder nor recorded rows."""
    collect = load_collect()
    out = recorded_copy(tmp_path / "out")
    (tmp_path / "probes").mkdir()
    evaluate = evaluate_folder(rows, tmp_path / "evaluate", {"kerple": float(model(rows, "kerple")["bleu"]) + 0.01})
    with pytest.raises(SystemExit, match="kerple: pe-evaluate's bleu differ"):
        collect.gather(tmp_path / "probes", evaluate, 20, out)
    evaluate = evaluate_folder(rows, tmp_path / "evaluate_same")
    collect.gather(tmp_path / "probes", evaluate, 20, out)  # the recorded scores: no error
    (out / "analysis.csv").write_text(collect.csv_text([r for r in rows if r["pe"] != "kerple"]), encoding="utf-8")
    with pytest.raises(SystemExit, match="no rows of kerple"):
        collect.gather(tmp_path / "probes", evaluate, 20, out)


def test_kerples_recorded_map_is_the_one_its_rows_describe(rows):
    """probe_maps.csv holds KERPLE's L = 20 encoder map (the mean of the layers, EOS dropped: rows that sum to 1),
    and the indicators of it are the CSV's row of that map. The ten earlier maps were not kept (probe_maps.png)."""
    from pe_plugin.analysis import indicators

    collect = load_collect()
    maps = collect.read_maps(FOLDER / "probe_maps.csv", 20)
    assert set(maps) == {"kerple"} and maps["kerple"].shape == (20, 20)
    assert abs(maps["kerple"].sum(axis=1) - 1).max() < 1e-9
    computed = indicators.all_indicators(maps["kerple"], False, 20, 20)
    row = probe(rows, "kerple")
    for k in collect.INDICATORS:
        assert computed[k] == pytest.approx(float(row[k]), abs=1e-12), k


# ---- docs/analysis.md ---------------------------------------------------------------------------------------

def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


# Each figure of the section, in its order, with the one value it states (not any number of the CSV: a random
# three-decimal figure would match one of its thousands more often than not). A row is (figure, how, *arguments):
# "probe" PE, COLUMN, {side, length, layer, variant} (probe()'s defaults: encoder, L = 20, the mean of the layers,
# EOS dropped); "model" PE, COLUMN; "min"/"max" over the probes (PEs, COLUMN, where) or over the models (PEs, COLUMN,
# "model") of a range the text does not name; "uniform" N, the Locality of a uniform N x N map; "below" the tightest
# bound, as written, that the values (a function of the rows) stay under; "quoted" a paper's figure, its source in
# QUOTED. A figure is rounded as written (a percentage: 100 x to one decimal).
L64, LAYER1, LAYER3, DECODER = {"length": 64}, {"layer": "1"}, {"layer": "3"}, {"side": "decoder"}
POSITIONED = ["sape", "lape", "rpe", "t5", "at5", "posnet_embed", "posnet_attn", "rope", "alibi", "kerple"]  # not No-PE


def _local_excess_at_64(rows) -> float:
    """How far the absolute encodings, T5 and AT5 stay above the uniform map's Locality at L = 64, the most."""
    return max(float(probe(rows, pe, length=64)["locality"]) - uniform_locality(64)
               for pe in ("sape", "lape", "posnet_embed", "t5", "at5"))


SECTION_FIGURES = [
    ("0.16", "quoted"), ("0.17", "quoted"), ("0.162", "quoted"), ("0.023", "uniform", 128),
    ("0.166", "probe", "at5", "locality", {}), ("0.267", "probe", "rope", "locality", {}), ("0.140", "uniform", 20),
    ("0.065", "probe", "sape", "locality", L64), ("0.051", "probe", "lape", "locality", L64),
    ("0.060", "probe", "posnet_embed", "locality", L64), ("0.059", "probe", "t5", "locality", L64),
    ("0.056", "probe", "at5", "locality", L64), ("0.02", "below", _local_excess_at_64), ("0.046", "uniform", 64),
    ("0.124", "probe", "rope", "locality", L64), ("0.132", "probe", "alibi", "locality", L64),
    ("0.384", "probe", "kerple", "locality", {}), ("0.307", "probe", "kerple", "locality", L64),
    # translation invariance
    ("0.023", "probe", "rpe", "aiv", {}), ("0.009", "probe", "t5", "aiv", {}), ("0.025", "probe", "rope", "aiv", {}),
    ("0.065", "probe", "alibi", "aiv", {}), ("0.011", "probe", "kerple", "aiv", {}),
    ("0.033", "max", ["rpe", "t5", "rope", "alibi", "kerple"], "aiv", L64),
    ("0.052", "probe", "sape", "aiv", {}), ("0.0214", "quoted"), ("0.685", "probe", "sape", "aiv", L64),
    ("0.321", "probe", "lape", "aiv", {}), ("0.834", "probe", "lape", "aiv", L64),
    ("0.141", "probe", "posnet_embed", "aiv", {}), ("0.677", "probe", "posnet_embed", "aiv", L64),
    ("0.505", "probe", "at5", "aiv", {}), ("0.562", "probe", "at5", "aiv", L64),
    # monotonicity
    ("0.354", "quoted"), ("0.084", "quoted"), ("0.088", "probe", "sape", "opr", {}),
    ("0.210", "probe", "sape", "opr", LAYER1), ("0.354", "probe", "t5", "opr", {}),
    ("0.000", "probe", "alibi", "opr", {}), ("0.003", "probe", "kerple", "opr", {}),
    ("0.000", "probe", "kerple", "opr", LAYER1),
    # direction
    ("0.8074", "quoted"), ("0.771", "probe", "sape", "db20", LAYER1), ("0.918", "probe", "rope", "db20", LAYER1),
    ("2.060", "probe", "at5", "db20", LAYER1), ("1.006", "probe", "alibi", "db20", LAYER1),
    ("1.021", "probe", "kerple", "db20", LAYER1),
    ("1.58", "probe", "rpe", "db20", LAYER3), ("2.28", "probe", "rope", "db20", LAYER3),
    ("1.146", "probe", "rpe", "db20", {}), ("1.192", "probe", "rope", "db20", {}),
    # symmetry
    ("0.879", "quoted"), ("0.416", "probe", "kerple", "sym_code", {}), ("0.782", "probe", "rpe", "sym_code", {}),
    ("0.469", "probe", "alibi", "sym_code", {}), ("0.416", "probe", "kerple", "sym_code", {}),
    ("0.844", "min", [pe for pe in POSITIONED if pe not in ("posnet_attn", "alibi", "kerple")], "sym_abs", {}),
    ("0.938", "max", [pe for pe in POSITIONED if pe not in ("posnet_attn", "alibi", "kerple")], "sym_abs", {}),
    ("0.987", "probe", "alibi", "sym_abs", {}), ("0.991", "probe", "kerple", "sym_abs", {}), ("0.0002", "quoted"),
    ("0.002", "probe", "kerple", "sd", {}), ("0.011", "probe", "at5", "sd", {}),
    # what the probe cannot see
    ("0.140", "probe", "posnet_attn", "locality", {}), ("34.47", "model", "posnet_attn", "bleu"),
    ("29.37", "model", "nope", "bleu"), ("0.313", "probe", "nope", "locality", DECODER),
    ("0.325", "probe", "posnet_attn", "locality", DECODER),
    ("0.316", "min", [pe for pe in POSITIONED if pe not in ("posnet_attn", "kerple")], "locality", DECODER),
    ("0.412", "max", [pe for pe in POSITIONED if pe not in ("posnet_attn", "kerple")], "locality", DECODER),
    ("0.583", "probe", "kerple", "locality", DECODER),
    # word-swap probe
    ("34.6%", "model", "lape", "changed_local"), ("71.2%", "model", "rope", "changed_local"),
    ("78.0%", "min", POSITIONED, "changed_global", "model"), ("91.4%", "max", POSITIONED, "changed_global", "model"),
    ("2.09", "model", "rope", "ratio_dnll"), ("7.43", "model", "posnet_attn", "ratio_dnll"),
    ("0.337", "model", "rope", "dnll_local"), ("0.290", "model", "rpe", "dnll_local"),
    ("0.230", "model", "t5", "dnll_local"), ("19.14", "min", ["rpe", "t5", "rope"], "dout_chrf_local", "model"),
    ("21.87", "max", ["rpe", "t5", "rope"], "dout_chrf_local", "model"), ("0.064", "model", "lape", "dnll_local"),
    ("0.063", "model", "posnet_attn", "dnll_local"), ("0.106", "model", "alibi", "dnll_local"),
    ("0.174", "model", "kerple", "dnll_local"),
    ("0.470", "model", "posnet_attn", "dnll_global"),
    # BLEU by source length
    ("41.47", "model", "sape", "bleu_le9"), ("25.01", "model", "sape", "bleu_ge20"),
    ("37.87", "model", "nope", "bleu_le9"), ("15.18", "model", "nope", "bleu_ge20"),
    ("44.09", "model", "rope", "bleu_le9"), ("26.46", "model", "rope", "bleu_ge20"),
    # KERPLE next to T5 and ALiBi
    ("3.24", "model", "kerple", "ratio_dnll"), ("2.37", "model", "t5", "ratio_dnll"),
    ("5.40", "model", "alibi", "ratio_dnll"), ("37.05", "model", "kerple", "bleu"), ("37.26", "model", "t5", "bleu"),
    ("36.14", "model", "alibi", "bleu"), ("24.96", "model", "kerple", "bleu_ge20"),
    ("22.78", "model", "t5", "bleu_ge20"), ("21.46", "model", "alibi", "bleu_ge20"),
]


def section_figures() -> list:
    """The figures of the section's prose (tables, code and inline code left out)."""
    prose = re.sub(r"```.*?```", "", section(), flags=re.S)
    prose = "\n".join(line for line in prose.split("\n") if not line.startswith("|"))  # tables: tests/test_tables.py
    return FIGURE.findall(re.sub(r"`[^`]*`", "", prose))


def stated(rows, how, *args) -> float:
    if how == "probe":
        pe, column, where = args
        return float(probe(rows, pe, **where)[column])
    if how == "model":
        pe, column = args
        return float(model(rows, pe)[column])
    if how in ("min", "max"):
        pes, column, where = args
        values = [float((model(rows, pe) if where == "model" else probe(rows, pe, **where))[column]) for pe in pes]
        return min(values) if how == "min" else max(values)
    if how == "uniform":
        return uniform_locality(*args)
    raise ValueError(how)


def as_written(figure: str, x: float) -> str:
    if figure.endswith("%"):
        return f"{100 * x:.1f}%"
    decimals = len(figure.split(".")[1])
    return f"{x:+.{decimals}f}" if figure[0] in "+-" else f"{x:.{decimals}f}"


def test_each_figure_of_the_section_is_the_value_it_states(rows):
    """Every figure of the section's prose, in order, is listed in SECTION_FIGURES, and each is its one value of the
    CSV (or of a uniform map) as rounded, a bound holds, a quoted figure has its source: a figure gone stale, added
    without a source or pointing at another row fails."""
    assert section_figures() == [f for f, *_ in SECTION_FIGURES]
    wrong = []
    for figure, how, *args in SECTION_FIGURES:
        if how == "quoted":
            assert figure in QUOTED, figure
        elif how == "below":  # the tightest bound as written: 0.02 for 0.019, not 0.03
            step = 10.0 ** -len(figure.split(".")[1])
            if not float(figure) - step <= args[0](rows) < float(figure):
                wrong.append((figure, how, args[0](rows)))
        elif as_written(figure, stated(rows, how, *args)) != figure:
            wrong.append((figure, how, *args, as_written(figure, stated(rows, how, *args))))
    assert not wrong, f"figures that are not the value they state: {wrong}"


# The figures of docs/analysis.md outside that section (its definitions), in order: a paper's figure ("quoted"), or
# what pe_plugin/analysis/indicators.py computes for the map the sentence names, as rounded.
def _indicators():
    from pe_plugin.analysis import indicators

    return indicators


def _uniform_map_locality(n: int) -> float:
    """§Locality: the uniform map's Locality at L = n, computed by the indicator itself (not the text's closed form)."""
    import numpy as np

    return _indicators().locality(np.full((n, n), 1.0 / n))


def _sym_code_of_symmetric_map(noise: float) -> float:
    """§Symmetry: Sym_code of a symmetric attenuated map (L = 128, w = 0.05) with uniform noise of this size."""
    import numpy as np

    ind = _indicators()
    A = ind.attenuated_map(128, 0.05, 1.0)
    return ind.symmetry_code(A + noise * np.random.default_rng(0).random(A.shape))


def _w_of_a_bert_like_map() -> float:
    """§Attenuated map: the w of its table whose symmetric (s = 1) map at L = 128 is nearest the BERT-like 0.17."""
    ind = _indicators()
    return min((0.005, 0.01, 0.02, 0.05, 0.1, 0.5), key=lambda w: abs(ind.locality(ind.attenuated_map(128, w)) - 0.17))


NOTE_FIGURES = [
    ("0.090", lambda: _uniform_map_locality(32)), ("0.023", lambda: _uniform_map_locality(128)), ("0.16", "quoted"),
    ("0.17", "quoted"), ("1.000", lambda: _sym_code_of_symmetric_map(0.0)),
    ("0.618", lambda: _sym_code_of_symmetric_map(1e-9)),
    ("0.54", "quoted"), ("0.8074", "quoted"), ("0.354", "quoted"), ("0.084", "quoted"), ("0.0214", "quoted"),
    ("0.0002", "quoted"), ("0.8074", "quoted"), ("0.17", "quoted"), ("0.01", _w_of_a_bert_like_map),
]


def note_figures() -> list:
    """The figures of docs/analysis.md's prose outside the section (tables, code and inline code left out)."""
    text = DOC.read_text(encoding="utf-8").replace(section(), "")
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = "\n".join(line for line in prose.split("\n") if not line.startswith("|"))
    return FIGURE.findall(re.sub(r"`[^`]*`", "", prose))


def test_each_figure_of_the_definitions_is_the_value_it_states():
    """The rest of docs/analysis.md: every figure, in order, is in NOTE_FIGURES, a paper's figure has its source
    and every other is what the indicators compute for the map its sentence names."""
    assert note_figures() == [f for f, _ in NOTE_FIGURES]
    unquoted = [f for f, how in NOTE_FIGURES if how == "quoted" and f not in QUOTED]
    assert not unquoted, f"quoted figures without a source in QUOTED: {unquoted}"
    wrong = [(f, as_written(f, how())) for f, how in NOTE_FIGURES if how != "quoted" and as_written(f, how()) != f]
    assert not wrong, f"figures that are not the value they state: {wrong}"


def test_the_section_shows_the_recorded_tables():
    """Its tables carry the marker of examples/multi30k/analysis/summary.md (tests/test_tables.py compares them)."""
    text = section()
    assert text.count("<!-- table: examples/multi30k/analysis/summary.md#") == 2


# the encodings with positions in the encoder's maps
WITH_POSITIONS = ["sape", "lape", "rpe", "t5", "at5", "posnet_embed", "rope", "alibi", "kerple"]
OTHERS = [pe for pe in WITH_POSITIONS if pe != "kerple"]  # the ten of the first analysis, less those without positions
RELATIVE = ["rpe", "t5", "rope", "alibi", "kerple"]


def test_locality_is_weak_and_fades_with_length(rows):
    loc = {(pe, n): float(probe(rows, pe, length=n)["locality"]) for pe in WITH_POSITIONS for n in (20, 64)}
    assert all(loc[pe, 20] > uniform_locality(20) for pe in WITH_POSITIONS)
    assert max(OTHERS, key=lambda pe: loc[pe, 20]) == "rope"
    assert min(WITH_POSITIONS, key=lambda pe: loc[pe, 20]) == "at5"
    # "within 0.02 of the uniform map at L = 64" / "only RoPE and ALiBi stay local"
    for pe in ("sape", "lape", "posnet_embed", "t5", "at5"):
        assert loc[pe, 64] - uniform_locality(64) < 0.02
    for pe in ("rope", "alibi"):
        assert loc[pe, 64] - uniform_locality(64) > 0.07
    # the uniform map's Locality at Chen et al.'s L = 128, which the section quotes; BERT's 0.162 is seven times
    # it, the translation encoders less than twice the uniform map's at L = 20
    assert uniform_locality(128) == pytest.approx(0.023, abs=5e-4) and round(0.162 / uniform_locality(128)) == 7
    assert max(loc[pe, 20] for pe in OTHERS) < 2 * uniform_locality(20)
    # "the exception is KERPLE": the most local at both lengths, more than six times the uniform map at L = 64
    for n in (20, 64):
        assert max(WITH_POSITIONS, key=lambda pe: loc[pe, n]) == "kerple"
    assert loc["kerple", 64] > 6 * uniform_locality(64) and loc["kerple", 20] > 2 * uniform_locality(20)


def test_translation_invariance(rows):
    aiv = {(pe, n): num(probe(rows, pe, length=n)["aiv"]) for pe in WITH_POSITIONS for n in (20, 64)}
    assert all(aiv[pe, 20] < 0.1 and aiv[pe, 64] <= 0.0335 for pe in RELATIVE)
    assert aiv["sape", 20] < 0.1 < 0.5 < aiv["sape", 64]  # invariant within the training lengths, not beyond
    assert all(aiv[pe, n] > 0.1 for pe in ("lape", "posnet_embed", "at5") for n in (20, 64))


def test_monotonicity_and_direction(rows):
    opr = {pe: float(probe(rows, pe)["opr"]) for pe in WITH_POSITIONS}
    assert all(v < 0.5 for v in opr.values()) and max(opr, key=opr.get) == "t5" and opr["alibi"] == 0.0
    assert 0 < opr["kerple"] < 0.005 and float(probe(rows, "kerple", layer="1")["opr"]) == 0.0  # "nearly so"
    db1 = {pe: float(probe(rows, pe, layer="1")["db20"]) for pe in WITH_POSITIONS}
    succeeding = ["sape", "lape", "rpe", "t5", "posnet_embed", "rope"]
    assert all(db1[pe] < 1 for pe in succeeding) and db1["at5"] > 1 and abs(db1["alibi"] - 1) < 0.01
    assert 1 < db1["kerple"] < 1.03 and float(probe(rows, "kerple", layer="1")["sym_abs"]) == pytest.approx(1.0)
    assert min(succeeding, key=db1.get) == "sape" and max(succeeding, key=db1.get) == "rope"
    for pe in ("rpe", "rope"):
        assert float(probe(rows, pe, layer="3")["db20"]) > 1.5 and float(probe(rows, pe)["db20"]) > 1


def test_symmetry(rows):
    sym_code = {pe: float(probe(rows, pe)["sym_code"]) for pe in WITH_POSITIONS}
    assert max(sym_code.values()) < 0.879  # Chen et al.'s BERT
    assert min(sym_code, key=sym_code.get) == "kerple" and max(sym_code, key=sym_code.get) == "rpe"
    assert sorted(sym_code, key=sym_code.get)[1] == "alibi"
    sym_abs = {pe: float(probe(rows, pe)["sym_abs"]) for pe in WITH_POSITIONS}
    learned = [pe for pe in WITH_POSITIONS if pe not in ("alibi", "kerple")]
    assert min(learned, key=sym_abs.get) == "at5" and max(learned, key=sym_abs.get) == "lape"
    assert min(sym_abs["alibi"], sym_abs["kerple"]) > max(sym_abs[pe] for pe in learned)
    sd = {pe: float(probe(rows, pe)["sd"]) for pe in WITH_POSITIONS}
    assert min(sd.values()) > 9 * 0.0002  # about ten times Wang et al.'s or more
    assert min(sd, key=sd.get) == "kerple" and max(sd, key=sd.get) == "at5"


def test_what_the_probe_cannot_see(rows):
    dec = {pe: float(probe(rows, pe, side="decoder")["locality"]) for pe in load_collect().METHODS}
    others = [dec[pe] for pe in OTHERS]
    assert min(others) - 0.01 < dec["nope"] < max(others) and min(others) - 0.01 < dec["posnet_attn"] < max(others)
    assert dec["kerple"] > max(others) + 0.1  # "unless its bias is as strong as KERPLE's"
    assert float(model(rows, "posnet_attn")["bleu"]) > float(model(rows, "nope")["bleu"])


def test_the_word_swap_probe(rows):
    models = {pe: model(rows, pe) for pe in WITH_POSITIONS + ["posnet_attn"]}
    changed = {(pe, k): float(m[f"changed_{k}"]) for pe, m in models.items() for k in ("local", "global")}
    for kind, low, high in (("local", "lape", "rope"), ("global", "lape", "rope")):
        ranked = sorted(models, key=lambda pe: changed[pe, kind])
        assert (ranked[0], ranked[-1]) == (low, high)
        assert f"{100 * changed[low, kind]:.1f}%" in section() and f"{100 * changed[high, kind]:.1f}%" in section()
    ratio = {pe: float(m["ratio_dnll"]) for pe, m in models.items()}
    assert min(ratio, key=ratio.get) == "rope" and max(ratio, key=ratio.get) == "posnet_attn"
    local = sorted(models, key=lambda pe: float(models[pe]["dnll_local"]), reverse=True)
    assert local[:3] == ["rope", "rpe", "t5"] and set(local[-2:]) == {"lape", "posnet_attn"}
    assert local.index("alibi") == len(local) - 3
    # ALiBi and KERPLE sit between; KERPLE's ratio between T5's and ALiBi's
    dnll = {pe: float(m["dnll_local"]) for pe, m in models.items()}
    assert dnll["alibi"] < dnll["kerple"] < dnll["t5"]
    assert ratio["t5"] < ratio["kerple"] < ratio["alibi"]
    dout = sorted(models, key=lambda pe: float(models[pe]["dout_chrf_local"]), reverse=True)
    assert dout[:3] == ["rope", "rpe", "t5"]


def test_bleu_by_source_length(rows):
    models = {pe: model(rows, pe) for pe in load_collect().METHODS}
    buckets = [k for k in models["sape"] if k.startswith("bleu_")]
    assert buckets == ["bleu_le9", "bleu_10_12", "bleu_13_15", "bleu_16_19", "bleu_ge20"]
    assert all(float(m["bleu_ge20"]) < float(m["bleu_le9"]) for m in models.values())
    fall = {pe: float(m["bleu_le9"]) - float(m["bleu_ge20"]) for pe, m in models.items()}
    assert max(fall, key=fall.get) == "nope"
    for b in buckets:
        assert max(models, key=lambda pe: float(models[pe][b])) == "rope", b
    # KERPLE: above ALiBi on the whole test set, above T5 and ALiBi on the longest sources
    bleu = {pe: float(m["bleu"]) for pe, m in models.items()}
    assert bleu["alibi"] < bleu["kerple"] and abs(bleu["kerple"] - bleu["t5"]) < 0.5
    assert float(models["kerple"]["bleu_ge20"]) > max(float(models[pe]["bleu_ge20"]) for pe in ("t5", "alibi"))


@pytest.mark.needs_multi30k  # collected only where the reference exists (conftest.py)
def test_bleu_rescored_from_the_recorded_translations(rows):
    """The CSV's whole-test sacreBLEU and the shortest bucket's (sources of at most 9 words as the recipe tokenises
    the test set: sacremoses with aggressive dash splits, after fairseq's sed of U+2019), from
    examples/multi30k/results/*annealed.seed1."""
    import sacrebleu
    from sacremoses import MosesTokenizer

    refs = pe_testing.multi30k_test("de")
    tok = MosesTokenizer(lang="en")
    src = [tok.tokenize(line.replace("\u2019", "'"), aggressive_dash_splits=True, escape=True, return_str=True)
           for line in pe_testing.multi30k_test("en")]
    assert len(refs) == len(src) == 1000
    short = [i for i, s in enumerate(src) if len(s.split()) <= 9]
    for pe in load_collect().METHODS:
        hyp = (REPO / "examples" / "multi30k" / "results" / f"{pe}.en-de.annealed.seed1" / "hyp.detok.de")
        hyps = hyp.read_text(encoding="utf-8").rstrip("\n").split("\n")
        m = model(rows, pe)
        assert sacrebleu.corpus_bleu(hyps, [refs]).score == pytest.approx(float(m["bleu"]), abs=1e-6)
        got = sacrebleu.corpus_bleu([hyps[i] for i in short], [[refs[i] for i in short]]).score
        assert got == pytest.approx(float(m["bleu_le9"]), abs=1e-6)


@pytest.mark.parametrize("model_rows", [0, 2])
def test_collect_refuses_a_kept_encoding_without_exactly_one_model_row(model_rows, rows, tmp_path):
    """An encoding kept from the recorded analysis needs its probe rows and exactly one model row there (its
    word-swap columns and recorded scores): none, or two (which would be chosen between blindly), stops the run
    naming it."""
    collect = load_collect()
    out = recorded_copy(tmp_path / "out")
    (tmp_path / "probes").mkdir()
    evaluate = evaluate_folder(rows, tmp_path / "evaluate")
    kerple = [r for r in rows if r["pe"] == "kerple" and r["kind"] == "model"]
    others = [r for r in rows if not (r["pe"] == "kerple" and r["kind"] == "model")]
    (out / "analysis.csv").write_text(collect.csv_text(others + kerple * model_rows), encoding="utf-8")
    with pytest.raises(SystemExit, match="no folder .*kerple and no rows of kerple"):
        collect.gather(tmp_path / "probes", evaluate, 20, out)
