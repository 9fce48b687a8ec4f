"""The report: one JSON-ready dict of every score, then its markdown table (the paper's Table 1 with marks and
signatures) and CSV rows (per system and per run)."""
import argparse
import json
from importlib.metadata import version
from typing import Any, Dict, List, Optional

from .inputs import Inputs
from .metrics import METRICS
from ..tables import markdown_table
from .significance import AR_CI_SAMPLES, DEFAULT_SAMPLES, TEST_NAMES, summarise


def build_report(inputs: Inputs, scored: Dict[str, Any], args: argparse.Namespace) -> Dict[str, Any]:
    n_samples = args.n_samples or DEFAULT_SAMPLES[args.paired]
    systems = []
    for s in [inputs.baseline] + inputs.systems:
        is_base = s is inputs.baseline
        runs = [
            {"run": r + 1, "file": f, "meta": m, "identity": i, "scores": scored["results"][(s.name, r)]}
            for r, (f, m, i) in enumerate(zip(s.files, s.run_meta, s.identities))
        ]
        summary = {spec.key: summarise([run["scores"][spec.key] for run in runs], is_base) for spec in METRICS}
        for spec in METRICS:
            summary[spec.key]["signature"] = scored["signatures"][spec.key]
        systems.append({"name": s.name, "baseline": is_base, "files": s.files, "meta": s.meta,
                        "pe_signature": pe_signature(s.meta), "runs": runs, "summary": summary,
                        **({"mismatch": s.mismatch} if s.mismatch else {}),
                        **({"unchecked": s.unchecked} if s.unchecked else {})})
    return {
        "reference": inputs.ref_file, "segments": len(inputs.ref), "target_language": args.trg_lang,
        "baseline": inputs.baseline.name,
        "test": {"type": args.paired, "name": TEST_NAMES[args.paired], "n_samples": n_samples,
                 "seed": args.seed, "ci": "95% bootstrap percentile interval, half-width around the "
                 f"bootstrap mean ({n_samples if args.paired == 'bs' else AR_CI_SAMPLES} resamples)",
                 "marks": "++/+: better than the baseline at p<0.05/p<0.10; --/-: worse; two-sided test"},
        "metrics": {spec.key: {"label": spec.label, "signature": scored["signatures"][spec.key]}
                    for spec in METRICS},
        "versions": {"sacrebleu": version("sacrebleu"), "sacremoses": version("sacremoses")},
        "systems": systems,
    }


def pe_signature(meta: Dict[str, Any]) -> str:
    if not meta:
        return ""
    sig = meta.get("pe_signature")
    return sig if isinstance(sig, str) else json.dumps(meta, sort_keys=True, separators=(",", ":"))


MISMATCH = "‡"  # after a system's name: its runs differ from the baseline's (pe-evaluate --allow-mismatch)
UNCHECKED = "(unchecked)"  # after a system's name: a run without an identity (pe-evaluate --allow-unchecked)


def shown_name(s: Dict[str, Any]) -> str:
    """A system's name in the table, with what it is compared as: baseline, mismatched, unchecked."""
    return " ".join([s["name"]] + (["(baseline)"] if s["baseline"] else []) + ([MISMATCH] if s.get("mismatch") else [])
                    + ([UNCHECKED] if s.get("unchecked") else []))


def described_run(identity: Dict[str, Any]) -> str:
    """A run's identity in words, method and seed aside: ``multi30k en-de small, 200 updates, flags changed:
    --max-update 200, decoded from 1 checkpoint``."""
    parts = [" ".join(str(identity[k]) for k in ("recipe", "pair", "size") if identity.get(k))]
    if identity.get("updates") is not None:
        parts.append(f"{identity['updates']} updates")
    if "changes" in identity:
        parts.append(f"flags changed: {identity['changes']}" if identity["changes"] else "the recipe's flags")
    if identity.get("decode"):
        parts.append(f"decoded from {identity['decode']}")
    return ", ".join(p for p in parts if p)


def runs_note(report: Dict[str, Any]) -> str:
    """What the compared runs are (their updates, changed flags and decode; ``described_run``), each kind once with
    the systems whose runs it describes when they are not all alike; "" when no run's identity is known."""
    kinds: Dict[str, List[str]] = {}
    for s in report["systems"]:
        for run in s["runs"]:
            if run.get("identity"):
                names = kinds.setdefault(described_run(run["identity"]), [])
                names += [] if s["name"] in names else [s["name"]]
    if len(kinds) == 1:
        return f"Runs: {next(iter(kinds))}."
    return "Runs: " + "; ".join(f"{kind} ({', '.join(names)})" for kind, names in kinds.items()) + "." if kinds else ""


def cell(summary: Dict[str, Any], width: int) -> str:
    f = lambda x: f"{x:.{width}f}"  # noqa: E731
    text = f(summary["mean"]) + summary.get("mark", "")
    if summary["n_runs"] == 1:
        extra = f"{f(summary['mu'])} ± {f(summary['ci95'])}"
        if "p_max" in summary:
            extra += f"; p = {summary['p_max']:.4f}"
    else:
        extra = f"sd {f(summary['sd'])}, {summary['n_runs']} runs"
        if "p_max" in summary:
            extra += f"; max p = {summary['p_max']:.4f}"
    return f"{text} ({extra})"


