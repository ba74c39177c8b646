"""Input shards: a folder, a glob pattern or one file -> the sorted list of the dataset files to work through, each
with a stable output name of its own.

A sharded run writes one output file per input shard, all in one output folder, so every shard needs a name that
stays the same from run to run (resuming finds its earlier output by it) and that no other shard shares. The name is
the shard's path relative to the spec's root with ``/`` written as ``__`` and the extension replaced by
``.parquet``: ``a/b.jsonl`` -> ``a__b.parquet``. Two shards that would share a name are an error, found before any
work.
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .._checks import clip

__all__ = ["PROMPT_FORMATS", "SHARD_FORMATS", "Shard", "is_pattern", "list_shards", "output_name"]

#: Extension -> format of the files a sharded run reads (``read_dataset`` reads each one).
SHARD_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
                 ".csv": "csv", ".tsv": "csv"}
#: The files ``generate`` reads prompts from: the dataset files, and text files of one prompt per line.
PROMPT_FORMATS = {**SHARD_FORMATS, ".txt": "txt"}
_OUTPUT_SUFFIX = ".parquet"
_SEPARATOR = "__"
_GLOB_CHARACTERS = frozenset("*?[")


@dataclass(frozen=True)
class Shard:
    """One input file of a sharded run.

    Attributes
    ----------
    path : Path
        The file, as found (relative paths stay relative to the working folder).
    name : str
        Its path relative to the spec's root, with ``/`` separators (``"a/b.parquet"``): what messages and the
        manifest call it.
    format : {"csv", "jsonl", "parquet"}
        From its extension.
    output : str
        The output file's name in the output folder (:func:`output_name`).
    """

    path: Path
    name: str
    format: str
    output: str


def is_pattern(spec: str) -> bool:
    """Whether ``spec`` is a glob pattern (holds ``*``, ``?`` or ``[``) rather than a path."""
    return any(c in _GLOB_CHARACTERS for c in spec)


def output_name(name: str) -> str:
    """The output file name of a shard named ``name`` (relative, ``/`` separators): ``"a/b.jsonl"`` ->
    ``"a__b.parquet"``.

    >>> output_name("2026/05/part-0.jsonl")
    '2026__05__part-0.parquet'
    """
    stem = name[: -len(Path(name).suffix)] if Path(name).suffix else name
    return stem.replace("/", _SEPARATOR) + _OUTPUT_SUFFIX


def _visible(relative: Path) -> bool:
    """Whether no part of a path starts with ``.`` or ``_`` (hidden files, ``_SUCCESS`` markers, a ``_manifest``
    folder: never shards, as in Spark's and pyarrow's datasets)."""
    return not any(part.startswith((".", "_")) for part in relative.parts)


def _folder_files(folder: Path) -> list[Path]:
    """The visible files under ``folder``, at any depth."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if _visible(Path(d))]
        found.extend(Path(dirpath) / f for f in filenames if _visible(Path(f)))
    return found


def _pattern_root(spec: str) -> Path:
    """The folder a glob pattern starts from: its leading parts without a glob character."""
    parts = Path(spec).parts
    fixed = []
    for part in parts[:-1]:
        if is_pattern(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _candidates(spec: str, formats: Mapping[str, str]) -> tuple[Path, list[Path], str]:
    """(root, the files the spec names, what the spec is in words); ValueError when the path does not exist."""
    if is_pattern(spec):
        matched = [Path(p) for p in glob.glob(spec, recursive=True)]
        return _pattern_root(spec), [p for p in matched if os.path.isfile(p)], "the pattern"
    path = Path(spec)
    if os.path.isdir(spec):  # os.path's checks say False for a name too long or with a NUL byte, never raise
        return path, _folder_files(path), "the folder"
    if os.path.isfile(spec):
        if path.suffix.lower() not in formats:
            raise ValueError(f"{clip(spec)}: not a dataset file (expected {_expected(formats)})")
        return path.parent, [path], "the file"
    raise ValueError(f"{clip(spec)}: no such file or folder (give a folder, a glob pattern or a dataset file)")


def _expected(formats: Mapping[str, str]) -> str:
    return ", ".join(formats)


def _shard(path: Path, root: Path, formats: Mapping[str, str]) -> Shard:
    name = Path(os.path.relpath(path, root)).as_posix()
    return Shard(path=path, name=name, format=formats[path.suffix.lower()], output=output_name(name))


def _check_one_format(shards: list[Shard], spec: str) -> None:
    """A spec whose shards are of more than one format is refused: a folder of Parquet shards with a stray CSV
    (notes, an export) would otherwise be read as data."""
    formats = Counter(s.format for s in shards)
    if len(formats) > 1:
        counts = ", ".join(f"{n:,} {f}" for f, n in sorted(formats.items()))
        raise ValueError(f"{clip(spec)}: holds shards of more than one format ({counts}); give a glob pattern that "
                         "picks one, e.g. DIR/**/*.parquet")


def _check_unique_outputs(shards: list[Shard], spec: str) -> None:
    """Two shards that would write one output file are refused (compared ignoring case: some file systems do)."""
    seen: dict[str, str] = {}
    for shard in shards:
        key = shard.output.lower()
        if key in seen:
            raise ValueError(f"{clip(spec)}: the shards {clip(seen[key], 80)} and {clip(shard.name, 80)} would both "
                             f"be written to {clip(shard.output, 80)}; rename one of them")
        seen[key] = shard.name


def _outside(files: list[Path], exclude: str | os.PathLike[str] | None) -> list[Path]:
    """The files not inside the folder ``exclude`` (an output folder that lies inside the input folder)."""
    if exclude is None:
        return files
    folder = Path(exclude).resolve()
    return [p for p in files if folder not in p.resolve().parents]


def list_shards(spec: str | os.PathLike[str], *, exclude: str | os.PathLike[str] | None = None,
                formats: Mapping[str, str] = SHARD_FORMATS) -> list[Shard]:
    """The dataset files a sharded run reads, sorted by name.

    Parameters
    ----------
    spec : str or path
        A folder (every visible dataset file in it, at any depth; names starting with ``.`` or ``_`` are skipped),
        a glob pattern (``data/*.parquet``, ``data/**/*.jsonl``; ``**`` matches any depth), or one dataset file.
        Dataset files: ``.parquet``/``.pq``, ``.jsonl``/``.ndjson``/``.json`` (JSON Lines), ``.csv``/``.tsv``;
        other files are ignored. Names are relative to the folder, the pattern's leading folder, or the file's
        folder.
    exclude : str or path, optional
        A folder whose files are never shards (the run's output folder, when it lies inside the input).
    formats : mapping of extension to format
        The files taken: :data:`SHARD_FORMATS` (default), or :data:`PROMPT_FORMATS` for prompts.

    Returns
    -------
    list of Shard
        Sorted by :attr:`Shard.name`; at least one.

    Raises
    ------
    ValueError
        Naming the spec (cut to about 200 characters): nothing matches, no dataset file, shards of more than one
        format, or two shards that map to one output name.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "b").mkdir(); _ = (root / "b" / "x.jsonl").write_text("{}"); _ = (root / "a.jsonl").write_text("{}")
    >>> [(s.name, s.output) for s in list_shards(root)]
    [('a.jsonl', 'a.parquet'), ('b/x.jsonl', 'b__x.parquet')]
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"`spec` must be a path or a glob pattern, got {type(spec).__name__}")
    spec = os.fspath(spec)
    if not spec.strip():
        raise ValueError("`spec` is empty: give a folder, a glob pattern or a dataset file")
    root, files, what = _candidates(spec, formats)
    files = _outside(files, exclude)
    shards = sorted((_shard(p, root, formats) for p in files if p.suffix.lower() in formats), key=lambda s: s.name)
    if not shards:
        found = "matches nothing" if not files else f"holds no dataset file ({len(files):,} other files)"
        raise ValueError(f"{clip(spec)}: {what} {found}; expected {_expected(formats)} files")
    _check_one_format(shards, spec)
    _check_unique_outputs(shards, spec)
    return shards
