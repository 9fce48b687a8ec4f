"""Shared test helpers: a tiny generated corpus, fairseq CLI runners, model building through fairseq's own
parser, and the incremental-vs-full re-scoring check.

Everything is generated here; no test reads shared data or the network.
"""
import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
from argparse import Namespace
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
from pe_tools.synthetic.toy import write_corpus  # noqa: E402,F401  (re-exported for the tests)

PLUGIN = str(REPO / "pe_plugin")
# The Multi30k test set (test_2016_flickr), not in the repository: tests marked needs_multi30k run only where it is
# found, the first of: PE_MULTI30K_REF=FILE (the German reference; its English source beside it as raw.test.en), the
# recipe's prepared data (data-bin/multi30k_en_de/work/raw.test.*), the raw corpus in a checkout beside the
# repository (docs/dev/testing.md names the folder and files).
MULTI30K_PREPARED = REPO / "data-bin" / "multi30k_en_de" / "work"
MULTI30K_RAW = REPO.parent / "shared" / "data" / "multi30k"


def multi30k_test_file(lang: str):
    """The file holding the Multi30k test set's untokenised ``lang`` side (plain or gzipped), or None."""
    given = os.environ.get("PE_MULTI30K_REF")
    candidates = ([Path(given).with_name(f"raw.test.{lang}")] if lang != "de" else [Path(given)]) if given else []
    candidates += [MULTI30K_PREPARED / f"raw.test.{lang}", MULTI30K_RAW / f"test_2016_flickr.{lang}.gz"]
    return next((p for p in candidates if p.is_file()), None)


def multi30k_missing() -> str:
    """Why the needs_multi30k tests cannot run here ('' when the test set's German and English sides are found)."""
    if multi30k_test_file("de") and multi30k_test_file("en"):
        return ""
    where = [f"PE_MULTI30K_REF={os.environ['PE_MULTI30K_REF']}"] if os.environ.get("PE_MULTI30K_REF") else []
    where += [str(MULTI30K_PREPARED / "raw.test.{de,en}"), str(MULTI30K_RAW / "test_2016_flickr.{de,en}.gz")]
    return "no Multi30k test set (looked for " + ", ".join(where) + ")"


def multi30k_test(lang: str) -> list:
    """The lines of the Multi30k test set's untokenised ``lang`` side (1,000 of them)."""
    import gzip

    path = multi30k_test_file(lang)
    if path is None:
        raise FileNotFoundError(multi30k_missing())
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return data.decode("utf-8").rstrip("\n").split("\n")

# flags every tiny training run shares (dropout off unless a test turns it on)
TRAIN_FLAGS = [
    "--cpu", "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3",
    "--max-tokens", "400", "--no-progress-bar", "--log-interval", "1", "--seed", "1",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--dropout", "0.0", "--num-workers", "0", "--log-format", "simple",
]


# torch's switch that turns weights_only loading off for every checkpoint; the tests never pass it on, so each
# checkpoint they load goes through the plugin's allow-list (pe_plugin/safe_load.py)
UNSAFE_LOAD = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
SAFE_ENV = {k: v for k, v in os.environ.items() if k != UNSAFE_LOAD}  # this environment, safe loading kept


def run(module: str, args, cwd=None, check=True, env=None) -> subprocess.CompletedProcess:
    """Run a fairseq CLI (e.g. ``fairseq_cli.train``) in a fresh interpreter, checkpoints loaded with
    weights_only=True; output captured."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != UNSAFE_LOAD}
    env.setdefault("PYTHONWARNINGS", "ignore")
    proc = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)], cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} {' '.join(map(str, args))} failed:\n{proc.stdout[-4000:]}")
    return proc


def call_main(main, args, prog: str = "python", cwd=None) -> subprocess.CompletedProcess:
    """A command line's ``main(argv)`` called in this interpreter, as its console script calls it (sys.argv[0]
    ``prog``, the program name argparse prints; the exit status as ``pe_tools.process.exit_status`` gives it),
    stdout and stderr captured, as ``subprocess.run`` returns them. For argument errors and --help, where a new
    interpreter would spend seconds importing torch and fairseq to print one line, and for runs that need no
    process of their own (a resumed run whose state is on disk); test_install runs each console script itself."""
    import io

    from pe_tools.process import exit_status

    out, err, argv, here = io.StringIO(), io.StringIO(), sys.argv, os.getcwd()
    args = [str(a) for a in args]
    sys.argv = [prog, *args]
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = exit_status(main, args)
    finally:
        sys.argv = argv
        os.chdir(here)
    return subprocess.CompletedProcess([prog, *args], code, out.getvalue(), err.getvalue())


# a checkpoint every two updates, the last five kept, none per epoch (the runs that resume and average)
EVERY_TWO_UPDATES = ["--save-interval-updates", 2, "--keep-interval-updates", 5, "--no-epoch-checkpoints"]


def train_args(data_bin, save_dir, *extra, user_dir=PLUGIN) -> list:
    """fairseq-train's arguments for a tiny run with the plugin: TRAIN_FLAGS, then ``extra`` (later flags win)."""
    return [data_bin, "--user-dir", user_dir, *TRAIN_FLAGS, "--save-dir", save_dir, *extra]


