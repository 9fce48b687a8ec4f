"""Tests written for the survivors of the mutation check (scripts/mutation_check.py, docs/testing.md,
examples/mutation/summary.md): each checks a behaviour of pe_tools or pe_plugin that a recorded mutant changed while the
other tests passed, against an independent reference."""
import pytest
import torch

from pe_tools.recipes.batching import FOOTPRINTS
from pe_tools.scoring import report, style


def test_system_styles_are_distinct_for_forty_systems():
    """matplotlib's default cycle has 10 colours (C0..C9): system i takes colour i mod 10 and the marker of its
    group of ten, so 40 systems get 40 distinct (colour, marker) pairs, and systems 10 apart share a colour only."""
    styles = [style.system_style(i) for i in range(40)]
    assert [s["color"] for s in styles] == [f"C{i % 10}" for i in range(40)]
    assert len({(s["color"], s["marker"]) for s in styles}) == 40
    assert [s["marker"] for s in styles[::10]] == list(style.MARKERS)  # a new marker every ten systems


def test_training_columns_are_the_mean_wall_time_in_minutes():
    runs = [{"meta": {"training": {"train_seconds": 120.0, "params": 1_500_000, "device": "cpu", "threads": 2}}},
            {"meta": {"training": {"train_seconds": 240.0, "device": "cpu", "threads": 2}}},
            {"meta": None}]
    t = report.training({"runs": runs})
    assert t["train_minutes"] == pytest.approx((120 + 240) / 2 / 60)  # 3 minutes
    assert t["params"] == 1_500_000 and t["where"] == ["cpu, 2 thread(s)"]
    assert report.training({"runs": [{"meta": {}}]}) == {"params": None, "train_minutes": None, "where": []}


# ---- fairseq-generate's raw output (pe_tools.scoring.generate_output) ----------------------------------------
def _generate_block(i, tokens, detok=None):
    """One sentence of fairseq-generate's output: S-, T-, H- (tokens), D- (detokenised, if given), P- lines."""
    lines = [f"S-{i}\tsource {i}", f"T-{i}\treference {i}", f"H-{i}\t-0.25\t{tokens}"]
    if detok is not None:
        lines.append(f"D-{i}\t-0.25\t{detok}")
    return lines + [f"P-{i}\t-0.1 -0.2 -0.3"]


def test_generate_output_takes_the_detokenised_d_lines_over_the_h_lines():
    """fairseq-generate with --tokenizer moses writes H- (tokens) and D- (detokenised text): the D- text is the
    translation; a file of H- lines only (a grep) is read from its H- lines. Blocks come in batch order."""
    from pe_tools.scoring.generate_output import hypotheses

    both = _generate_block(1, "ein Haus .", "ein Haus.") + _generate_block(0, "Hallo , Welt !", "Hallo, Welt!")
    text = "\n".join(["2024-01-01 | INFO | fairseq_cli.generate | loading", *both, "Generate test with beam=5"]) + "\n"
    assert hypotheses("gen.out", text, 2, "ref.de") == ["Hallo, Welt!", "ein Haus."]
    h_only = "\n".join(_generate_block(1, "ein Haus .") + _generate_block(0, "Hallo , Welt !")) + "\n"
    assert hypotheses("gen.out", h_only, 2, "ref.de") == ["Hallo , Welt !", "ein Haus ."]


def test_generate_output_with_one_id_past_the_reference_is_refused():
    """ids 0..N-1 belong to an N-line reference: id N (one too many) means another test set, even when none of
    0..N-1 is missing."""
    from pe_tools.scoring.errors import InputError
    from pe_tools.scoring.generate_output import hypotheses

    text = "\n".join(sum((_generate_block(i, f"satz {i}", f"Satz {i}") for i in (2, 0, 1)), [])) + "\n"
    assert hypotheses("gen.out", text, 3, "ref.de") == ["Satz 0", "Satz 1", "Satz 2"]
    with pytest.raises(InputError, match=r"sentence ids up to 2, but reference ref\.de has 2 lines \(ids 0-1\)"):
        hypotheses("gen.out", text, 2, "ref.de")


