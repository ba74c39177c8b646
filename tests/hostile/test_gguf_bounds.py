"""GGUF files that would eat memory or time are refused from their header, in one line, before anything converts
them: counts, lengths and tensor sizes against the file, overlapping tensors, layers against the tensors, metadata
arrays against the model, and a model bigger than the file's tensors. Conversions are bounded in memory (checked in
a process with a capped address space) and in time (a 200-layer model converts in seconds, not tens of minutes), and
leave nothing behind: no lock file, no temporary folder, even when killed.

The files are the tiny Llama of tests/gguf_files.py taken apart and written back with what a hostile file declares.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("gguf")

from gguf_files import (  # noqa: E402
    ARR,
    STR,
    U8,
    U32,
    Tensor,
    overlapping,
    read_parts,
    tiny_llama,
    with_layers,
    write_gguf,
)

from trace_core.record import ModelLoadError  # noqa: E402
from trace_core.record import gguf as gguf_module  # noqa: E402
from trace_core.record.gguf_header import MAX_ARRAY, read_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, byte_level_tokenizer):
    """The tiny Llama's GGUF file (2 layers, float32, a 400-token vocabulary)."""
    base = tmp_path_factory.mktemp("gguf-bounds")
    return write_gguf(tiny_llama(byte_level_tokenizer, base / "hf"), base / "tiny.gguf")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRACE_CACHE_DIR", str(folder))
    return folder / "gguf"


def _changed(parts, change):
    parts = copy.deepcopy(parts)
    change(parts)
    return parts


def _offset(name, offset):
    def change(parts):
        next(t for t in parts.tensors if t.name == name).offset = offset
    return change


def _dims(name, dims):
    def change(parts):
        next(t for t in parts.tensors if t.name == name).dims = dims
    return change


def _extra_layer(parts):
    parts.tensors.append(Tensor("blk.7.attn_norm.weight", [32], 0, len(parts.data)))  # bytes of its own
    parts.data += bytes(128)


def _hostile(parts) -> dict[str, tuple[object, dict, str]]:
    """name: (parts, options of Parts.write, what the refusal says)."""
    embd = next(t for t in parts.tensors if t.name == "token_embd.weight")
    second = next(t for t in parts.tensors if t.name == "output.weight")
    many = {f"general.junk{i}": 300_000 for i in range(4)}
    wordy = [b"w" * 120] * 80_000  # metadata of 10 MB beside 175 kB of tensors
    return {
        "sum": (overlapping(parts, 8, 6), {}, "bytes in all, more than its data section of 262,144"),
        "overlap": (_changed(parts, _offset(second.name, embd.offset)), {}, "overlaps tensor"),
        "past_end": (_changed(parts, _dims(embd.name, [embd.dims[0], embd.dims[1] * 1000])), {},
                     "past the end of the file"),
        "zero_dim": (_changed(parts, _dims("output_norm.weight", [0])), {}, "has a dimension of 0"),
        "misaligned": (_changed(parts, _offset(second.name, second.offset + 4)), {}, "off the file's alignment of 32"),
        "tensor_count": (parts, {"tensor_count": 10**12}, "declares 1,000,000,000,000 tensors, at most 65,536"),
        "tensors_fit": (parts, {"tensor_count": 60_000}, "declares 60,000 tensors, more than its"),
        "key_count": (parts, {"kv_count": 2**40}, "declares 1,099,511,627,776 metadata keys, at most 4,096"),
        "array_claims": (_changed(parts, lambda p: p.set("general.junk", ARR, (U32, np.zeros(8)))),
                         {"lengths": {"general.junk": 2_000_000}},
                         "'general.junk' declares 2,000,000 values, more than the"),
        "array_2m": (_changed(parts, lambda p: p.set("general.junk", ARR, (U8, np.zeros(2_000_000)))), {},
                     f"declares 2,000,000 values, at most {MAX_ARRAY:,} are read"),
        "arrays_4x300k": (_changed(parts, lambda p: [p.set(k, ARR, (U8, np.zeros(n))) for k, n in many.items()]),
                          {}, "metadata arrays hold 300,925 values, more than a file of 1,"),
        "arrays_vs_tensors": (_changed(parts, lambda p: p.set("general.words", ARR, (STR, wordy))), {},
                              "hold 80,925 values, more than its 175,232 bytes of tensors warrant:"),
        "nested": (_changed(parts, lambda p: p.set("general.junk", ARR, (ARR, [(U8, [1])]))), {},
                   "is an array of arrays"),
        "layers_declared": (_changed(parts, lambda p: p.set("llama.block_count", U32, 200)), {},
                            "llama.block_count' declares 200 layers but its tensors are of 2: no tensor of layer 2"),
        "layer_extra": (_changed(parts, _extra_layer), {}, "2 layers but its tensors are of 3: a tensor of layer 7"),
        "layers_shared": (with_layers(parts, 200, shared=True), {}, "bytes in all, more than its data section"),
        "layers_cap": (_changed(parts, lambda p: p.set("llama.block_count", U32, 1100)), {},
                       "llama.block_count' is 1,100, at most 1,024 layers"),
        "experts": (_changed(parts, lambda p: p.set("llama.expert_count", U32, 10**9)), {},
                    "'llama.expert_count' is 1,000,000,000, at most 4,096"),
        "no_arch": (_changed(parts, lambda p: p.set("general.architecture", U32, 7)), {},
                    "names no architecture"),
        "key_twice": (_changed(parts, lambda p: p.kv.append(p.kv[0])), {}, "appears twice"),
    }


