"""Opening a file and reading its text: a path, bytes or upload as a :class:`Source` that can be read again from its
start, and the checks that refuse what is not readable text before any row is parsed (binary signatures, UTF-8, the
size bound ``max_bytes``), with progress reported as the bytes are read.

Text is read as a stream (:class:`Lines`): lines are split from the bytes on ``\\n`` only and decoded one at a time, so
a reader never holds the whole text, a list of its lines and its parsed rows at once.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from trace_core.checks import shorten
from trace_core.data.errors import DatasetError

__all__ = ["PathOrBuffer", "Progress", "Lines", "Reporter", "Source", "cell_too_long", "check_binary", "open_source",
           "too_big"]

PathOrBuffer = str | Path | IO[bytes] | IO[str]
#: ``progress(done, total)``: the bytes of the file read so far, and its size in bytes.
Progress = Callable[[int, int | None], None]

_PROGRESS_STEP = 1 << 20      # report progress about once per MiB read


@dataclass(frozen=True)
class Source:
    """A file that can be opened (again) as a binary stream from its start."""

    name: str
    size: int | None
    open: Callable[[], contextlib.AbstractContextManager[IO[bytes]]]
    max_bytes: int | None = None  # uncompressed bytes the file may hold (see read_table)
    max_cell: int | None = None   # characters one text cell may hold


def _mib(n: int) -> str:
    """A size limit in words: whole MiB as such, else bytes."""
    return f"{n // 2**20:,} MiB" if n % 2**20 == 0 else f"{n:,} bytes"


def too_big(src: Source, size: int | None = None) -> DatasetError:
    """The one message for a file over ``max_bytes``: its name, how much it holds (when known), the limit and the
    setting that raises it."""
    limit = src.max_bytes or 0
    name = shorten(src.name) if src.name else "the file"
    what = (f"{size:,} bytes ({size / 2**20:,.1f} MiB) of data uncompressed, by its metadata" if size is not None
            else f"more than {_mib(limit)} of data")
    return DatasetError(f"{name} holds {what}; the limit is {_mib(limit)} (TRACE_MAX_DATA_MB, or "
                        f"read_dataset(max_bytes=...))")


def cell_too_long(chars: int, limit: int) -> str:
    """The row error's message for a text cell over ``max_cell_chars``."""
    return (f"is {chars:,} characters long; a cell may hold at most {limit:,} (TRACE_MAX_CELL_MB, or "
            f"read_dataset(max_cell_chars=...))")


def open_source(source: object, max_bytes: int | None = None) -> Source:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no dataset file at {str(path)!r}")
        return Source(path.name, path.stat().st_size, lambda: open(path, "rb"))
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
        return Source("", len(data), lambda: io.BytesIO(data))
    if not hasattr(source, "read"):
        raise TypeError(f"`source` must be a path or a binary file-like object, got {type(source).__name__}")
    name = str(getattr(source, "name", "") or "")
    if isinstance(source, io.IOBase) and _seekable(source):  # read in place, rewound for every pass (Streamlit's
        # UploadedFile, a BytesIO, may have been read already)
        buffer: Any = source
        size = buffer.seek(0, os.SEEK_END)
        buffer.seek(0)
        if isinstance(buffer.read(0), (bytes, bytearray)):

            def rewound() -> contextlib.AbstractContextManager[IO[bytes]]:
                buffer.seek(0)
                return contextlib.nullcontext(buffer)  # the caller's buffer stays open

            return Source(name, size, rewound)
    data = _read_all(source, name, max_bytes)  # a text buffer or a pipe: read once, kept as bytes
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")  # a lone surrogate then fails as "not valid UTF-8"
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"`source.read()` must return bytes, got {type(data).__name__}")
    data = bytes(data)
    return Source(name, len(data), lambda: io.BytesIO(data))