def test_generate_output_missing_ids_are_listed_the_first_twenty_then_a_count():
    """The error names the missing ids: all of them when there are at most 20, else the first 20 and 'and K
    more'."""
    from pe_tools.scoring.errors import InputError
    from pe_tools.scoring.generate_output import hypotheses, id_list

    def missing_message(present, n_ref):
        text = "\n".join(sum((_generate_block(i, f"s {i}", f"S {i}") for i in present), [])) + "\n"
        with pytest.raises(InputError) as e:
            hypotheses("gen.out", text, n_ref, "ref.de")
        return str(e.value)

    msg = missing_message([0, 2], 5)
    assert "lacks 3 of the 5 sentence ids of reference ref.de: ids 1, 3, 4. " in msg
    assert "--required-batch-size-multiple" in msg  # no logged configuration: both flags are named
    twenty = ", ".join(str(i) for i in range(5, 25))  # exactly 20 missing: all shown, no count
    assert f"lacks 20 of the 25 sentence ids of reference ref.de: ids {twenty}. " in missing_message(range(5), 25)
    assert f"lacks 21 of the 26 sentence ids of reference ref.de: ids {twenty} and 1 more. " \
        in missing_message(range(5), 26)
    assert id_list([7]) == "7" and id_list([]) == ""
    assert id_list(list(range(4)), shown=3) == "0, 1, 2 and 1 more" and id_list([1, 2, 3], shown=3) == "1, 2, 3"


# ---- the metrics (pe_tools.scoring.metrics) -------------------------------------------------------------------
def test_compound_split_bleu_does_not_warn_about_tokenised_input(caplog):
    """Compound-split BLEU scores Moses tokens on purpose: its hypotheses end in ' .', and sacrebleu's BLEU warns
    ('you forgot to detokenize') from 100 such lines unless built with force=True. sacreBLEU proper keeps the
    warning, which is right for it."""
    import logging

    from sacrebleu.metrics import BLEU

    from pe_tools.scoring.metrics import METRICS, compound_split

    spec = {s.key: s for s in METRICS}["bleu_cs"]
    tokens = compound_split([f"Das Haus Nummer {i} ist groß." for i in range(100)], "de")
    assert all(t.endswith(" groß .") for t in tokens)  # Moses splits the full stop off
    with caplog.at_level(logging.WARNING, logger="sacrebleu"):
        BLEU(tokenize="none").corpus_score(tokens, [tokens])  # the reference: sacrebleu's default warns
        assert "tokenized period" in caplog.text
        caplog.clear()
        assert spec.build("de", [tokens]).corpus_score(tokens, None).score == pytest.approx(100.0)
        assert caplog.text == ""


def test_metric_specs_cannot_be_changed_in_place_and_are_hashable():
    """METRICS is one module-level tuple shared by every report a process builds (the whole set, the length
    buckets): its specs are frozen, so a caller cannot rename or rewire a metric for the others, and they can be
    set members and dict keys."""
    import dataclasses

    from pe_tools.scoring.metrics import METRICS

    for spec in METRICS:
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.key = "renamed"
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.tokenised = not spec.tokenised
    assert [s.key for s in METRICS] == ["bleu", "chrf", "bleu_cs"] and not METRICS[0].tokenised
    assert len({*METRICS, *METRICS}) == len(METRICS) == len({s: s.label for s in METRICS})


def test_two_reports_compare_their_means_without_a_rename():
    """pe_tools/scoring/agreement.rows with two reports and no rename (survivor: ``rename or {}`` -> ``rename``):
    the means of the first report against the second's, as rank_agreement of the two mean scorings."""
    from pe_tools.scoring.agreement import rank_agreement, rows

    def report(means):
        return {"systems": [{"name": name, "summary": {"bleu": {"mean": m}}, "runs": []} for name, m in means.items()]}

    a, b = {"x": 30.0, "y": 20.0, "z": 10.0, "w": 5.0}, {"x": 31.0, "y": 9.0, "z": 19.0, "w": 4.0}
    (row,) = rows([report(a), report(b)], ["A", "B"], "bleu")
    assert row == {"compared": "A vs B (means)", **rank_agreement(a, b)}


@pytest.mark.parametrize("size", sorted(FOOTPRINTS))
def test_a_memory_that_holds_exactly_the_smallest_micro_batch_is_planned(size):
    """pe_tools/recipes/batching.memory_cap at its limit (survivor: ``cap < MIN_MICRO_BATCH`` -> ``<=``): a memory
    whose headroom holds exactly MIN_MICRO_BATCH tokens gives that cap; one token's bytes less is refused. The
    memories are worked out here from the footprint (fixed + tokens x per token = HEADROOM x memory)."""
    from pe_tools.recipes.batching import HEADROOM, MIN_MICRO_BATCH, memory_cap

    fp = FOOTPRINTS[size]
    exactly = (fp.fixed + (MIN_MICRO_BATCH + 0.5) * fp.per_token) / HEADROOM  # half a token's bytes to spare
    assert memory_cap(size, exactly) == MIN_MICRO_BATCH
    with pytest.raises(ValueError, match=f"holds no micro-batch of {MIN_MICRO_BATCH} tokens"):
        memory_cap(size, exactly - fp.per_token / HEADROOM)


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


