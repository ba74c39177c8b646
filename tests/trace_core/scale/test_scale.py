"""Sharded runs (trace_core.scale): listing and naming the shards, the manifest and when a shard is complete,
atomic writes, resuming after a process is killed mid-run, and rejected rows reported with their shard and row."""

from __future__ import annotations

import json
import os
import re
import runpy
import signal
import subprocess
import sys

import pandas as pd
import pytest
from helpers import labeled_answers

from trace_core.data import DatasetWarning, read_dataset, write_dataset
from trace_core.scale import (
    ENTRY_FOLDER,
    LOCK_FILE,
    MANIFEST_FILE,
    ShardOutput,
    file_digest,
    is_complete,
    list_shards,
    output_name,
    read_entry,
    remove_leftovers,
    run_shards,
    write_atomic,
)
from trace_core.scale import manifest as manifest_module

# The work of the resume tests, run both in a process that is killed and in the test: each shard read as a dataset.
# With KILL_AT set, the process kills itself (SIGKILL: no cleanup, no finally) when the work reaches that shard.
WORKER = '''
import os
import re
import signal

from trace_core.data import read_dataset
from trace_core.scale import ShardOutput


def work(shard):
    if os.environ.get("KILL_AT") == shard.name:
        os.kill(os.getpid(), signal.SIGKILL)
    dataset = read_dataset(shard.path, require_label=False)
    return ShardOutput(frame=dataset.frame, traces=dataset.traces, n_read=dataset.n_read, errors=dataset.errors)


if __name__ == "__main__":
    import sys

    from trace_core.scale import list_shards, run_shards

    run_shards(list_shards(sys.argv[1]), sys.argv[2], work, settings={"kind": "read"}, command="test")
'''