def fairseq_train(data_bin, save_dir, *extra, own_process=False, fails=False) -> subprocess.CompletedProcess:
    """fairseq-train with ``train_args``: its cli_main called in this interpreter (``call_main``: no new
    interpreter spending seconds on imports; argparse's and the plugin's errors on stderr), for runs that stop
    before they train; or with ``own_process`` in a new one (``run``: its logs in stdout, torch's safe checkpoint
    loading on), for runs that train: fairseq keeps state across runs in one process (the best validation loss,
    ``checkpoint_utils.save_checkpoint.best``, so a later run saves no checkpoint_best.pt). A run that fails
    raises with its output; with ``fails``, a run that does not fail raises."""
    args = train_args(data_bin, save_dir, *extra)
    if own_process:
        proc = run("fairseq_cli.train", args, check=False)
    else:
        from fairseq_cli import train

        script = Path(sys.executable).parent / "fairseq-train"  # the console script's name in argparse's messages
        proc = call_main(lambda argv: train.cli_main(), args, prog=script.name if script.exists() else "train.py")
    if (proc.returncode != 0) != fails:
        raise AssertionError(f"fairseq-train {' '.join(map(str, args))} exited with {proc.returncode}:\n"
                             f"{(proc.stdout + (proc.stderr or ''))[-4000:]}")
    return proc


# ---- one encoding, or one attention layer with it, built alone at toy size --------------------------------------
def make_pe(name: str, side: str = "encoder", dim: int = 16, heads: int = 2, layers: int = 2, max_positions: int = 64,
            init=None, **overrides):
    """Encoding ``name`` of PE_REGISTRY built alone for one stack side, in eval mode: its config the dataclass's
    defaults with ``overrides`` (the flags' field names), Dims(dim, heads, layers, max_positions, padding 1, side);
    then ``init(pe)``, if given, sets its parameters (large random ones, so that a misplaced term shows)."""
    from pe_plugin.encoding_parts.base import Dims
    from pe_plugin.encodings import PE_REGISTRY

    cls = PE_REGISTRY[name]
    cfg = None if cls.config_cls is None else cls.config_cls(**overrides)
    pe = cls.build(cfg, Dims(dim, heads, layers, max_positions, 1, side), {})
    if init is not None:
        init(pe)
    return pe.eval()


def make_attention(pe, layer: int = 1):
    """A self-attention layer of ``pe``'s dimensions that applies it as layer ``layer``, its projections drawn
    with seed 1, in eval mode."""
    from pe_plugin.modules.pe_attention import PEAttention

    torch.manual_seed(1)
    return PEAttention(pe.dims.embed_dim, pe.dims.num_heads, pe, layer).eval()


TINY_POSNET_LMAX = 8  # tiny_posnet's L_max: shorter than some of write_corpus's test sentences


def train_tiny_posnet(folder: Path, data_bin: Path) -> Path:
    """PosNet-Embed at tiny size with L_max TINY_POSNET_LMAX (--max-source/target-positions), two updates of
    fairseq-train into ``folder`` (checkpoint_last.pt, checkpoint_best.pt); conftest.py's session fixture
    ``tiny_posnet`` builds it once for every test that needs a trained checkpoint and nothing more."""
    fairseq_train(data_bin, folder, "--arch", "transformer_posnet_embed_tiny", "--max-source-positions",
                  TINY_POSNET_LMAX, "--max-target-positions", TINY_POSNET_LMAX, "--skip-invalid-size-inputs-valid-test",
                  "--max-update", 2, "--no-epoch-checkpoints", own_process=True)
    return folder / "checkpoint_last.pt"


DURATIONS_LOG = REPO / "tests" / "durations.log"  # the suite's recorded durations (pytest --durations=0)