@pytest.mark.parametrize("other", ["pair", "seed", "size", "method"])
def test_curves_keep_only_the_asked_runs_by_each_key(tmp_path, other):
    """pe_tools/recipes/curves.curves filters by pair, seed, sizes and methods: a run that differs from the asked
    one in any single key is left out (survivor: the sizes filter dropped from the guard)."""
    from test_annealed import write_curve

    from pe_tools.recipes.curves import curves

    asked = {"method": "sape", "seed": 1, "size": "annealed", "pair": "en-de"}
    write_curve(tmp_path, points=[(250, 5.0)], **asked)
    write_curve(tmp_path, points=[(250, 9.0)], **dict(asked, **{other: {"pair": "en-fr", "seed": 2, "size": "small",
                                                                         "method": "rope"}[other]}))
    rows = curves(tmp_path, asked["pair"], asked["seed"], [asked["size"]], [asked["method"]])
    assert [(r["method"], r["size"], r["seed"], r["nll_loss"]) for r in rows] == [("sape", "annealed", 1, 5.0)]


@pytest.mark.parametrize("logged", ["multiple", "skip", "both", "neither"])
def test_dropping_flags_name_what_the_log_shows_and_both_only_when_it_shows_neither(logged):
    """pe_tools/scoring/generate_output.dropping_flags (survivor: ``multiple is None and skip is None`` ->
    ``skip is None``): a log whose configuration holds one of the two settings is judged on it alone; both flags
    are named only when it holds neither."""
    from pe_tools.scoring.generate_output import dropping_flags

    text = {"multiple": "'required_batch_size_multiple': 8,", "skip": "'skip_invalid_size_inputs_valid_test': True,",
            "neither": ""}
    text["both"] = text["multiple"] + " " + text["skip"]
    found = dropping_flags(text[logged])
    named = {flag for flag in ("--required-batch-size-multiple", "--skip-invalid-size-inputs-valid-test")
             if any(line.startswith(flag) for line in found)}
    want = {"multiple": {"--required-batch-size-multiple"}, "skip": {"--skip-invalid-size-inputs-valid-test"}}
    assert named == want.get(logged, {"--required-batch-size-multiple", "--skip-invalid-size-inputs-valid-test"})
    assert (logged == "neither") == any("(default 8)" in line for line in found)


@pytest.mark.parametrize("hyp_age", [-1, 0, 1])
def test_a_decode_counts_only_when_newer_than_the_last_checkpoint(tmp_path, hyp_age):
    """pe_tools/recipes/queue.decoded (survivor: ``hyp mtime > last mtime`` -> ``>=``): a decode written in the
    same instant as the last checkpoint is not known to be of it, so it is done again; older: again; newer: done."""
    import os

    from pe_tools.recipes.queue import decoded

    (tmp_path / "gen").mkdir()
    hyp, last = tmp_path / "gen" / "hyp.detok.de", tmp_path / "checkpoint_last.pt"
    hyp.write_text("x\n")
    last.write_bytes(b"")
    os.utime(last, ns=(10**18, 10**18))
    os.utime(hyp, ns=(10**18 + hyp_age * 10**9,) * 2)
    assert decoded(tmp_path, "de", None) is (hyp_age > 0)


@pytest.mark.parametrize("english_words,expected", [(10, "de"), (11, None)])
def test_a_language_is_identified_at_exactly_the_ratio_and_not_below(english_words, expected):
    """pe_tools/scoring/language.identify at its ratio (survivor: ``s[best] >= RATIO * rest`` -> ``>``): 30 German
    stop words against 10 English ones (40 words: shares 0.75 and 0.25, exactly 3 to 1) are German; against 11 the
    ratio falls under 3 and nothing is identified. The counts are this test's own."""
    from pe_tools.scoring.language import RATIO, STOP_WORDS, identify

    german, english = "der das und nicht eine einen".split(), "the with from this that".split()
    assert all(w in STOP_WORDS["de"] and w not in STOP_WORDS["en"] for w in german)
    assert all(w in STOP_WORDS["en"] and w not in STOP_WORDS["de"] for w in english)
    assert all(w not in stop for lang, stop in STOP_WORDS.items() if lang not in ("de", "en") for w in german + english)
    words = german * 5 + (english * 3)[:english_words]
    assert RATIO == 3.0 and (30 >= RATIO * english_words) == (expected == "de")
    assert identify([" ".join(words)]) == expected


