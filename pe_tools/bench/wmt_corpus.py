"""pe-bench wmt-corpus: a binarised synthetic corpus shaped like WMT14 En-De after BPE, for speed and memory figures
(never for BLEU: its words carry no meaning). Sentence lengths as WMT14's prepared En-De training data has them
(mean about 27 BPE tokens, a tail cut at 250, pe-prepare's side ratio of 1.5), words from a Zipf law over a joined
dictionary of ``--vocab`` types (40,000: WMT14's joined BPE vocabulary, which sizes the output layer). The folder is
what ``fairseq-preprocess --joined-dictionary`` writes (mmap format, uint16 tokens) plus wmt_shaped.json, written
last: a folder with matching settings there is complete and is reused. Deterministic for a seed.

    pe-bench wmt-corpus --out data-bin/wmt_shaped                 # 100,000 pairs, 40,000 joined types, ~1 s
"""
import json
import struct
import sys
import time
from pathlib import Path

from ..command_line import fail, int_at_least
from ..file_io import dumps_json, write_atomic

NAME = "wmt-corpus"
HELP = "write a binarised synthetic corpus with WMT14 En-De's sentence lengths and a 40k joined vocabulary"

MEAN_TOKENS = 27.0  # BPE tokens a source sentence, end-of-sentence not counted
SIGMA = 0.62  # of the log-normal lengths: median about 22, 99th percentile about 95
MAX_TOKENS = 250  # the cleaning limit (pe-prepare, fairseq's prepare-wmt14en2de.sh)
RATIO_SIGMA = 0.15  # target/source length: log-normal around 1.05 (German's BPE is a little longer)
RATIO_MEAN = 1.05
MAX_RATIO = 1.5  # clean-corpus-n.perl -ratio 1.5
ZIPF = 1.0
SPECIALS = 4  # fairseq's <s>, <pad>, </s>, <unk>
EOS = 2
MAGIC = b"MMIDIDX\x00\x00"
UINT16 = 8  # fairseq's dtype code for numpy.uint16 (indexed_dataset._code_to_dtype)
SETTINGS = "wmt_shaped.json"


def lengths(n: int, rng, mean: float = MEAN_TOKENS, sigma: float = SIGMA):
    """(source, target) token counts of ``n`` pairs, end-of-sentence not counted: log-normal source lengths of mean
    ``mean`` in [1, MAX_TOKENS], targets at a log-normal ratio, both sides within MAX_RATIO of each other."""
    import numpy as np

    mu = np.log(mean) - sigma ** 2 / 2
    src = np.clip(np.ceil(rng.lognormal(mu, sigma, n) - 0.5), 1, MAX_TOKENS).astype(np.int64)
    ratio = np.clip(rng.lognormal(np.log(RATIO_MEAN), RATIO_SIGMA, n), 1 / MAX_RATIO, MAX_RATIO)
    tgt = np.clip(np.rint(src * ratio), 1, MAX_TOKENS).astype(np.int64)
    tgt = np.clip(tgt, np.ceil(src / MAX_RATIO), np.floor(src * MAX_RATIO)).astype(np.int64)
    return src, np.maximum(tgt, 1)


def zipf_weights(vocab: int):
    """The probability of each ordinary symbol (ids SPECIALS .. vocab-1), Zipf's law over its rank."""
    import numpy as np

    w = 1.0 / np.arange(1, vocab - SPECIALS + 1, dtype=np.float64) ** ZIPF
    return w / w.sum()


def write_split(prefix: Path, sizes, tokens) -> None:
    """PREFIX.bin and PREFIX.idx in fairseq's MMapIndexedDataset format (version 1, uint16)."""
    import numpy as np

    pointers = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1] * 2, out=pointers[1:])
    index = (MAGIC + struct.pack("<Q", 1) + struct.pack("<B", UINT16) + struct.pack("<Q", len(sizes))
             + sizes.astype(np.int32).tobytes() + pointers.tobytes())
    write_atomic(Path(f"{prefix}.bin"), tokens.astype(np.uint16).tobytes())
    write_atomic(Path(f"{prefix}.idx"), index)


