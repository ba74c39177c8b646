"""Input shards: a folder, a glob pattern or one file -> the sorted list of the dataset files to work through, each
with a stable output name of its own.

A sharded run writes one output file per input shard, all in one output folder, so every shard needs a name that
stays the same from run to run (resuming finds its earlier output by it) and that no other shard shares. The name is
the shard's path relative to the spec's root with ``/`` written as ``__`` and the extension replaced by
``.parquet``: ``a/b.jsonl`` -> ``a__b.parquet``. Two shards that would share a name are an error, found before any
work, and so is an output name too long for the file system (:func:`check_output_names`).

What is read is what the folder holds, once: folders that are symbolic links are never entered (a linked folder
would be read twice, a link loop without end), a file that is a symbolic link out of the folder is refused (a link to
``~/.env`` is not data), and an output folder of a sharded run read as input is read as its ``manifest.json`` lists
it (the manifest, the lock file and outputs it does not list are left out, each said in one line).
"""

from __future__ import annotations

import fnmatch
import os
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trace_core.checks import clip
from trace_core.scale.lock import LOCK_FILE
from trace_core.scale.manifest import (
    ENTRY_FOLDER,
    MANIFEST_FILE,
    MAX_OUTPUT_BYTES,
    is_manifest_file,
    listed_outputs,
    output_name,
)

__all__ = ["PROMPT_FORMATS", "SHARD_FORMATS", "Shard", "SkippedFileWarning", "check_output_names", "is_pattern",
           "list_shards"]

#: Extension -> format of the files a sharded run reads (``read_dataset`` reads each one).
SHARD_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
                 ".csv": "csv", ".tsv": "csv"}
#: The files ``generate`` reads prompts from: the dataset files, and text files of one prompt per line.
PROMPT_FORMATS = {**SHARD_FORMATS, ".txt": "txt"}
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


def _visible(relative: Path) -> bool:
    """Whether no part of a path starts with ``.`` or ``_`` (hidden files, ``_SUCCESS`` markers, a ``_manifest``
    folder: never shards, as in Spark's and pyarrow's datasets)."""
    return not any(part.startswith((".", "_")) for part in relative.parts)