def recorded_phases(log: str) -> dict:
    """{(phase, node id): seconds} of the phase lines of ``pytest --durations=0`` (``12.34s call     NODE``), the
    one reader of tests/durations.log."""
    return {(m.group(2), m.group(3)): float(m.group(1))
            for m in re.finditer(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S.*?)\s*$", log, flags=re.M)}


def recorded_file_seconds(log: str) -> dict:
    """{test file: seconds} summed over the log's phase lines."""
    out = {}
    for (_, node), seconds in recorded_phases(log).items():
        file = node.split("::")[0]
        out[file] = out.get(file, 0.0) + seconds
    return out


def longest_files_first(nodeids, seconds: dict) -> list:
    """The order in which to hand test files to the xdist workers: by their recorded ``seconds``, longest first
    (the longest-processing-time rule, so that no long file starts last while the other worker stands idle), the
    tests of a file together and in their order; a file the log does not know yet goes first. Returns the
    indices of ``nodeids`` in that order."""
    def key(i):
        file = nodeids[i].split("::")[0]
        return -seconds.get(file, float("inf"))
    return sorted(range(len(nodeids)), key=key)  # stable: a file's tests keep their order


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A folder that ``build(folder)`` fills once per test session and every pytest-xdist worker shares: under the
    session's temporary root (the workers' common parent), behind a file lock, so that a worker that needs it while
    another builds it waits instead of building it again. A failed build leaves no mark and fails again for the
    next test that asks."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp is ROOT/popen-gwN; ROOT is this session's
        root = root.parent
    folder, done = root / f"built-{name}", root / f"built-{name}.done"
    with open(root / f"built-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def code_copy(root: Path) -> Path:
    """The working tree's pe_tools and pe_plugin as a copy of the code a queue runs (pe-queue --code), so that a
    queue under test runs the code under test."""
    code = root / "code"
    if not (code / "COMMIT").is_file():
        for pkg in ("pe_tools", "pe_plugin"):
            shutil.copytree(REPO / pkg, code / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        (code / "COMMIT").write_text("test-working-tree\n")
    return code


def preprocess(raw_dir: Path, dest: Path, joined: bool = True) -> Path:
    args = ["--source-lang", "en", "--target-lang", "de", "--trainpref", raw_dir / "train",
            "--validpref", raw_dir / "valid", "--testpref", raw_dir / "test", "--destdir", dest, "--workers", "1"]
    run("fairseq_cli.preprocess", args + (["--joined-dictionary"] if joined else []))
    return dest


def parse_train_args(data_bin, arch: str, extra=()):
    from fairseq import options

    parser = options.get_training_parser()
    argv = [str(data_bin), "--user-dir", PLUGIN, "--arch", arch, *TRAIN_FLAGS, *map(str, extra)]
    return options.parse_args_and_arch(parser, argv)


def build_model(data_bin, arch: str, extra=(), seed: int = 1, device=None):
    """(task, model, args) built exactly as fairseq-train builds them, in eval mode; ``device="meta"``: tensors
    without storage or values, for shapes and parameter counts (a base-size model in a fraction of the time)."""
    from fairseq import tasks

    args = parse_train_args(data_bin, arch, extra)
    torch.manual_seed(seed)
    task = tasks.setup_task(args)
    with torch.device(device) if device is not None else contextlib.nullcontext():
        model = task.build_model(args)
    model.eval()
    return task, model, args


def batch(task, split: str = "test", n: int = 8, left_pad_source: bool = True):
    """A padded batch of the first ``n`` sentences of ``split`` (left-padded source like fairseq)."""
    from fairseq.data import data_utils

    task.load_dataset(split)
    ds = task.dataset(split)
    ds.left_pad_source = left_pad_source
    return ds.collater([ds[i] for i in range(min(n, len(ds)))])


def rescore_max_diff(task, model, sample, beam: int = 4) -> float:
    """Beam-search ``sample`` step by step, re-score every hypothesis with one teacher-forced full forward
    pass, and return the largest difference of per-token log-probabilities."""
    gen = task.build_generator([model], Namespace(beam=beam, max_len_b=20, max_len_a=0, min_len=1))
    with torch.no_grad():
        hyps = gen.generate([model], sample)
        src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        eos, pad = task.target_dictionary.eos(), task.target_dictionary.pad()
        worst = 0.0
        for i, nbest in enumerate(hyps):
            for h in nbest:
                tgt = h["tokens"].unsqueeze(0)  # (1, T), ends with EOS
                prev = torch.cat([tgt.new_full((1, 1), eos), tgt[:, :-1]], dim=1)
                src = src_tokens[i: i + 1]
                src = src[:, src.ne(pad)[0]]  # this sentence alone, no padding
                logits, _ = model(src, src_lengths[i: i + 1], prev)
                lprobs = model.get_normalized_probs((logits, None), log_probs=True)
                full = lprobs.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)[0]
                worst = max(worst, (full - h["positional_scores"]).abs().max().item())
    return worst


def assert_micro_batches_add_up(model, criterion, sample_of, n: int = 12) -> dict:
    """What --update-freq 2 computes (fairseq sums the summed losses' gradients of the micro-batches, then divides
    by the total sample size) equals one batch of twice the size: the gradients of sentences 0..n/2-1 and
    n/2..n-1 against those of 0..n-1. ``sample_of(ids)`` is the batch of those sentences. Returns the full
    batch's gradients by parameter name."""
    def grads(ids):
        model.zero_grad()
        loss, sample_size, _ = criterion(model, sample_of(ids))
        loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}, sample_size

    (g1, n1), (g2, n2), (g, total) = grads(range(0, n // 2)), grads(range(n // 2, n)), grads(range(n))
    assert n1 + n2 == total
    for name in g:
        torch.testing.assert_close((g1[name] + g2[name]) / total, g[name] / total, rtol=1e-9, atol=1e-12, msg=name)
    return g


def logit_bias(pe, q, pos, layer: int = 0):
    """The term an encoding adds to the attention logits, as PEAttention sums it: its position bias (T5, ALiBi,
    AT5) plus its q-dependent score bias (Shaw's key term); None when it adds nothing."""
    score = pe.score_bias(q, pe.prepare(pos, q.dtype), layer) if pe.uses("score_bias") else None
    terms = [pe.position_bias(pos), score]
    terms = [t for t in terms if t is not None]
    return None if not terms else terms[0] if len(terms) == 1 else terms[0] + terms[1]


class OpLog(TorchDispatchMode):
    """Counts the ATen ops dispatched while it is active: ``ops[name]``."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


# 3+3 layers, 4 heads, dimension 64, at base size (the sizes' own defaults: RPE per-head tables, PosNet d_p 128)
SMALL = ["--encoder-layers", "3", "--decoder-layers", "3", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
         "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
         "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]


def _loss_and_grads(model, sample, weights):
    model.train()
    model.zero_grad()
    torch.manual_seed(1)  # the same dropout draws (AT5's MLP) on both paths
    net = sample["net_input"]
    logits, _ = model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
    real = net["prev_output_tokens"].ne(1).unsqueeze(-1)  # compare real target tokens only
    loss = (logits * weights * real).sum()
    loss.backward()
    return logits.detach() * real, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_step(task, fast, ref, sample):
    """The two models' outputs and every parameter's gradient of one weighted loss on ``sample``, in float64."""
    torch.manual_seed(0)
    weights = torch.randn(*sample["net_input"]["prev_output_tokens"].shape, len(task.target_dictionary),
                          dtype=torch.float64)
    out_fast, grads_fast = _loss_and_grads(fast, sample, weights)
    out_ref, grads_ref = _loss_and_grads(ref, sample, weights)
    torch.testing.assert_close(out_fast, out_ref, rtol=1e-10, atol=1e-10)
    assert grads_fast.keys() == grads_ref.keys() and len(grads_fast) > 0
    for name in grads_ref:
        torch.testing.assert_close(grads_fast[name], grads_ref[name], rtol=1e-9, atol=1e-10, msg=name)


def save_checkpoint(model, args, path):
    """A checkpoint laid out like fairseq's Trainer.state_dict (no training needed)."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True)
    torch.save({"args": None, "cfg": cfg, "model": model.state_dict(), "criterion": None,
                "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion",
                                       "optimizer_name": "FairseqAdam", "lr_scheduler_state": {}, "num_updates": 0}],
                "task_state": {}, "extra_state": {}}, path)
    return path


def n_test(data_bin) -> int:
    """Sentences in the binarised test split (fairseq-preprocess logs the count)."""
    return int(re.search(r"test\.en: (\d+) sents", (data_bin / "preprocess.log").read_text())[1])


def n_hypotheses(gen_out: str) -> int:
    return sum(1 for line in gen_out.splitlines() if line.startswith("H-"))


def flag_values(argv, once: bool = False) -> dict:
    """{--flag: [the words after it, up to the next flag]} of a command line (a switch: []); the words before the
    first flag (the program, positional arguments) are left out. A repeated flag keeps its last values, as argparse
    does; ``once``: a repeated flag fails the test instead."""
    out, flag = {}, None
    for word in map(str, argv):
        if word.startswith("--"):
            assert not (once and word in out), f"{word} twice"
            out[word], flag = [], word
        elif flag:
            out[flag].append(word)
    return out


def lines(path) -> list:
    """The lines of a UTF-8 text file that ends each line with a newline, without their newlines."""
    return path.read_text(encoding="utf-8").split("\n")[:-1]