@pytest.mark.parametrize("value,ok", [("10,20,30", True), ("0,1", True), ("10,10,20", False), ("20,10", False),
                                      ("-1,5", False), ("", False)])
def test_length_bucket_edges_must_strictly_increase(value, ok):
    """pe_tools/scoring/length_buckets.parse_edges (survivor: ``a >= b`` -> ``a > b``): a repeated edge is refused,
    as a decrease is (it would make an empty bucket 11-10)."""
    from pe_tools.scoring.errors import InputError
    from pe_tools.scoring.length_buckets import parse_edges

    if ok:
        assert parse_edges(value) == [int(x) for x in value.split(",")]
    else:
        with pytest.raises(InputError, match="expected increasing whole numbers"):
            parse_edges(value)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("memory", ["tbhd", "bhtd"])
def test_as_heads_puts_each_token_of_each_batch_row_in_its_head(memory, transpose):
    """pe_plugin/encoding_parts/head_layout.as_heads, on (T,B,H,d) memory (a view) and on (B,H,T,d) memory (the
    copy: survivor ``permute(1, 2, 0, 3)`` -> ``permute(1, 0, 2, 3)`` there), against a loop: row t*B + b of head
    h is x[b, h, t]."""
    from pe_plugin.encoding_parts.head_layout import as_heads

    b, h, t, d = 3, 2, 5, 4
    torch.manual_seed(0)
    x = torch.randn(t, b, h, d).permute(1, 2, 0, 3) if memory == "tbhd" else torch.randn(b, h, t, d)
    out = as_heads(x, b, h, transpose=transpose)
    want = torch.empty(h, t * b, d)
    for hh in range(h):
        for tt in range(t):
            for bb in range(b):
                want[hh, tt * b + bb] = x[bb, hh, tt]
    torch.testing.assert_close(out, want.mT if transpose else want, rtol=0, atol=0)


def test_the_exit_hook_leaves_a_process_without_a_process_group_alone():
    """pe_plugin/gloo_exit.destroy_gloo_group in a process that never joined a group (every test's, a CPU decode)
    does nothing and says so (survivor: ``is_available() and is_initialized()`` -> ``is_available()``, which asks
    an absent group for its backend and raises at exit)."""
    import torch.distributed as dist

    from pe_plugin.gloo_exit import destroy_gloo_group

    assert not (dist.is_available() and dist.is_initialized())  # the test's own process: no group
    assert destroy_gloo_group() is False


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


def test_the_translation_task_of_another_plugin_is_left_in_place(monkeypatch):
    """pe_plugin/resume_batches.register replaces fairseq's own `translation` task only (survivor: its guard
    removed, which would replace another plugin's task too)."""
    from fairseq import tasks

    from pe_plugin import resume_batches

    class OtherPlugins(tasks.TASK_REGISTRY[resume_batches.TASK]):
        pass

    monkeypatch.setitem(tasks.TASK_REGISTRY, resume_batches.TASK, OtherPlugins)
    resume_batches.register()
    assert tasks.TASK_REGISTRY[resume_batches.TASK] is OtherPlugins


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


@pytest.mark.parametrize("side,buckets,distance,ok", [
    ("encoder", 4, 8, True),  # one exact bucket per direction: the fewest that works
    ("encoder", 3, 8, False),  # none
    ("decoder", 2, 8, True),  # causal: one direction, one exact bucket
    ("encoder", 8, 3, True),  # two exact buckets, a maximum distance just above them
    ("encoder", 8, 2, False),  # ... and at them
])
def test_t5_takes_the_fewest_buckets_that_work(side, buckets, distance, ok):
    """T5's bias at the edges of its settings (survivor: pe_plugin/encodings/t5_bias.py:47 `exact < 1` ->
    `exact <= 1`, which refuses one exact bucket per direction): exact = buckets / directions / 2 must be at least
    1 and the maximum distance above it."""
    from pe_plugin.encodings import PE_REGISTRY, Dims

    cls = PE_REGISTRY["t5"]
    cfg = cls.config_cls(t5_num_buckets=buckets, t5_max_distance=distance)
    build = lambda: cls.build(cfg, Dims(8, 2, 1, 64, 1, side), {})  # noqa: E731
    if ok:
        assert build().table.shape == (buckets, 2)
    else:
        with pytest.raises(ValueError, match=f"--t5-num-buckets {buckets} / --t5-max-distance {distance}"):
            build()