def _walk(root: Path, enter: Callable[[tuple[str, ...]], bool],
          take: Callable[[tuple[str, ...]], bool]) -> list[Path]:
    """The regular files under ``root`` whose parts relative to it ``take`` accepts, entering only the folders whose
    parts ``enter`` accepts. A folder that is a symbolic link is never entered (no file read twice, and a link loop
    ends); a file that is one is listed (:func:`_links_checked` judges it)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False
        base = Path(os.path.relpath(dirpath, root)).parts
        dirnames[:] = sorted(d for d in dirnames if enter((*base, d)))
        found.extend(Path(dirpath) / f for f in sorted(filenames)
                     if take((*base, f)) and os.path.isfile(os.path.join(dirpath, f)))
    return found


def _folder_files(folder: Path) -> list[Path]:
    """The visible files under ``folder``, at any depth."""
    return _walk(folder, lambda parts: _visible(Path(parts[-1])), lambda parts: _visible(Path(parts[-1])))


def _pattern_split(spec: str) -> tuple[Path, tuple[str, ...]]:
    """A glob pattern as the folder it starts from (its leading parts without a glob character) and the rest."""
    parts = Path(spec).parts
    fixed: list[str] = []
    for part in parts[:-1]:
        if is_pattern(part):
            break
        fixed.append(part)
    return (Path(*fixed) if fixed else Path(".")), parts[len(fixed):]


def _part_matches(name: str, part: str) -> bool:
    """Whether a file or folder name matches one part of a pattern, as :func:`glob.glob` matches it (a wildcard
    never matches a name starting with ``.`` unless the part starts with one)."""
    if not is_pattern(part):
        return name == part
    if name.startswith(".") and not part.startswith("."):
        return False
    return fnmatch.fnmatch(name, part)


class _Pattern:
    """The parts of a glob pattern below its root, matched part by part against paths (``**`` alone in a part:
    any number of folders, as ``glob.glob(recursive=True)`` takes it), so that folders no path of the pattern can
    pass through are not entered."""

    def __init__(self, parts: tuple[str, ...]) -> None:
        self.parts = parts

    def _closure(self, states: set[int]) -> set[int]:
        out = set(states)
        for i in states:
            while i < len(self.parts) and self.parts[i] == "**":
                i += 1
                out.add(i)
        return out

    def _states(self, names: tuple[str, ...]) -> set[int]:
        states = self._closure({0})
        for name in names:
            step: set[int] = set()
            for i in states:
                if i >= len(self.parts):
                    continue
                if self.parts[i] == "**":
                    if not name.startswith("."):
                        step.add(i)
                elif _part_matches(name, self.parts[i]):
                    step.add(i + 1)
            states = self._closure(step)
            if not states:
                break
        return states

    def enters(self, names: tuple[str, ...]) -> bool:
        """Whether a path of the pattern can pass through the folder ``names``."""
        return any(i < len(self.parts) for i in self._states(names))

    def takes(self, names: tuple[str, ...]) -> bool:
        """Whether the file ``names`` matches the whole pattern."""
        return len(self.parts) in self._states(names)


def _pattern_files(spec: str) -> tuple[Path, list[Path]]:
    """(root, the regular files a glob pattern matches): ``glob.glob(spec, recursive=True)``'s files, without
    following a folder that is a symbolic link (``glob`` follows them: a linked folder read twice, a link loop
    matched at every depth it allows) and without the entry folders of output folders."""
    root, rest = _pattern_split(spec)
    pattern = _Pattern(rest)
    if not os.path.isdir(root):
        return root, []
    return root, _walk(root, lambda parts: parts[-1] != ENTRY_FOLDER and pattern.enters(parts), pattern.takes)


def _candidates(spec: str, formats: Mapping[str, str]) -> tuple[Path, list[Path], str]:
    """(root, the files the spec names, what the spec is in words); ValueError when the path does not exist."""
    if is_pattern(spec):
        root, matched = _pattern_files(spec)
        return root, matched, "the pattern"
    path = Path(spec)
    if os.path.isdir(spec):  # os.path's checks say False for a name too long or with a NUL byte, never raise
        return path, _folder_files(path), "the folder"
    if os.path.isfile(spec):
        if path.suffix.lower() not in formats:
            raise ValueError(f"{clip(spec)}: not a dataset file (expected {_expected(formats)})")
        return path.parent, [path], "the file"
    raise ValueError(f"{clip(spec)}: no such file or folder (give a folder, a glob pattern or a dataset file)")


def _bookkeeping(path: Path) -> bool:
    """Whether a file is what a sharded run keeps in its output folder (``manifest.json``, the lock file): read as
    a folder of shards, an output folder gives its outputs only."""
    return path.name == LOCK_FILE or is_manifest_file(path)


def _links_checked(files: list[Path], root: Path, formats: Mapping[str, str],
                   say: Callable[[str], None]) -> list[Path]:
    """``files`` without the symbolic links among them that lead out of ``root`` or to a file the folder would not
    read as data itself (hidden, bookkeeping, of another kind: a link to ``.env`` is never read), or to another of
    ``files`` (read once, under its own name); each one left out said in a line."""
    if not any(os.path.islink(p) for p in files):
        return files
    real_root = os.path.realpath(root)
    targets = {os.path.realpath(p) for p in files if not os.path.islink(p)}
    kept = []
    for path in files:
        if not os.path.islink(path):
            kept.append(path)
            continue
        name = clip(Path(os.path.relpath(path, root)).as_posix(), 120)
        target = os.path.realpath(path)
        inside = target != real_root and Path(target).is_relative_to(real_root)
        if not inside or not _visible(Path(os.path.relpath(target, real_root))) or (
                Path(target).suffix.lower() not in formats or _bookkeeping(Path(target))):
            where = "outside" if not inside else "that is not a dataset file of"
            say(f"{name}: a symbolic link to a file {where} {clip(str(root), 120)}; not read (copy the file into "
                "the folder to read it)")
        elif target in targets:
            say(f"{name}: a symbolic link to another shard of {clip(str(root), 120)}; read once, under its own name")
        else:
            targets.add(target)
            kept.append(path)
    return kept


def _listed_only(files: list[Path], say: Callable[[str], None]) -> list[Path]:
    """``files`` without those that lie in an output folder whose ``manifest.json`` does not list them (the output
    of an input shard that is gone, or of a shard that failed this time): an output folder is read as its manifest
    says; each folder with such files said in a line."""
    listed: dict[Path, set[str] | None] = {}
    unlisted: dict[Path, list[str]] = {}
    kept = []
    for path in files:
        folder = path.parent
        if folder not in listed:
            listed[folder] = listed_outputs(folder)
        names = listed[folder]
        if names is None or path.name in names:
            kept.append(path)
        else:
            unlisted.setdefault(folder, []).append(path.name)
    for folder, left in unlisted.items():
        shown = ", ".join(clip(n, 80) for n in left[:3]) + (", ..." if len(left) > 3 else "")
        say(f"{clip(str(folder), 120)}: {len(left):,} file{'' if len(left) == 1 else 's'} not in its "
            f"{MANIFEST_FILE} (the output of an input shard no longer in that run, or of one that failed) not read: "
            f"{shown}")
    return kept


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


def _outside(files: list[Path], exclude: str | os.PathLike[str] | None, root: Path) -> list[Path]:
    """The files not inside the folder ``exclude`` when it lies inside the input folder ``root`` (an output folder
    there); an output folder above the input holds every input file, and takes none."""
    if exclude is None:
        return files
    folder = Path(exclude).resolve()
    if folder in root.resolve().parents:
        return files
    return [p for p in files if folder not in p.resolve().parents]


def check_output_names(shards: Sequence[Shard]) -> None:
    """ValueError naming the first shard whose output is not a plain file name (a path would write out of the output
    folder) or is too long for the file system to write (with the temporary file it is written through,
    :data:`~trace_core.scale.manifest.MAX_OUTPUT_BYTES` bytes at most): a run that writes outputs checks this before
    any work, rather than failing on that shard after its work."""
    for shard in shards:
        if Path(shard.output).name != shard.output or shard.output in ("", ".", ".."):
            raise ValueError(f"the shard {clip(shard.name, 120)}: its output {clip(shard.output, 120)!r} is not a file "
                             "name in the output folder")
        size = len(shard.output.encode("utf-8", "surrogateescape"))
        if size > MAX_OUTPUT_BYTES:
            raise ValueError(f"the shard {clip(shard.name, 120)}: its output name is {size:,} bytes long, more than "
                             f"the {MAX_OUTPUT_BYTES:,} a file name can take here (with its temporary file's "
                             "additions); rename the shard (or its folders) shorter")


def _say(message: str) -> None:
    warnings.warn(message, SkippedFileWarning, stacklevel=3)


class SkippedFileWarning(UserWarning):
    """A file of a folder or pattern of shards that is not read (a link out of the folder, an output its folder's
    manifest does not list), when :func:`list_shards` is given no ``on_skip``."""


def list_shards(spec: str | os.PathLike[str], *, exclude: str | os.PathLike[str] | None = None,
                formats: Mapping[str, str] = SHARD_FORMATS,
                on_skip: Callable[[str], None] | None = None) -> list[Shard]:
    """The dataset files a sharded run reads, sorted by name.

    Parameters
    ----------
    spec : str or path
        A folder (every visible dataset file in it, at any depth; names starting with ``.`` or ``_`` are skipped),
        a glob pattern (``data/*.parquet``, ``data/**/*.jsonl``; ``**`` matches any depth), or one dataset file.
        Dataset files: ``.parquet``/``.pq``, ``.jsonl``/``.ndjson``/``.json`` (JSON Lines), ``.csv``/``.tsv``;
        other files are ignored. Names are relative to the folder, the pattern's leading folder, or the file's
        folder. Folders that are symbolic links are not entered; a file that is a symbolic link is read only when it
        leads to a file inside the folder (the pattern's leading folder) that is not read already. An output folder
        of a sharded run is read as its ``manifest.json`` lists it: the manifest itself, the run's lock file and
        the output files it does not list are left out.
    exclude : str or path, optional
        A folder whose files are never shards (the run's output folder, when it lies inside the input).
    formats : mapping of extension to format
        The files taken: :data:`SHARD_FORMATS` (default), or :data:`PROMPT_FORMATS` for prompts.
    on_skip : callable(str), optional
        Told, in one line each, about the files left out for a reason the user may not expect (a symbolic link out
        of the folder, an output its manifest does not list); default: a :class:`SkippedFileWarning`.

    Returns
    -------
    list of Shard
        Sorted by :attr:`Shard.name`; at least one.

    Raises
    ------
    ValueError
        Naming the spec (cut to about 200 characters): nothing matches, no dataset file, shards of more than one
        format, two shards that map to one output name, a damaged ``manifest.json``, or an ``exclude`` folder that
        is the input folder.

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
    say = on_skip or _say
    root, files, what = _candidates(spec, formats)
    if exclude is not None and what != "the file" and Path(exclude).resolve() == root.resolve():
        raise ValueError(f"{clip(spec)}: the output folder {clip(os.fspath(exclude), 120)} is the input folder, so "
                         "the outputs would be read back as input; give another output folder (one inside the input "
                         "folder is fine)")
    files = [p for p in _outside(files, exclude, root) if not _bookkeeping(p)]
    data = [p for p in files if p.suffix.lower() in formats]
    if what != "the file":  # a file named alone is read as named
        data = _listed_only(_links_checked(data, root, formats, say), say)
    shards = sorted((_shard(p, root, formats) for p in data), key=lambda s: s.name)
    if not shards:
        left = sum(p.suffix.lower() in formats for p in files)
        found = ("matches nothing" if not files else f"holds no dataset file to read ({left:,} left out, said above)"
                 if left else f"holds no dataset file ({len(files):,} other files)")
        raise ValueError(f"{clip(spec)}: {what} {found}; expected {_expected(formats)} files")
    _check_one_format(shards, spec)
    _check_unique_outputs(shards, spec)
    return shards
