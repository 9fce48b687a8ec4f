"""A deterministic toy parallel corpus whose translation needs word order: the target is the source
reversed and upper-cased (``w3 w1 w7`` -> ``W7 W1 W3``). Used by the tests (``tests/pe_testing.py``) and the
README's quick start.

    python scripts/toy_corpus.py OUT_DIR [--train 240 --valid 24 --test 13 --seed 0]
writes OUT_DIR/{train,valid,test}.{en,de}.
"""
import argparse
import random
import sys
from pathlib import Path


def write_corpus(out_dir, n_train=240, n_valid=24, n_test=13, seed=0, vocab=30, max_len=9):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        src, tgt = [], []
        for _ in range(n):
            sent = [rng.choice(words) for _ in range(rng.randint(2, max_len))]
            src.append(" ".join(sent))
            tgt.append(" ".join(w.upper() for w in reversed(sent)))
        (out_dir / f"{split}.en").write_text("\n".join(src) + "\n")
        (out_dir / f"{split}.de").write_text("\n".join(tgt) + "\n")
    return out_dir


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=240)
    p.add_argument("--valid", type=int, default=24)
    p.add_argument("--test", type=int, default=13)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    write_corpus(a.out_dir, a.train, a.valid, a.test, a.seed)
    print(f"wrote {a.out_dir}/{{train,valid,test}}.{{en,de}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