def _touch(path, text="{}"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _write_shards(folder, sizes, *, fmt="jsonl", seed=0):
    """Shards of labeled answers with traces and a unique ``id`` per row, across sizes; returns the ids."""
    ids = []
    start = 0
    for k, n in enumerate(sizes):
        frame, traces = labeled_answers(n, seed=seed + k)
        frame["id"] = range(start, start + n)
        ids.extend(frame["id"].tolist())
        start += n
        target = folder / (f"part-{k}.{fmt}" if k % 2 == 0 else f"sub/part-{k}.{fmt}")
        target.parent.mkdir(parents=True, exist_ok=True)
        write_dataset(frame, target, traces=traces)
    return ids


def _reading_work(shard):
    dataset = read_dataset(shard.path, require_label=False)
    return ShardOutput(frame=dataset.frame, traces=dataset.traces, n_read=dataset.n_read, errors=dataset.errors)


# --- listing and naming ---------------------------------------------------------------------------------------

def test_a_folder_lists_its_dataset_files_at_any_depth_sorted_with_unique_output_names(tmp_path):
    for name in ("b.jsonl", "a/z.jsonl", "a/c/d.jsonl", ".hidden.jsonl", "_SUCCESS", "_tmp/x.jsonl", "notes.txt"):
        _touch(tmp_path / name)
    shards = list_shards(tmp_path)
    assert [s.name for s in shards] == ["a/c/d.jsonl", "a/z.jsonl", "b.jsonl"]
    assert [s.output for s in shards] == ["a__c__d.parquet", "a__z.parquet", "b.parquet"]
    assert {s.format for s in shards} == {"jsonl"}
    assert list_shards(str(tmp_path)) == shards  # a str or a Path


def test_a_glob_pattern_and_a_single_file(tmp_path):
    for name in ("x/1.parquet", "x/2.parquet", "x/deep/3.parquet", "x/4.csv"):
        _touch(tmp_path / name)
    flat = list_shards(str(tmp_path / "x" / "*.parquet"))
    assert [(s.name, s.output) for s in flat] == [("1.parquet", "1.parquet"), ("2.parquet", "2.parquet")]
    deep = list_shards(str(tmp_path / "x" / "**" / "*.parquet"))
    assert [s.name for s in deep] == ["1.parquet", "2.parquet", "deep/3.parquet"]
    assert deep[2].output == "deep__3.parquet" and deep[2].format == "parquet"
    [one] = list_shards(tmp_path / "x" / "4.csv")
    assert (one.name, one.output, one.format) == ("4.csv", "4.parquet", "csv")


def test_output_names():
    assert output_name("a/b.parquet") == "a__b.parquet"
    assert output_name("2026/05/part-0.jsonl") == "2026__05__part-0.parquet"
    assert output_name("noext") == "noext.parquet"


@pytest.mark.parametrize("layout, spec, words", [
    ((), "missing", "no such file or folder"),
    ((), "nothing-*.parquet", "the pattern matches nothing"),
    (("notes.txt", "img.png"), ".", "the folder holds no dataset file (2 other files)"),
    (("a.parquet", "b.jsonl"), ".", "more than one format (1 jsonl, 1 parquet)"),
    (("a/b.jsonl", "a__b.jsonl"), ".", "would both be written to a__b.parquet"),
    (("a/b.jsonl", "a/b.ndjson"), ".", "would both be written to a__b.parquet"),
    (("A.jsonl", "a.jsonl"), ".", "would both be written to"),  # one file on a case-insensitive file system
    (("notes.txt",), "notes.txt", "not a dataset file"),
])
def test_listing_errors_name_the_spec(tmp_path, layout, spec, words):
    for name in layout:
        _touch(tmp_path / name)
    given = str(tmp_path / spec)
    with pytest.raises(ValueError, match=re.escape(words)) as caught:
        list_shards(given)
    assert str(caught.value).startswith(given)


def test_a_long_spec_is_cut_in_the_message(tmp_path):
    with pytest.raises(ValueError) as caught:
        list_shards(str(tmp_path / ("x" * 5000)))
    assert len(str(caught.value)) < 400 and "characters in all" in str(caught.value)


def test_spec_types_are_checked():
    with pytest.raises(TypeError, match="`spec`"):
        list_shards(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        list_shards("  ")


# --- the manifest and atomic writes -------------------------------------------------------------------------------

def test_write_atomic_replaces_whole_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "f.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["f.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # as any file the user writes, not private


def test_write_atomic_interrupted_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    write_atomic(target, b"old")

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(manifest_module.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.json"]


def test_leftover_temporary_files_are_removed_and_nothing_else(tmp_path):
    keep = [_touch(tmp_path / "a.parquet"), _touch(tmp_path / ENTRY_FOLDER / "a.json"), _touch(tmp_path / ".keep")]
    leftovers = [_touch(tmp_path / ".a.parquet.x1.tmp"), _touch(tmp_path / ENTRY_FOLDER / ".a.json.x2.tmp")]
    assert sorted(remove_leftovers(tmp_path)) == sorted(leftovers)
    assert all(p.exists() for p in keep) and not any(p.exists() for p in leftovers)


def _one_shard_run(tmp_path, settings=None):
    _write_shards(tmp_path / "in", [6])
    shards = list_shards(tmp_path / "in")
    summary = run_shards(shards, tmp_path / "out", _reading_work, settings=settings or {"k": [1, 2]}, command="c")
    return shards[0], summary


def test_an_entry_records_input_output_counts_settings_and_version(tmp_path):
    from trace_core import __version__

    shard, summary = _one_shard_run(tmp_path)
    entry = read_entry(tmp_path / "out", shard.output)
    assert entry == summary.results[0].entry  # nothing rejected: the run's copy is the whole entry
    assert (entry.input, entry.output) == ("part-0.jsonl", "part-0.parquet")
    assert (entry.input_size, entry.input_sha256) == file_digest(shard.path)
    assert (entry.output_size, entry.output_sha256) == file_digest(tmp_path / "out" / "part-0.parquet")
    assert (entry.rows_read, entry.rows_kept, entry.rows_rejected) == (6, 6, 0)
    assert entry.settings == {"k": [1, 2]} and entry.version == __version__ and entry.command == "c"
    assert (tmp_path / "out" / ENTRY_FOLDER / "part-0.json").is_file()


@pytest.mark.parametrize("change", ["none", "input", "settings", "output cut", "output gone", "entry gone",
                                    "entry damaged"])
def test_a_shard_is_complete_only_when_input_settings_and_output_all_match(tmp_path, change):
    shard, _ = _one_shard_run(tmp_path)
    out = tmp_path / "out"
    settings = {"k": (1, 2)}  # a tuple is stored as a list and compares equal
    if change == "input":
        shard.path.write_bytes(shard.path.read_bytes() + b"\n")
    elif change == "settings":
        settings = {"k": [1, 3]}
    elif change == "output cut":
        data = (out / shard.output).read_bytes()
        (out / shard.output).write_bytes(data[: len(data) // 2])
    elif change == "output gone":
        (out / shard.output).unlink()
    elif change == "entry gone":
        (out / ENTRY_FOLDER / "part-0.json").unlink()
    elif change == "entry damaged":
        (out / ENTRY_FOLDER / "part-0.json").write_text('{"input": ', encoding="utf-8")
    size, digest = file_digest(shard.path)
    complete = is_complete(read_entry(out, shard.output), out, input_name=shard.name, input_size=size,
                           input_sha256=digest, settings=settings)
    assert complete is (change == "none")


def test_settings_must_be_json_values(tmp_path):
    _write_shards(tmp_path / "in", [2])
    with pytest.raises(TypeError, match="JSON values"):
        run_shards(list_shards(tmp_path / "in"), tmp_path / "out", _reading_work, settings={"f": object()})


# --- running and resuming ---------------------------------------------------------------------------------------

def _rows(out):
    """Every output row's id, shard by shard in the manifest's order, and the manifest."""
    manifest = json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8"))
    ids = []
    for entry in manifest["entries"]:
        ids.extend(pd.read_parquet(out / entry["output"])["id"].tolist())
    return ids, manifest


def test_a_run_writes_every_shard_and_a_rerun_skips_them_without_working(tmp_path):
    ids = _write_shards(tmp_path / "in", [5, 7, 3])
    shards = list_shards(tmp_path / "in")
    seen = []
    summary = run_shards(shards, tmp_path / "out", _reading_work, settings={},
                         on_shard=lambda r, i, n: seen.append((r.shard.name, r.status, i, n)))
    assert seen == [("part-0.jsonl", "done", 1, 3), ("part-2.jsonl", "done", 2, 3), ("sub/part-1.jsonl", "done", 3, 3)]
    assert summary.sentence() == "3 shards: 3 written, 0 already complete; 15 rows read: 15 kept, 0 rejected"
    got, manifest = _rows(tmp_path / "out")
    assert sorted(got) == sorted(ids)
    assert (manifest["shards"], manifest["rows_read"], manifest["rows_kept"], manifest["failed"]) == (3, 15, 15, {})
    back = read_dataset(tmp_path / "out" / "sub__part-1.parquet", require_label=False)
    original = read_dataset(tmp_path / "in" / "sub" / "part-1.jsonl", require_label=False)
    assert back.frame.equals(original.frame) and back.has_traces
    assert [t.surprisal.tolist() for t in back.traces] == [t.surprisal.tolist() for t in original.traces]

    def no_work(shard):
        raise AssertionError(f"{shard.name} is complete and must not be worked again")

    again = run_shards(shards, tmp_path / "out", no_work, settings={})
    assert (again.done, again.skipped) == (0, 3) and _rows(tmp_path / "out") == (got, manifest)


def test_a_rerun_with_other_settings_redoes_every_shard(tmp_path):
    _write_shards(tmp_path / "in", [2, 2])
    shards = list_shards(tmp_path / "in")
    run_shards(shards, tmp_path / "out", _reading_work, settings={"model": "a"})
    again = run_shards(shards, tmp_path / "out", _reading_work, settings={"model": "b"})
    assert (again.done, again.skipped) == (2, 0)
    assert read_entry(tmp_path / "out", "part-0.parquet").settings == {"model": "b"}


def test_resume_after_the_process_is_killed_mid_run(tmp_path):
    ids = _write_shards(tmp_path / "in", [4, 6, 5, 3])
    worker = tmp_path / "shard_worker.py"
    worker.write_text(WORKER, encoding="utf-8")
    out = tmp_path / "out"
    env = {**os.environ, "KILL_AT": "part-2.jsonl"}  # the second shard in order
    killed = subprocess.run([sys.executable, str(worker), str(tmp_path / "in"), str(out)], env=env,
                            capture_output=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    # the first shard only; no manifest yet; the killed run's lock file, which the next run takes over
    assert sorted(os.listdir(out)) == [LOCK_FILE, ENTRY_FOLDER, "part-0.parquet"]
    # what a kill during the next shard's writes leaves: a temporary file and an output without its entry
    (out / ".part-2.parquet.abc.tmp").write_bytes(b"half")
    (out / "part-2.parquet").write_bytes(b"PAR1 cut short")

    worked = []
    work = runpy.run_path(str(worker))["work"]
    resumed = run_shards(list_shards(tmp_path / "in"), out, lambda s: worked.append(s.name) or work(s),
                         settings={"kind": "read"}, command="test")
    assert worked == ["part-2.jsonl", "sub/part-1.jsonl", "sub/part-3.jsonl"]  # not the complete first shard
    assert (resumed.done, resumed.skipped) == (3, 1)
    assert not any(p.name.endswith(".tmp") for p in out.rglob("*")) and not (out / LOCK_FILE).exists()
    got, manifest = _rows(out)
    assert sorted(got) == sorted(ids) and len(got) == len(set(got))  # every input row exactly once

    fresh = tmp_path / "fresh"
    run_shards(list_shards(tmp_path / "in"), fresh, work, settings={"kind": "read"}, command="test")
    assert json.loads((fresh / MANIFEST_FILE).read_text()) == manifest
    for entry in manifest["entries"]:
        assert (fresh / entry["output"]).read_bytes() == (out / entry["output"]).read_bytes()


def test_a_bad_row_is_reported_with_its_shard_and_row_and_the_other_rows_are_kept(tmp_path):
    _write_shards(tmp_path / "in", [3])
    bad = tmp_path / "in" / "sub" / "bad.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"prompt": "a", "answer": "x", "label": 1}\n{"prompt": "b", "answer": "y", "label": "maybe"}\n'
                   '{"prompt": "c", "answer": "z", "label": 0}\n', encoding="utf-8")
    seen = {}
    with pytest.warns(DatasetWarning, match="1 rejected"):
        summary = run_shards(list_shards(tmp_path / "in"), tmp_path / "out", _reading_work, settings={},
                             on_shard=lambda r, i, n: seen.setdefault(r.shard.name, r))
    result = seen["sub/bad.jsonl"]
    assert len(result.problems) == 1 and result.problems[0].startswith("sub/bad.jsonl: row 2: label: ")
    assert (result.entry.rows_read, result.entry.rows_kept, result.entry.rows_rejected) == (3, 2, 1)
    assert result.entry.rejected[0]["row"] == 2 and result.entry.rejected[0]["field"] == "label"
    assert read_entry(tmp_path / "out", "sub__bad.parquet") == result.entry  # the entry file keeps them
    kept = next(r for r in summary.results if r.shard.name == "sub/bad.jsonl")  # the run keeps counts only
    assert (kept.problems, kept.entry.rejected, kept.entry.rows_rejected) == ((), [], 1)
    combined = json.loads((tmp_path / "out" / MANIFEST_FILE).read_text(encoding="utf-8"))["entries"][1]
    assert "rejected" not in combined and combined["entry"] == "_manifest/sub__bad.json"
    assert pd.read_parquet(tmp_path / "out" / "sub__bad.parquet")["prompt"].tolist() == ["a", "c"]
    assert summary.sentence().endswith("6 rows read: 5 kept, 1 rejected")


def test_a_shard_that_cannot_be_read_fails_alone_and_runs_again_next_time(tmp_path):
    from trace_core.data import DatasetError

    _write_shards(tmp_path / "in", [2, 2])
    empty = _touch(tmp_path / "in" / "empty.jsonl", "")
    shards = list_shards(tmp_path / "in")
    summary = run_shards(shards, tmp_path / "out", _reading_work, settings={}, skip_errors=(DatasetError,))
    assert [r.shard.name for r in summary.failed] == ["empty.jsonl"] and (summary.done, summary.skipped) == (2, 0)
    _, manifest = _rows(tmp_path / "out")
    assert list(manifest["failed"]) == ["empty.jsonl"] and manifest["shards"] == 2
    assert not (tmp_path / "out" / "empty.parquet").exists()
    empty.write_text('{"prompt": "p", "answer": "a"}\n', encoding="utf-8")
    again = run_shards(shards, tmp_path / "out", _reading_work, settings={}, skip_errors=(DatasetError,))
    assert (again.done, again.skipped, again.failed) == (1, 2, [])
    with pytest.raises(DatasetError):  # not skipped: the run stops
        empty.write_text("", encoding="utf-8")
        run_shards(shards, tmp_path / "out", _reading_work, settings={})


def test_an_excluded_folder_holds_no_shard(tmp_path):
    _write_shards(tmp_path / "in", [2, 2])
    assert [s.name for s in list_shards(tmp_path / "in", exclude=tmp_path / "in" / "sub")] == ["part-0.jsonl"]


def test_the_output_folder_must_not_hold_the_input(tmp_path):
    _write_shards(tmp_path / "in", [2])
    with pytest.raises(ValueError, match="inside the output folder"):
        run_shards(list_shards(tmp_path / "in"), tmp_path / "in", _reading_work, settings={})
    with pytest.raises(ValueError, match="inside the output folder"):
        run_shards(list_shards(tmp_path / "in"), tmp_path, _reading_work, settings={})


def test_work_must_return_a_shard_output(tmp_path):
    _write_shards(tmp_path / "in", [2])
    with pytest.raises(TypeError, match="returned DataFrame, expected a ShardOutput"):
        run_shards(list_shards(tmp_path / "in"), tmp_path / "out", lambda s: pd.DataFrame(), settings={})
    assert not (tmp_path / "out" / "part-0.parquet").exists()


def test_importing_the_package_loads_neither_ray_nor_torch():
    code = ("import sys, trace_core.scale, trace_core.scale.score; "
            "sys.exit(sum(m in sys.modules for m in ('ray', 'torch', 'transformers', 'streamlit')))")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_prompt_text_files_are_shards_only_when_prompts_are_asked_for(tmp_path):
    from trace_core.scale import PROMPT_FORMATS

    (tmp_path / "a.txt").write_text("What is 2 + 2?\n")
    (tmp_path / "b.txt").write_text("Name a colour.\n")
    with pytest.raises(ValueError, match="holds no dataset file"):
        list_shards(str(tmp_path))
    found = list_shards(str(tmp_path), formats=PROMPT_FORMATS)
    assert [(s.name, s.format, s.output) for s in found] == [("a.txt", "txt", "a.parquet"),
                                                              ("b.txt", "txt", "b.parquet")]