def training(system: Dict[str, Any]) -> Dict[str, Any]:
    """The training columns of a system, from its runs' meta files (``training``, written by pe-generate):
    parameters (of the first run that has them) and the mean training time over runs, in minutes."""
    runs = [(r["meta"] or {}).get("training") or {} for r in system["runs"]]
    params = next((t["params"] for t in runs if "params" in t), None)
    walls = [t["train_seconds"] for t in runs if "train_seconds" in t]
    where = sorted({f"{t['device']}, {t['threads']} thread(s)" for t in runs if "device" in t and "threads" in t})
    return {"params": params, "train_minutes": sum(walls) / len(walls) / 60 if walls else None, "where": where}


def render_markdown(report: Dict[str, Any], width: int) -> str:
    with_pe = any(s["pe_signature"] for s in report["systems"])
    trained = {s["name"]: training(s) for s in report["systems"]}
    with_training = any(t["params"] is not None or t["train_minutes"] is not None for t in trained.values())
    head = (["System"] + [report["metrics"][spec.key]["label"] for spec in METRICS]
            + (["Params", "Train min"] if with_training else []) + (["PE"] if with_pe else []))
    rows = []
    for s in report["systems"]:
        row = [shown_name(s)]
        row += [cell(s["summary"][spec.key], width) for spec in METRICS]
        if with_training:
            t = trained[s["name"]]
            row += ["" if t["params"] is None else f"{t['params'] / 1e6:.2f}M",
                    "" if t["train_minutes"] is None else f"{t['train_minutes']:.0f}"]
        pe = s["pe_signature"].replace("|", "\\|")  # a bare '|' would end the cell, even inside backticks
        row += [f"`{pe}`" if pe else ""] if with_pe else []
        rows.append(row)
    lines = markdown_table(head, rows, "l" * len(head), compact_rule=True).split("\n")
    t = report["test"]
    n_runs = {s["summary"][METRICS[0].key]["n_runs"] for s in report["systems"]}
    notes = [f"{report['segments']} segments of `{report['reference']}`; {t['name']} against {report['baseline']} "
             f"({t['n_samples']} samples, seed {t['seed']}): `++`/`+` better at p < 0.05 / p < 0.10, "
             "`--`/`-` worse."]
    if runs := runs_note(report):
        notes.append(runs)
    if 1 in n_runs:
        notes.append("One run: score (bootstrap mean ± 95% CI; p-value).")
    if n_runs - {1}:
        notes.append("Several runs: mean over runs (sample standard deviation; largest p-value of the per-run "
                     "tests, run i against baseline run i or the baseline's only run); the mark holds for every run.")
    if any(m.get("identical") for s in report["systems"] for run in s["runs"] for m in run["scores"].values()):
        notes.append("p = 1 where a run's output is identical to its baseline run's (sacrebleu, like MultEval, "
                     "counts only strictly larger resampled differences and would give 1/(N+1) there).")
    if with_training:
        where = sorted({w for t in trained.values() for w in t["where"]})
        notes.append("Params: the model's parameters; Train min: the time fairseq-train ran (validation and "
                     "checkpoints included, summed over resumed segments), mean over runs" + (f", on {'; '.join(where)}." if where else "."))
    for s in report["systems"]:
        if s.get("mismatch"):
            notes.append(f"{MISMATCH} {s['name']} is not a run like the baseline's, compared as asked "
                         f"(--allow-mismatch): " + "; ".join(s["mismatch"]) + ".")
        if s.get("unchecked"):
            notes.append(f"{s['name']} {UNCHECKED}: its identity is unchecked (--allow-unchecked): "
                         + "; ".join(s["unchecked"]) + ".")
    lines += [
        "",
        " ".join(notes),
        "",
        "Signatures:",
    ]
    lines += [f"- {m['label']}: `{m['signature']}`" for m in report["metrics"].values()]
    return "\n".join(lines) + "\n"


def table_rows(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = []
    for s in report["systems"]:
        t = training(s)
        row = {"system": s["name"], "baseline": s["baseline"], "runs": len(s["runs"]),
               "files": ",".join(s["files"]), "pe_signature": s["pe_signature"],
               "params": t["params"], "train_minutes": t["train_minutes"]}
        for spec in METRICS:
            row.update(summary_columns(spec.key, s["summary"][spec.key]))
        for mark in ("mismatch", "unchecked"):  # the column, only in a table that marks one
            if any(x.get(mark) for x in report["systems"]):
                row[mark] = "; ".join(s.get(mark, []))
        rows.append(row)
    return rows


def summary_columns(key: str, m: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """CSV columns of one metric's summary (``summarise`` plus its signature); None: the columns, empty."""
    m = m or {}
    return {key: m.get("mean"), f"{key}_sd": m.get("sd"), f"{key}_mu": m.get("mu"), f"{key}_ci95": m.get("ci95"),
            f"{key}_p": m.get("p_max"), f"{key}_delta": m.get("delta"), f"{key}_mark": m.get("mark", ""),
            f"{key}_signature": m.get("signature")}


def run_rows(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = []
    for s in report["systems"]:
        for run in s["runs"]:
            row = {"system": s["name"], "baseline": s["baseline"], "run": run["run"], "file": run["file"]}
            for spec in METRICS:
                m = run["scores"][spec.key]
                row.update({spec.key: m["score"], f"{spec.key}_mu": m["mu"], f"{spec.key}_ci95": m["ci95"],
                            f"{spec.key}_p": m["p"], f"{spec.key}_delta": m.get("delta"),
                            f"{spec.key}_mark": m.get("mark", ""),
                            f"{spec.key}_baseline_run": m.get("baseline_run")})
            row["meta"] = json.dumps(run["meta"], sort_keys=True) if run["meta"] else ""
            rows.append(row)
    return rows
