"""A GGUF file's header, read within bounds before anything converts the file.

transformers' GGUF loader (through the ``gguf`` package) believes what a file declares: it builds a Python object
per metadata value however many a count claims, views every tensor where its offset says (tensors may overlap, so a
small file can declare gigabytes), and builds the model its metadata describes. So :func:`read_header` reads the
header first, with the file's own size as the bound of every count and length, and refuses in one
:class:`~trace_core.record.ModelLoadError` line naming the file and what is wrong:

* counts: at most :data:`MAX_TENSORS` tensors and :data:`MAX_KEYS` metadata keys, and no more than the file's bytes
  could hold;
* metadata: keys of at most 65,535 bytes; every string and array within the bytes left in the file, checked from
  its declared length before it is walked (a 2-million-value array in a 2 MB file is refused at once); arrays of
  arrays refused (llama.cpp refuses them too); an array holds at most :data:`MAX_ARRAY` values and all arrays
  together at most :data:`MIN_VALUES` or one value per :data:`BYTES_PER_VALUE` bytes of tensor data, whichever is
  more (a real vocabulary is a small part of its model: SmolLM2's 147,000 values sit beside 96 MB of tensors);
* tensors: 1 to 4 dimensions, a type the ``gguf`` package knows, rows a whole number of its blocks, an offset on the
  file's alignment; each inside the file, no two overlapping, all together no larger than the data section;
* layers: ``<arch>.block_count`` at most :data:`MAX_BLOCKS`, and exactly the layers the tensors are of; every other
  ``<arch>.*_count`` (experts, heads) at most :data:`MAX_COUNT`.

The walk itself is cheap: arrays of numbers are skipped by their length, strings by theirs, nothing is kept but
scalars and short strings.
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_core.checks import shorten
from trace_core.record.errors import ModelLoadError

__all__ = ["BYTES_PER_VALUE", "GGUFHeader", "MAX_ARRAY", "MAX_BLOCKS", "MAX_COUNT", "MAX_KEYS", "MAX_TENSORS",
           "MIN_VALUES", "TensorInfo", "read_header"]

#: At most this many tensors (a large mixture-of-experts model has a few thousand).
MAX_TENSORS = 1 << 16
#: At most this many metadata keys (a model has a few dozen).
MAX_KEYS = 1 << 12
#: At most this many values in one metadata array (the largest vocabularies have about 262,000 tokens).
MAX_ARRAY = 1 << 20
#: Metadata array values always allowed in all, whatever the size of the tensor data.
MIN_VALUES = 1 << 16
#: Beyond :data:`MIN_VALUES`, one metadata array value per this many bytes of tensor data.
BYTES_PER_VALUE = 128
#: At most this many layers (``<arch>.block_count``; the largest models have about 130).
MAX_BLOCKS = 1024
#: At most this value for any other ``<arch>.*_count`` (experts, attention heads): each may build modules.
MAX_COUNT = 4096

_MAX_KEY = 65_535
_MAX_NAME = 256
_MAX_DIMS = 4
_MAX_ALIGNMENT = 1 << 20
_MIN_KEY_BYTES = 13  # key length, an empty key, the type and a one-byte value
_MIN_TENSOR_BYTES = 32  # name length, an empty name, one dimension, the type and the offset
#: struct formats of the scalar GGUF value types, by type number; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_SHORT = 1024
_LAYER = re.compile(r"(?:^|\.)blk\.(\d+)\.")


class _Refused(Exception):
    """What is wrong with the file, in words; :func:`read_header` makes it a ModelLoadError naming the file."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header declares it: ``offset`` counts from the data section's start."""

    name: str
    dims: tuple[int, ...]
    kind: int
    offset: int
    nbytes: int

    @property
    def elements(self) -> int:
        return math.prod(self.dims)


@dataclass(frozen=True)
class GGUFHeader:
    """What :func:`read_header` found: the file's size, where its data section starts, the scalar and short string
    metadata by key, the tensors, and how many metadata array values there are in all."""

    size: int
    data_offset: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    values: int

    @property
    def elements(self) -> int:
        """The values of all tensors together (what the converted model may hold)."""
        return sum(t.elements for t in self.tensors)


