"""Reading a dataset with stored traces: :func:`trace_core.data.read_dataset` against plain parsing.

    python -m bench.read_traces [--rows 10000] [--repeat 3] [--format csv jsonl parquet] [--words real] [--keep DIR]
    python -m bench.read_traces --file SHARD.parquet [--repeat 3]

Writes a synthetic dataset with :func:`trace_core.write_dataset` (answers of 2-60 tokens, k = 5 alternatives with
their token texts, entropy, ranks and metadata: the shape of a recorded run, as the Calibrate page loads it), or
takes the dataset file ``--file`` (e.g. a shard of ``bench.scale_out``), then times, in this one process:

- the baseline: ``pandas.read_csv`` of the CSV plus ``json.loads`` of every trace cell (for JSON Lines,
  ``json.loads`` of every line; for Parquet, ``pyarrow.parquet.read_table`` and ``to_pandas``): the least any reader
  that decodes the cells needs;
- ``read_dataset``: the whole reader, every cell checked and every Trace built.

``--words real`` makes one token text in 50 one that JSON escapes (a newline, a quote, a backslash, a tab), as a
real tokenizer's vocabulary has: then nearly every CSV chunk holds an escaped cell, as the files of real models do.

Printed: the best of ``--repeat`` runs of each, in seconds, and read_dataset's time as a ratio to the baseline.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from bench._timing import best_of

_VOCABULARY = 5_000  # distinct token strings: real files repeat a tokenizer's vocabulary
_K = 5
_FORMATS = ("csv", "jsonl", "parquet")


_ESCAPED = ("\n", ' "', "\\", ".\n\n", "\t")  # token texts that JSON writes with an escape


def _traces(n: int, seed: int = 0, real_words: bool = False) -> list:
    from trace_core.traces.trace import Trace, TraceMetadata

    rng = np.random.default_rng(seed)
    words = [f"tok{i}" if i % 3 else f" w{i}" for i in range(_VOCABULARY)]
    if real_words:
        words = [_ESCAPED[(i // 50) % len(_ESCAPED)] + w if i % 50 == 0 else w for i, w in enumerate(words)]
    meta = TraceMetadata(model_id="bench-model", source="generate", decoding={"do_sample": False},
                         tokenizer="bench-model", extra={"vocab_size": 32_000})
    out = []
    for _ in range(n):
        t = int(rng.integers(2, 61))
        ids = rng.integers(0, _VOCABULARY, size=t)
        top_ids = rng.integers(0, _VOCABULARY, size=(t, _K))
        top_ids[:, 0] = ids
        logits = np.sort(rng.normal(0.0, 2.0, size=(t, _K)), axis=1)[:, ::-1]
        top_logprobs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True)) - rng.uniform(0.0, 1.0, (t, 1))
        top_logprobs = np.minimum(top_logprobs, 0.0)
        surprisal = -top_logprobs[:, 0]
        entropy = rng.uniform(0.0, 4.0, size=t)
        out.append(Trace(prompt="", answer="", token_ids=ids, tokens=tuple(words[i] for i in ids),
                         surprisal=surprisal, entropy=entropy, top_ids=top_ids, top_logprobs=top_logprobs,
                         ranks=np.ones(t, dtype=np.int64), metadata=meta,
                         top_tokens=tuple(tuple(words[i] for i in row) for row in top_ids)))
    return out


def write_files(n: int, folder: Path, formats: list[str], real_words: bool = False) -> dict[str, Path]:
    """The synthetic dataset of ``n`` rows, written once per format into ``folder``."""
    from trace_core import write_dataset

    traces = _traces(n, real_words=real_words)
    frame = pd.DataFrame({"prompt": [f"Question {i}?" for i in range(n)],
                          "answer": ["".join(t.tokens) for t in traces],
                          "label": [i % 2 for i in range(n)]})
    paths = {}
    for fmt in formats:
        paths[fmt] = folder / f"traces_{n}.{fmt}"
        write_dataset(frame, paths[fmt], traces=traces)
    return paths


def _baseline(path: Path, fmt: str) -> None:
    from trace_core.data import TRACE_COLUMNS

    if fmt == "jsonl":
        with open(path, "rb") as f:
            [json.loads(line) for line in f]
        return
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.read_table(path).to_pandas()
        return
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in frame.columns:
        if column in TRACE_COLUMNS:
            [json.loads(cell) for cell in frame[column] if cell]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.read_traces", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--format", nargs="+", default=["csv", "jsonl", "parquet"], choices=list(_FORMATS))
    parser.add_argument("--keep", type=Path, default=None, help="write the files into this folder and keep them")
    parser.add_argument("--words", choices=["plain", "real"], default="plain",
                        help="real: one token text in 50 has a character that JSON escapes")
    parser.add_argument("--file", type=Path, default=None, help="time this dataset file instead (format from its "
                                                                "extension)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        if args.file is not None:
            from trace_core.data.read import format_from_name

            fmt = format_from_name(args.file.name, None, "file")
            print(f"{args.file.name}; best of {args.repeat}")
            _table({fmt: args.file}, args.repeat)
            return
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        paths = write_files(args.rows, folder, args.format, real_words=args.words == "real")
        print(f"{args.rows:,} rows, answers of 2-60 tokens, k = {_K} alternatives with top_tokens, {args.words} "
              f"token texts; best of {args.repeat}")
        _table(paths, args.repeat)


def _table(paths: dict[str, Path], repeat: int) -> None:
    """Time each file: the baseline, then read_dataset, in this process; one line per file."""
    from trace_core.data import read_dataset

    print(f"{'format':<7} {'MB':>6} {'baseline s':>11} {'read_dataset s':>15} {'ratio':>7}")
    for fmt, path in paths.items():
        base = best_of(functools.partial(_baseline, path, fmt), repeat)
        ours = best_of(functools.partial(read_dataset, path), repeat)
        size = path.stat().st_size / 1e6
        print(f"{fmt:<7} {size:>6.1f} {base:>11.3f} {ours:>15.3f} {ours / base:>6.2f}x", flush=True)


if __name__ == "__main__":
    main()