def test_hostile_headers_are_refused_in_one_line_before_anything_converts(tiny, cache, tmp_path, monkeypatch):
    parts = read_parts(tiny)

    def never(*args):
        raise AssertionError("a refused file reached the conversion")

    monkeypatch.setattr(gguf_module, "convert_gguf", never)
    for name, (hostile, options, fragment) in _hostile(parts).items():
        path = hostile.write(tmp_path / f"{name}.gguf", **options)
        with pytest.raises(ModelLoadError) as info:
            gguf_module.converted_folder(path, progress=lambda line: None)
        message = str(info.value)
        assert fragment in message, (name, message)
        assert message.startswith(f"GGUF file '{name}.gguf' could not be converted (") and "\n" not in message
        assert len(message) < 400, message
    assert not cache.exists()  # refused before the cache was touched


def test_a_string_longer_than_the_file_is_refused(tiny, tmp_path):
    raw = tiny.read_bytes()
    at = raw.index(b"general.name") + len(b"general.name") + 4  # the string's length follows the key and its type
    bad = raw[:at] + (2**40).to_bytes(8, "little") + raw[at + 8:]
    (tmp_path / "long.gguf").write_bytes(bad)
    with pytest.raises(ModelLoadError, match=r"it ends inside metadata 'general.name': 1,099,511,627,776 bytes"):
        read_header(tmp_path / "long.gguf")


def test_real_vocabulary_sized_arrays_pass(tiny, tmp_path):
    """A tokenizer's lists of a quarter of a million entries are within bounds beside a model of a few tens of MB
    (the rule is one metadata value per 128 bytes of tensors): the bounds refuse floods, not vocabularies."""
    parts = read_parts(tiny)
    parts.set("tokenizer.ggml.merges", ARR, (STR, [b"a b"] * 250_000))
    parts.set("tokenizer.ggml.scores", ARR, (6, np.zeros(250_000)))
    parts.data += bytes(64 << 20)
    header = read_header(parts.write(tmp_path / "vocab.gguf"))
    assert header.values == sum(len(value[1]) for _, kind, value in parts.kv if kind == ARR) > 500_000
    assert header.elements == 43_808


def test_a_config_larger_than_the_tensors_is_refused_before_allocation(tiny, cache, tmp_path):
    parts = read_parts(tiny)
    parts.set("llama.embedding_length", U32, 8192)
    parts.set("llama.feed_forward_length", U32, 32768)
    path = parts.write(tmp_path / "wide.gguf")
    with pytest.raises(ModelLoadError, match=r"'wide.gguf' could not be converted \(its metadata builds a model of "
                                             r"[\d,]+ values but its tensors hold 43,808\)"):
        gguf_module.converted_folder(path, progress=lambda line: None)
    assert list(cache.iterdir()) == []  # no lock file, no temporary folder


_BOUNDED = """
import json, resource, sys
from trace_core.record.gguf import converted_folder
converted_folder(sys.argv[1], progress=lambda line: None)  # every import and pool in place before the cap
size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[2]), resource.RLIM_INFINITY))
for path in sys.argv[3:]:
    try:
        print(json.dumps([path, "ok", str(converted_folder(path, progress=lambda line: None))]), flush=True)
    except Exception as exc:
        print(json.dumps([path, type(exc).__name__, str(exc)]), flush=True)
"""