def read_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file ``path``, checked as the module docstring says.

    Raises
    ------
    ModelLoadError
        The file cannot be read, the ``gguf`` package is missing, or the header breaks a bound: one line naming the
        file and what is wrong.
    """
    shown = shorten(path.name)
    try:
        import gguf
    except ImportError:
        raise ModelLoadError(f"loading {shown} needs the gguf package: pip install gguf") from None
    sizes = {int(kind): (int(block), int(size)) for kind, (block, size) in gguf.GGML_QUANT_SIZES.items()}
    try:
        with open(path, "rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(_Cursor(buf), sizes)
    except _Refused as exc:
        raise ModelLoadError(f"GGUF file {shown} could not be converted ({exc})") from None
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"GGUF file {shown} cannot be read ({type(exc).__name__})") from None


class _Cursor:
    """Reads the mapped file forward; every read is checked against the bytes left."""

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.size, self.pos, self.order = buf, len(buf), 0, "<"

    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> int:
        if n > self.left():
            raise _Refused(f"it ends inside {what}: {n:,} bytes needed at byte {self.pos:,} of {self.size:,}")
        self.pos += n
        return self.pos - n

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack_from(self.order + fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str, limit: int) -> bytes:
        n = self.unpack("Q", what)
        if n > limit:
            raise _Refused(f"{what} declares {n:,} bytes, at most {limit:,} are read")
        start = self.take(n, what)
        return self.buf[start:start + n]

    def skip_string(self, what: str) -> int:
        n = self.unpack("Q", what)
        self.take(n, what)
        return n


def _parse(cur: _Cursor, sizes: dict[int, tuple[int, int]]) -> GGUFHeader:
    cur.take(4, "the magic bytes")
    version = cur.unpack("I", "the version")
    if version and not version & 0xFFFF:  # written on a machine of the other byte order
        cur.order, version = ">", struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (2, 3):
        raise _Refused(f"GGUF version {version} is not read, only 2 and 3")
    n_tensors, n_keys = cur.unpack("Q", "the tensor count"), cur.unpack("Q", "the metadata count")
    _check_count(n_tensors, MAX_TENSORS, _MIN_TENSOR_BYTES, cur, "tensors")
    _check_count(n_keys, MAX_KEYS, _MIN_KEY_BYTES, cur, "metadata keys")
    metadata, values = _read_metadata(cur, n_keys)
    tensors = _read_tensors(cur, n_tensors, sizes)
    alignment = metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or not 0 < alignment <= _MAX_ALIGNMENT or alignment & (alignment - 1):
        raise _Refused(f"general.alignment is {shorten(alignment)}, not a power of two up to {_MAX_ALIGNMENT:,}")
    header = GGUFHeader(cur.size, -(-cur.pos // alignment) * alignment, metadata, tensors, values)
    _check_tensors(header, alignment)
    _check_values(values, header.size - header.data_offset, whole=False)
    _check_layers(header)
    return header


def _check_count(n: int, cap: int, least: int, cur: _Cursor, what: str) -> None:
    if n > cap:
        raise _Refused(f"it declares {n:,} {what}, at most {cap:,} are read")
    if n * least > cur.left():
        raise _Refused(f"it declares {n:,} {what}, more than its {cur.size:,} bytes can hold")


def _read_metadata(cur: _Cursor, count: int) -> tuple[dict[str, Any], int]:
    metadata: dict[str, Any] = {}
    seen: set[str] = set()
    values = 0
    for _ in range(count):
        key = cur.string("a metadata key", _MAX_KEY).decode("utf-8", "replace")
        if key in seen:
            raise _Refused(f"metadata key {shorten(key)} appears twice")
        seen.add(key)
        what = f"metadata {shorten(key)}"
        kind = cur.unpack("I", what)
        if kind in _SCALARS:
            metadata[key] = cur.unpack(_SCALARS[kind], what)
        elif kind == _STRING:
            start = cur.pos + 8
            if cur.skip_string(what) <= _SHORT:
                metadata[key] = cur.buf[start:cur.pos].decode("utf-8", "replace")
        elif kind == _ARRAY:
            values += _skip_array(cur, what, values)
        else:
            raise _Refused(f"{what} has the unknown type {kind}")
    return metadata, values


def _skip_array(cur: _Cursor, what: str, before: int) -> int:
    """Step over an array after checking its declared length against the bytes left and, with the ``before`` values
    of earlier arrays, against the whole file (its data section is smaller: what fails here fails later); its
    length."""
    item, n = cur.unpack("I", what), cur.unpack("Q", what)
    if item == _ARRAY:
        raise _Refused(f"{what} is an array of arrays, which is not read")
    if item not in _SCALARS and item != _STRING:
        raise _Refused(f"{what} is an array of the unknown type {item}")
    least = struct.calcsize(_SCALARS[item]) if item in _SCALARS else 8
    if n * least > cur.left():
        raise _Refused(f"{what} declares {n:,} values, more than the {cur.left():,} bytes left in the file can hold")
    if n > MAX_ARRAY:
        raise _Refused(f"{what} declares {n:,} values, at most {MAX_ARRAY:,} are read")
    _check_values(before + n, cur.size, whole=True)
    if item == _STRING:
        for _ in range(n):
            cur.skip_string(what)
    else:
        cur.take(n * least, what)
    return n


def _read_tensors(cur: _Cursor, count: int, sizes: dict[int, tuple[int, int]]) -> list[TensorInfo]:
    tensors: list[TensorInfo] = []
    names: set[str] = set()
    for _ in range(count):
        name = cur.string("a tensor name", _MAX_NAME).decode("utf-8", "replace")
        what = f"tensor {shorten(name)}"
        if name in names:
            raise _Refused(f"{what} appears twice")
        names.add(name)
        n_dims = cur.unpack("I", what)
        if not 1 <= n_dims <= _MAX_DIMS:
            raise _Refused(f"{what} has {n_dims:,} dimensions, not 1 to {_MAX_DIMS}")
        dims = tuple(cur.unpack("Q", what) for _ in range(n_dims))
        kind, offset = cur.unpack("I", what), cur.unpack("Q", what)
        if not all(dims):
            raise _Refused(f"{what} has a dimension of 0")
        if kind not in sizes:
            raise _Refused(f"{what} has the unknown type {kind}")
        block, type_size = sizes[kind]
        if dims[0] % block:
            raise _Refused(f"{what} has rows of {dims[0]:,} values, not a whole number of its type's blocks of "
                           f"{block}")
        tensors.append(TensorInfo(name, dims, kind, offset, math.prod(dims) // block * type_size))
    return tensors


def _check_tensors(header: GGUFHeader, alignment: int) -> None:
    """Each tensor inside the file and on the alignment, all together within the data section, no two
    overlapping."""
    room = header.size - header.data_offset
    if room < 0:
        raise _Refused(f"it ends before its data section, which would start at byte {header.data_offset:,} of "
                       f"{header.size:,}")
    for t in header.tensors:
        if t.offset % alignment:
            raise _Refused(f"tensor {shorten(t.name)} starts at {t.offset:,}, off the file's alignment of {alignment}")
        if t.offset + t.nbytes > room:
            raise _Refused(f"tensor {shorten(t.name)} declares {t.nbytes:,} bytes at {t.offset:,} of a data section "
                           f"of {room:,}: past the end of the file")
    declared = sum(t.nbytes for t in header.tensors)
    if declared > room:
        raise _Refused(f"its tensors declare {declared:,} bytes in all, more than its data section of {room:,}")
    end, last = 0, None
    for t in sorted(header.tensors, key=lambda t: (t.offset, t.nbytes)):
        if last is not None and t.offset < end and t.nbytes:
            raise _Refused(f"tensor {shorten(t.name)} overlaps tensor {shorten(last.name)} at byte {t.offset:,} of "
                           "the data section")
        if t.offset + t.nbytes > end:
            end, last = t.offset + t.nbytes, t


def _check_values(values: int, room: int, *, whole: bool) -> None:
    """At most :data:`MIN_VALUES` metadata array values, or one per :data:`BYTES_PER_VALUE` bytes of ``room`` (the
    data section, or the ``whole`` file)."""
    if values > max(MIN_VALUES, room // BYTES_PER_VALUE):
        room_is = f"a file of {room:,} bytes warrants" if whole else f"its {room:,} bytes of tensors warrant"
        raise _Refused(f"its metadata arrays hold {values:,} values, more than {room_is}: at most "
                       f"{MIN_VALUES:,}, or one per {BYTES_PER_VALUE} bytes")


def _check_layers(header: GGUFHeader) -> None:
    """The declared layer count bounded and equal to the layers the tensors are of; other counts bounded."""
    arch = header.metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise _Refused("it names no architecture: general.architecture is missing or not text")
    for key, value in header.metadata.items():
        if (key.startswith(f"{arch}.") and key.endswith("_count") and key != f"{arch}.block_count"
                and isinstance(value, int) and value > MAX_COUNT):
            raise _Refused(f"{shorten(key)} is {value:,}, at most {MAX_COUNT:,} are read")
    blocks = header.metadata.get(f"{arch}.block_count")
    layers = {int(m.group(1)) for t in header.tensors if (m := _LAYER.search(t.name))}
    key = shorten(f"{arch}.block_count")
    if not isinstance(blocks, int) or isinstance(blocks, bool):
        if layers:
            raise _Refused(f"it holds tensors of {len(layers):,} layers but no integer {key}")
        return
    if blocks > MAX_BLOCKS:
        raise _Refused(f"{key} is {blocks:,}, at most {MAX_BLOCKS:,} layers are read")
    if layers != set(range(blocks)):
        extra, missing = sorted(layers - set(range(blocks))), sorted(set(range(blocks)) - layers)
        detail = f"a tensor of layer {extra[0]:,}" if extra else f"no tensor of layer {missing[0]:,}"
        raise _Refused(f"{key} declares {blocks:,} layers but its tensors are of {len(layers):,}: {detail}")