def _read_all(source: Any, name: str, max_bytes: int | None) -> Any:
    """Everything ``source.read`` gives, a MiB at a time and never more than ``max_bytes`` (+ one MiB)."""
    parts: list[Any] = []  # all str or all bytes, as read() gives them (a mix fails in join, a TypeError)
    size = 0
    while True:
        part = source.read(_PROGRESS_STEP)
        if not isinstance(part, (str, bytes, bytearray)):
            raise TypeError(f"`source.read()` must return bytes, got {type(part).__name__}")
        if not part:
            break
        parts.append(part)
        size += len(part)
        if max_bytes is not None and size > max_bytes:
            raise too_big(Source(name, None, contextlib.nullcontext, max_bytes))  # type: ignore[arg-type]
    return "".join(parts) if parts and isinstance(parts[0], str) else b"".join(parts)


def _seekable(source: Any) -> bool:
    try:
        if not hasattr(source, "seek") or (hasattr(source, "seekable") and not source.seekable()):
            return False
        source.seek(0)
        return True
    except (OSError, ValueError, AttributeError):
        return False


class Reporter:
    """Forwards progress to the caller's callback at most about once per MiB, never with a smaller ``done``."""

    def __init__(self, callback: Progress | None) -> None:
        self.callback, self.last, self.next = callback, -1, 0

    def __call__(self, done: int, total: int | None, *, final: bool = False) -> None:
        if self.callback is None or done <= self.last:
            return
        if final or done >= self.next:
            self.callback(done, total)
            self.last, self.next = done, done + _PROGRESS_STEP


def check_binary(head: bytes, format: str) -> None:
    signatures = ((b"PAR1", "a Parquet file: use format='parquet' or a .parquet extension"),
                  (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook?): save it as CSV UTF-8"),
                  (b"\x1f\x8b", "gzip-compressed: decompress it first"),
                  (b"\xff\xfe\x00\x00", "UTF-32 text: save it as UTF-8"),  # before UTF-16: its BOM starts alike
                  (b"\x00\x00\xfe\xff", "UTF-32 text: save it as UTF-8"),
                  (b"\xff\xfe", "UTF-16 text: save it as UTF-8"), (b"\xfe\xff", "UTF-16 text: save it as UTF-8"))
    for magic, what in signatures:
        if head.startswith(magic):
            raise DatasetError(f"the file is not {format} text; it looks like {what}")
    if b"\x00" in head:
        raise DatasetError(f"the file looks binary (it contains NUL bytes), not {format} text; expected a UTF-8 "
                           f"text file")


class Lines:
    """The decoded lines of a UTF-8 file, split on ``\\n`` only (each keeps its line ending).

    Not ``str.splitlines``: that also splits on U+2028, U+2029, U+0085, U+000B, U+000C and U+001C-U+001E, which JSON
    strings may hold raw: splitting there would cut a record in two and shift every later line number. ``blank``
    records whether the text seen so far is only whitespace.
    """

    def __init__(self, src: Source, report: Reporter) -> None:
        self.src, self.report = src, report
        self.number = 0       # 1-based number of the last line returned
        self.blank = True

    def __iter__(self) -> Iterator[str]:
        done, limit = 0, self.src.max_bytes
        with self.src.open() as stream:
            readline = stream.readline
            while True:  # a binary stream's lines end at b"\n" only, and a UTF-8 "\n" byte is always "\n"
                raw = readline() if limit is None else readline(limit - done + 1)  # never more than the limit
                if not raw:
                    break
                if limit is not None and done + len(raw) > limit:
                    raise too_big(self.src)
                start, done = done, done + len(raw)
                self.number += 1
                if self.number == 1 and raw.startswith(b"\xef\xbb\xbf"):  # the BOM Excel writes
                    raw, start = raw[3:], start + 3
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    offset = start + exc.start
                    raise DatasetError(f"the file is not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {offset} "
                                       f"(line {self.number}) cannot be decoded; save the file as UTF-8 (in Excel: "
                                       f"'CSV UTF-8') and try again") from None
                if self.blank and line.strip():
                    self.blank = False
                self.report(done, self.src.size)
                yield line
        self.report(done, self.src.size, final=True)

    def check_not_blank(self) -> None:
        if self.blank:
            raise DatasetError("the file is empty (only whitespace)")