def _run(script: str, *args: object, timeout: float) -> list[list[str]]:
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the address space from /proc")
def test_hostile_files_stay_within_a_capped_address_space(tiny, cache, tmp_path):
    """Under an address space of 1 GiB beyond what a converting process already maps, a 4 MiB file of overlapping
    tensors that declares 0.9 GB of float16 (1.7 GB once converted), a 190 kB file whose metadata builds a 6 GB
    model and a 2 MB file with a 2-million-value array are each refused in one line (unchecked, they ran out of
    memory or took minutes), and a real file still converts."""
    parts = read_parts(tiny)
    files = {
        "overlap.gguf": (overlapping(parts, 32, 48), "bytes in all, more than its data section"),
        "wide.gguf": (_changed(parts, lambda p: (p.set("llama.embedding_length", U32, 8192),
                                                 p.set("llama.feed_forward_length", U32, 32768))),
                      "its metadata builds a model of"),
        "array.gguf": (_changed(parts, lambda p: p.set("general.junk", ARR, (U8, np.zeros(2_000_000)))),
                       "declares 2,000,000 values"),
    }
    paths = [hostile.write(tmp_path / name) for name, (hostile, _) in files.items()]
    real = _changed(parts, lambda p: p.set("general.name", STR, b"another")).write(tmp_path / "real.gguf")
    rows = _run(_BOUNDED, tiny, 1 << 30, *paths, real, timeout=400)
    assert [row[0] for row in rows] == [str(p) for p in [*paths, real]]
    for (name, (_, fragment)), (_, kind, said) in zip(files.items(), rows[:-1], strict=True):
        assert kind == "ModelLoadError" and fragment in said and name in said, (name, said)
    assert rows[-1][1] == "ok", rows[-1]
    names = {p.name for p in cache.iterdir()}  # the two real files' folders, nothing else
    assert len(names) == 2 and Path(rows[-1][2]).name in names and not any(n.startswith(".") for n in names)


@pytest.mark.slow
def test_a_200_layer_model_converts_in_seconds(tiny, cache, tmp_path):
    """transformers built gguf's name map of all layers once per submodule (the square of the layer count: over ten
    minutes for 200 layers); memoised for the conversion, it takes seconds. The deadline is generous."""
    path = with_layers(read_parts(tiny), 200).write(tmp_path / "deep.gguf")
    script = ("import sys; from trace_core.record.gguf import converted_folder; "
              "print(converted_folder(sys.argv[1], progress=lambda line: None))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = Path(done.stdout.strip())
    assert '"num_hidden_layers": 200' in (folder / "config.json").read_text()
    assert sorted(cache.iterdir()) == [folder]


_STUCK = """
import sys, time
from trace_core.record import gguf
def stuck(source, out, digest):
    (out / "model.safetensors").write_bytes(b"partial")
    print("converting", flush=True)
    time.sleep(600)
gguf.convert_gguf = stuck
gguf.converted_folder(sys.argv[1], progress=lambda line: None)
"""


def _stuck(path: Path) -> subprocess.Popen:
    """A process converting ``path`` that stops half-way, holding the lock, until killed."""
    proc = subprocess.Popen([sys.executable, "-c", _STUCK, str(path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "converting"
    return proc


def _fake(source, out, digest):
    (out / "config.json").write_text("{}")


def test_conversions_leave_no_lock_and_a_killed_ones_folder_is_removed_next_time(tiny, cache, tmp_path, monkeypatch):
    parts = read_parts(tiny)
    a, b, c = (_changed(parts, lambda p, n=n: p.set("general.name", STR, n.encode())).write(tmp_path / f"{n}.gguf")
               for n in "abc")
    monkeypatch.setattr(gguf_module, "convert_gguf", _fake)
    busy = _stuck(b)  # b converting, as far as anyone can tell
    try:
        held = sorted(cache.iterdir())  # its lock file and its temporary folder
        assert sorted(p.is_dir() for p in held) == [False, True]
        folder_a = gguf_module.converted_folder(a, progress=lambda line: None)
        assert sorted(p for p in cache.iterdir() if p != folder_a) == held  # b's, still live
    finally:
        busy.kill()
        busy.wait()
    killed = _stuck(c)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    folder_a.rename(folder_a.with_name("kept"))  # so that converting a again runs a conversion
    again = gguf_module.converted_folder(a, progress=lambda line: None)  # sweeps b's and c's leftovers
    assert sorted(p.name for p in cache.iterdir()) == sorted(["kept", again.name])
    monkeypatch.undo()
    monkeypatch.setenv("TRACE_CACHE_DIR", str(cache.parent))
    killed = _stuck(c)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert len(list(cache.iterdir())) == 4  # c's lock file and half-written folder
    folder_c = gguf_module.converted_folder(c, progress=lambda line: None)  # a real conversion, not blocked
    assert (folder_c / "model.safetensors").stat().st_size > 100_000
    assert sorted(p.name for p in cache.iterdir()) == sorted(["kept", again.name, folder_c.name])


def test_a_failed_conversion_leaves_no_lock_file(tiny, cache, tmp_path, byte_level_tokenizer):
    hf = tiny_llama(byte_level_tokenizer, tmp_path / "hf")
    other = write_gguf(hf, tmp_path / "other_arch.gguf", architecture="tinyarch-9000")
    with pytest.raises(ModelLoadError, match="tinyarch-9000 is not supported"):
        gguf_module.converted_folder(other, progress=lambda line: None)
    assert list(cache.iterdir()) == []
    folder = gguf_module.converted_folder(tiny, progress=lambda line: None)
    assert list(cache.iterdir()) == [folder]