def sentences(sizes, weights, rng):
    """The tokens of sentences of ``sizes`` tokens (end-of-sentence included), concatenated: Zipf-drawn words, each
    sentence ending with EOS."""
    import numpy as np

    total = int(sizes.sum())
    tokens = rng.choice(len(weights), size=total, p=weights).astype(np.int64) + SPECIALS
    tokens[np.cumsum(sizes) - 1] = EOS
    return tokens


def stats(sizes) -> dict:
    import numpy as np

    body = sizes - 1
    return {"sentences": int(len(sizes)), "tokens": int(sizes.sum()), "mean": round(float(body.mean()), 2),
            "median": float(np.median(body)), "p90": float(np.percentile(body, 90)),
            "p99": float(np.percentile(body, 99)), "max": int(body.max())}


def generate(out: Path, sentences_n: int = 100_000, valid_n: int = 1_000, vocab: int = 40_000, seed: int = 1,
             mean: float = MEAN_TOKENS, pair: str = "en-de") -> dict:
    """Write the corpus into ``out`` (see the module's doc); returns its settings (those of wmt_shaped.json). A
    folder that already holds the same settings is left as it is."""
    import numpy as np

    if vocab <= SPECIALS + 1 or vocab > 65_500:
        raise ValueError(f"--vocab {vocab}: between {SPECIALS + 2} and 65,500 (uint16 tokens)")
    src_lang, tgt_lang = pair.split("-")
    settings = {"generator": "pe-bench wmt-corpus", "sentences": sentences_n, "valid": valid_n, "vocab": vocab,
                "seed": seed, "mean": mean, "sigma": SIGMA, "max_tokens": MAX_TOKENS, "ratio_mean": RATIO_MEAN,
                "ratio_sigma": RATIO_SIGMA, "max_ratio": MAX_RATIO, "zipf": ZIPF, "pair": pair}
    out = Path(out)
    done = out / SETTINGS
    if done.is_file():
        try:
            recorded = json.loads(done.read_text(encoding="utf-8"))
            if recorded.get("settings") == settings:
                return recorded
        except ValueError:
            pass
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    weights = zipf_weights(vocab)
    expected = np.rint(weights * 1e9).astype(np.int64) + 1  # counts for the dictionary file, most frequent first
    dictionary = "".join(f"w{i} {c}\n" for i, c in enumerate(expected))
    for lang in (src_lang, tgt_lang):
        write_atomic(out / f"dict.{lang}.txt", dictionary)
    report = {}
    for split, n in (("train", sentences_n), ("valid", valid_n)):
        src, tgt = lengths(n, rng, mean)
        for lang, body in ((src_lang, src), (tgt_lang, tgt)):
            sizes = body + 1  # end-of-sentence
            write_split(out / f"{split}.{pair}.{lang}", sizes, sentences(sizes, weights, rng))
            report[f"{split}.{lang}"] = stats(sizes)
    record = {"settings": settings, "stats": report}
    write_atomic(done, dumps_json(record))
    return record


def add_args(parser):
    parser.add_argument("--out", required=True, help="the folder to write (fairseq-preprocess'd layout)")
    parser.add_argument("--sentences", type=int_at_least(1), default=100_000, help="training pairs (default: 100000)")
    parser.add_argument("--valid", type=int_at_least(1), default=1_000, help="validation pairs (default: 1000)")
    parser.add_argument("--vocab", type=int_at_least(6), default=40_000,
                        help="joined dictionary size, fairseq's 4 specials included (default: 40000)")
    parser.add_argument("--mean", type=float, default=MEAN_TOKENS,
                        help=f"mean source length in tokens (default: {MEAN_TOKENS})")
    parser.add_argument("--seed", type=int, default=1)


def run(args) -> int:
    t0 = time.perf_counter()
    try:
        record = generate(Path(args.out), args.sentences, args.valid, args.vocab, args.seed, args.mean)
    except ValueError as e:
        return fail(str(e))
    s = record["stats"]["train.en"]
    print(f"{args.out}: {s['sentences']:,} pairs, source tokens mean {s['mean']} median {s['median']:g} "
          f"p99 {s['p99']:g} max {s['max']}, {args.vocab:,} joined types ({time.perf_counter() - t0:.1f} s)",
          file=sys.stderr)
    return 0
