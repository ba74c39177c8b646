"""Reading and evaluating a large JSON Lines file: peak memory and wall time against plain ``json.loads``.

    python -m bench.large_jsonl [--rows 100000] [--splits 5] [--text-chars 0] [--keep FILE]

Writes a synthetic file shaped like saved API runs (about 200 MB at 100,000 answers: answers of 1-40 tokens, mostly
short, each step with its chosen log-probability and the top-10 log-probabilities and token strings; no entropy
column, so it is estimated from the top 10; with ``--text-chars N``, each row's prompt also holds a passage of N
characters and a ``document`` column another, as in saved retrieval or reasoning runs), then measures, each in a
fresh process:

- ``json.loads``: every line parsed into a list of dicts (the baseline: the least any reader that keeps the raw
  records needs);
- ``read_dataset``: :func:`trace_core.data.read_dataset` alone;
- ``evaluate``: the whole command ``python -m trace_core evaluate FILE --quiet --splits N``.

Printed: peak resident memory (the process's high-water mark, VmHWM; ``ru_maxrss`` where there is no /proc) and
wall time, absolute and as ratios to the baseline.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_MAX_TOKENS = 40
_TOP_K = 10
_VOCABULARY = 8_000  # distinct token strings: real files repeat a tokenizer's vocabulary

#: Runs ``-c CODE ARGS`` or ``-m MODULE ARGS`` as ``python`` would, then writes its peak RSS (MiB) to argv[1].
_RUNNER = """
import atexit, runpy, sys
def peak():
    try:
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) / 1024 for l in status if l.startswith("VmHWM:"))
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
out, mode, target, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
atexit.register(lambda: open(out, "w").write(str(peak())))
if mode == "-c":
    sys.argv = ["-c", *args]
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = [target, *args]
    runpy.run_module(target, run_name="__main__", alter_sys=True)
"""
#: What each fresh process runs (argv[1] is the file); ``evaluate`` is the real command line instead.
_SNIPPETS = {
    "json.loads": "import json, sys\nwith open(sys.argv[1], 'rb') as f:\n    rows = [json.loads(line) for line in f]",
    "read_dataset": "import sys\nfrom trace_core.data import read_dataset\nds = read_dataset(sys.argv[1])",
}


def _length(rng: random.Random) -> int:
    """Answer lengths 1-40 tokens, mostly short (geometric, mean about 6): many answers are a word or a number."""
    return min(_MAX_TOKENS, 1 + int(-math.log(1.0 - rng.random()) * 5.0))


def _passage(rng: random.Random, chars: int) -> str:
    """``chars`` characters of made-up prose (distinct per row, as real passages are)."""
    words, length = [], 0
    while length < chars:
        word = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9)))
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


def write_file(path: Path, rows: int, *, seed: int = 0, text_chars: int = 0) -> int:
    """Write ``rows`` synthetic answers to ``path`` as JSON Lines (with ``text_chars`` characters of passage in the
    prompt and in a ``document`` column); returns the size in bytes."""
    rng = random.Random(seed)
    vocabulary = [f" w{i}" if i % 3 else f"tok{i}" for i in range(_VOCABULARY)]
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for row in range(rows):
            n = _length(rng)
            chosen, top_logprobs, top_tokens = [], [], []
            for _ in range(n):
                # A peaked distribution over 10 alternatives, sorted; the chosen token is usually the first.
                logits = sorted((rng.gauss(0.0, 2.0) for _ in range(_TOP_K)), reverse=True)
                logits[0] += rng.expovariate(0.5)
                norm = math.log(sum(math.exp(v) for v in logits)) + rng.random() * 0.1  # mass beyond the top 10
                step = [v - norm for v in logits]
                top_logprobs.append(step)
                top_tokens.append(rng.sample(vocabulary, _TOP_K))
                chosen.append(step[0] if rng.random() < 0.85 else step[rng.randrange(1, _TOP_K)])
            tokens = [t[0] for t in top_tokens]
            record = {"prompt": f"Question {row}: which option is correct? A) one B) two C) three D) four",
                      "answer": "".join(tokens), "label": int(rng.random() < 0.6), "tokens": tokens,
                      "logprobs": chosen, "top_logprobs": top_logprobs, "top_tokens": top_tokens}
            if text_chars:
                record["prompt"] = _passage(rng, text_chars) + "\n" + record["prompt"]
                record["document"] = _passage(rng, text_chars)
            out.write(json.dumps(record) + "\n")
    return path.stat().st_size


def measure(argv: list[str]) -> tuple[float, float, int]:
    """Run ``python ARGV`` in a fresh process; (its peak RSS in MiB, wall seconds, exit status). Output is dropped.

    ``argv`` is ``["-c", CODE, ARGS...]`` or ``["-m", MODULE, ARGS...]``. The peak is the process's own high-water
    mark (VmHWM), read as it exits: ``ru_maxrss`` of a child also counts its parent's memory at the fork.
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peak"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _RUNNER, str(out), *argv], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=env, cwd=ROOT, check=False)
        seconds = time.perf_counter() - start
        if done.returncode:
            sys.stderr.write(done.stderr.decode("utf-8", "replace")[-2000:])
        peak = float(out.read_text()) if out.exists() else float("nan")
    return peak, seconds, done.returncode


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="answers in the file (default 100,000)")
    parser.add_argument("--splits", type=int, default=5, help="--splits of the evaluate run (default 5)")
    parser.add_argument("--text-chars", type=int, default=0,
                        help="characters of passage in each prompt and in a `document` column (default 0)")
    parser.add_argument("--keep", type=Path, default=None, help="write the file here and keep it")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "large.jsonl"
        start = time.perf_counter()
        size = write_file(path, args.rows, text_chars=args.text_chars)
        print(f"{args.rows:,} answers{f' with {args.text_chars:,}-character passages' if args.text_chars else ''}, "
              f"{size / 2**20:,.1f} MiB of JSON Lines (written in "
              f"{time.perf_counter() - start:.0f} s); each run in a fresh process", flush=True)
        runs = {name: ["-c", code, str(path)] for name, code in _SNIPPETS.items()}
        runs["evaluate"] = ["-m", "trace_core", "evaluate", str(path), "--quiet", "--splits", str(args.splits)]
        print(f"{'run':<14} {'peak MiB':>9} {'seconds':>8} {'x RSS':>7} {'x time':>7}  status", flush=True)
        base = None
        for name, command in runs.items():
            rss, seconds, status = measure(command)
            base = base or (rss, seconds)
            print(f"{name:<14} {rss:>9,.0f} {seconds:>8.1f} {rss / base[0]:>7.2f} {seconds / base[1]:>7.2f}  "
                  f"{'ok' if status == 0 else f'exit {status}'}", flush=True)


if __name__ == "__main__":
    main()
