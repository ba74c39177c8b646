"""Shard folders and manifests that lie: an output folder read back as input, an input shard removed, linked folders
and link loops, links out of the folder, manifest entries naming another file, a resumed --coverage after an input
changed, two runs on one folder, a shard name too long to write, and secrets in failure reasons. Each is either read
as what it truly holds or refused in one line, never believed silently."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest
from helpers import synthetic_trace_objects

from trace_core.calibration.calibrators import TracePlus
from trace_core.cli import main
from trace_core.data import read_dataset, write_dataset
from trace_core.scale import (
    ENTRY_FOLDER,
    LOCK_FILE,
    MANIFEST_FILE,
    ShardOutput,
    list_shards,
    read_entry,
    run_shards,
    stored_result,
)

SIZES = (100, 100, 100)


@pytest.fixture
def data(tmp_path):
    """``in/p0..p2.jsonl`` (labeled answers with traces) and ``cal.json``, a TRACE+ calibrator."""
    traces, y = synthetic_trace_objects(sum(SIZES), seed=7)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    (tmp_path / "in").mkdir()
    start = 0
    for k, n in enumerate(SIZES):
        write_dataset(frame.iloc[start:start + n].reset_index(drop=True), tmp_path / "in" / f"p{k}.jsonl",
                      traces=traces[start:start + n])
        start += n
    (tmp_path / "cal.json").write_text(TracePlus().fit(traces[:150], y[:150]).to_json())
    return tmp_path


def _flag(data, out, *rule, source="in"):
    return main(["flag", str(data / source), "--calibrator", str(data / "cal.json"), *(rule or ("--threshold", "0.5")),
                 "--out", str(data / out), "--quiet"])


def _reading_work(shard):
    dataset = read_dataset(shard.path, require_label=False)
    return ShardOutput(frame=dataset.frame, traces=dataset.traces, n_read=dataset.n_read, errors=dataset.errors)


# --- 1. an output folder read as input ----------------------------------------------------------------------------

def test_the_readme_chain_flag_then_evaluate_the_output_folder(data, capsys):
    assert _flag(data, "out") == 0
    assert (data / "out" / MANIFEST_FILE).is_file()
    assert [s.name for s in list_shards(data / "out")] == ["p0.parquet", "p1.parquet", "p2.parquet"]
    capsys.readouterr()
    assert main(["evaluate", str(data / "out")]) == 0, capsys.readouterr().err
    assert f"{sum(SIZES):,} rows read from 3 shards" in capsys.readouterr().err


def test_a_pattern_over_an_output_folder_takes_neither_the_manifest_nor_the_entries(data):
    assert _flag(data, "out") == 0
    with pytest.raises(ValueError, match="matches nothing|holds no dataset file"):
        list_shards(str(data / "out" / "**" / "*.json"))


def test_an_output_folder_that_is_the_input_folder_says_so(data, capsys):
    """It used to say the folder "matches nothing" (every file lay in the excluded output folder)."""
    assert _flag(data, "in") == 1
    err = capsys.readouterr().err
    assert "the output folder" in err and "is the input folder" in err and "matches nothing" not in err, err
    assert main(["flag", str(data / "in" / "*.jsonl"), "--calibrator", str(data / "cal.json"), "--threshold", "0.5",
                 "--out", str(data), "--quiet"]) == 1  # an output folder above the input: named, not "nothing"
    err = capsys.readouterr().err
    assert "is inside the output folder" in err and "matches nothing" not in err, err
    assert sorted(p.name for p in (data / "in").iterdir()) == ["p0.jsonl", "p1.jsonl", "p2.jsonl"]


# --- 2. an input shard removed ------------------------------------------------------------------------------------

def test_the_output_of_a_removed_input_shard_is_not_read_back(data, capsys):
    assert _flag(data, "out") == 0
    (data / "in" / "p2.jsonl").unlink()
    capsys.readouterr()
    assert _flag(data, "out") == 0
    err = capsys.readouterr().err
    assert "p2.parquet" in err and "not in the manifest" in err  # said in one line by the run
    manifest = json.loads((data / "out" / MANIFEST_FILE).read_text())
    assert manifest["rows_read"] == SIZES[0] + SIZES[1]
    said: list[str] = []
    assert [s.name for s in list_shards(data / "out", on_skip=said.append)] == ["p0.parquet", "p1.parquet"]
    assert len(said) == 1 and "p2.parquet" in said[0]
    assert main(["evaluate", str(data / "out")]) == 0
    err = capsys.readouterr().err
    assert f"{manifest['rows_read']:,} rows read from 2 shards" in err and "p2.parquet" in err


# --- 3. links -----------------------------------------------------------------------------------------------------

def _touch(path, text="{}"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_a_recursive_pattern_does_not_follow_a_linked_folder(tmp_path):
    _touch(tmp_path / "in" / "a" / "x.jsonl")
    os.symlink(tmp_path / "in" / "a", tmp_path / "in" / "b", target_is_directory=True)
    assert [s.name for s in list_shards(str(tmp_path / "in" / "**" / "*.jsonl"))] == ["a/x.jsonl"]
    assert [s.name for s in list_shards(tmp_path / "in")] == ["a/x.jsonl"]


def test_a_link_loop_ends_and_reads_each_file_once(tmp_path):
    _touch(tmp_path / "in" / "a" / "x.jsonl")
    os.symlink(tmp_path / "in", tmp_path / "in" / "a" / "loop", target_is_directory=True)
    for spec in (str(tmp_path / "in" / "**" / "*.jsonl"), str(tmp_path / "in" / "**"), tmp_path / "in"):
        assert [s.name for s in list_shards(spec)] == ["a/x.jsonl"]


def test_a_linked_file_out_of_the_folder_is_refused_and_never_read(data, monkeypatch, capsys):
    key = "sk-linkedsecret0123456789"
    (data / ".env").write_text(f"openai_api_key={key}\n")
    os.symlink(data / ".env", data / "in" / "notes.jsonl")
    (data / "in" / ".env").write_text(f"openai_api_key={key}\n")
    os.symlink(".env", data / "in" / "notes2.jsonl")  # inside the folder, but hidden: not data either
    os.symlink(data / "in" / "p0.jsonl", data / "in" / "p0-again.jsonl")  # inside: a second name for p0
    said: list[str] = []
    assert [s.name for s in list_shards(data / "in", on_skip=said.append)] == ["p0.jsonl", "p1.jsonl", "p2.jsonl"]
    assert any("notes.jsonl" in line and "outside" in line for line in said)
    assert any("notes2.jsonl" in line and "not a dataset file" in line for line in said)
    assert any("p0-again.jsonl" in line and "read once" in line for line in said)
    assert _flag(data, "out") == 0
    err = capsys.readouterr().err
    assert "notes.jsonl" in err and key not in err and "sk-" not in err
    manifest = (data / "out" / MANIFEST_FILE).read_text()
    assert "notes.jsonl" not in manifest and key not in manifest


# --- 4. manifest entries naming another file ----------------------------------------------------------------------

@pytest.mark.parametrize("elsewhere", ["p1.parquet", "../stolen.parquet"])
def test_an_entry_naming_another_output_is_disregarded_and_its_shard_redone(data, elsewhere):
    shards = list_shards(data / "in")
    out = data / "out"
    run_shards(shards, out, _reading_work, settings={"kind": "read"})
    entry_file = out / ENTRY_FOLDER / "p0.json"
    entry = json.loads(entry_file.read_text())
    target = out / elsewhere
    if not target.exists():
        target.write_bytes((out / "p1.parquet").read_bytes())
    other = read_entry(out, "p1.parquet")
    entry.update(output=elsewhere, output_size=other.output_size, output_sha256=other.output_sha256)
    entry_file.write_text(json.dumps(entry))
    (out / "p0.parquet").write_bytes(b"not the output of p0")
    assert stored_result(shards[0], out, settings={"kind": "read"}) is None
    notes: list[str] = []
    again = run_shards(shards, out, _reading_work, settings={"kind": "read"},
                       on_shard=lambda result, i, n: notes.extend(result.notes))
    assert (again.done, again.skipped) == (1, 2)
    assert any("p0.jsonl" in note and elsewhere in note and "disregarded" in note for note in notes)
    assert read_entry(out, "p0.parquet").output == "p0.parquet"
    assert len(pd.read_parquet(out / "p0.parquet")) == SIZES[0]


# --- 5. a decision over every shard, resumed ----------------------------------------------------------------------

@pytest.mark.parametrize("rule", [("--coverage", "0.6"), ("--target-risk", "0.2")])
def test_a_resumed_run_after_an_input_changed_equals_a_clean_run(data, rule):
    assert _flag(data, "out", *rule) == 0
    before = {k: pd.read_parquet(data / "out" / f"p{k}.parquet")["flagged"].tolist() for k in (0, 2)}
    changed = read_dataset(data / "in" / "p1.jsonl")
    keep = changed.frame["label"].to_numpy() == 1  # the shard's wrong answers gone: the cut over all moves
    write_dataset(changed.frame[keep].drop(columns=[changed.row_column]).reset_index(drop=True),
                  data / "in" / "p1.jsonl", traces=[t for t, k in zip(changed.traces, keep, strict=True) if k])
    assert _flag(data, "out", *rule) == 0  # resumed
    assert _flag(data, "clean", *rule) == 0
    for k in range(3):
        resumed, clean = (pd.read_parquet(data / folder / f"p{k}.parquet") for folder in ("out", "clean"))
        pd.testing.assert_frame_equal(resumed, clean)
    assert any(pd.read_parquet(data / "clean" / f"p{k}.parquet")["flagged"].tolist() != before[k] for k in (0, 2))
    settings = (json.loads((data / f / MANIFEST_FILE).read_text())["settings"] for f in ("out", "clean"))
    assert next(settings) == next(settings)


def test_a_rerun_with_nothing_changed_decides_nothing_again(data, capsys):
    assert _flag(data, "out", "--coverage", "0.6") == 0
    capsys.readouterr()
    assert main(["flag", str(data / "in"), "--calibrator", str(data / "cal.json"), "--coverage", "0.6",
                 "--out", str(data / "out")]) == 0
    err = capsys.readouterr().err
    assert err.count("already complete, skipped") == 3 and "for the answers' probabilities" not in err


# --- 6. two runs on one folder ------------------------------------------------------------------------------------

HOLDER = """
import sys
from trace_core.scale.lock import folder_lock
with folder_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_run_on_a_folder_in_use_is_refused_and_a_dead_runs_lock_taken_over(data, capsys):
    out = data / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _flag(data, "out") == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"process {holder.pid}" in err and "another trace-core run" in err
        assert not list(out.glob("*.parquet")) and not (out / MANIFEST_FILE).exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert (out / LOCK_FILE).read_text().strip() == str(holder.pid)  # left by the killed run
    assert _flag(data, "out") == 0  # taken over
    assert not (out / LOCK_FILE).exists() and len(list(out.glob("*.parquet"))) == 3


def test_the_lock_is_held_while_a_run_works_and_removed_when_it_fails(data):
    out = data / "out"
    seen = []

    def work(shard):
        seen.append((out / LOCK_FILE).read_text().strip())
        raise RuntimeError("the work broke")

    with pytest.raises(RuntimeError, match="the work broke"):
        run_shards(list_shards(data / "in"), out, work, settings={})
    assert seen == [str(os.getpid())] and not (out / LOCK_FILE).exists()
    (data / "bad").mkdir()
    (data / "bad" / "x.jsonl").write_text('{"question": "q"}\n')
    assert _flag(data, "out", source="bad") == 1  # a command's error: the lock goes too
    assert not (out / LOCK_FILE).exists()


# --- 7. a shard name too long to write ----------------------------------------------------------------------------

def test_an_output_name_too_long_is_refused_before_any_work(data, capsys):
    long_name = "z" * 243 + ".jsonl"
    (data / "in" / long_name).write_bytes((data / "in" / "p0.jsonl").read_bytes())
    assert _flag(data, "out") == 1
    err = capsys.readouterr().err
    assert "zzzz" in err and "output name" in err and "bytes long" in err and len(err.splitlines()) == 1
    assert not list((data / "out").glob("*.parquet"))  # the shards before it in order were not worked either


# --- 8. secrets in failure reasons --------------------------------------------------------------------------------

@pytest.mark.parametrize("variable", ["OPENAI_API_KEY", "MY_SERVER_KEY"])
def test_a_key_quoted_by_a_failure_reason_is_in_neither_stderr_nor_the_manifest(tmp_path, monkeypatch, capsys,
                                                                                 variable):
    key = "zzkeyvalue0123456789"  # lower case: the reader names the columns in lower case
    monkeypatch.setenv(variable, key)
    if variable != "OPENAI_API_KEY":
        monkeypatch.setenv("TRACE_SERVER_KEYS", f"http://127.0.0.1:9={variable}")
    traces, y = synthetic_trace_objects(60, seed=3)
    (tmp_path / "cal.json").write_text(TracePlus().fit(traces, y).to_json())
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.csv").write_text(f"question,{key}\nq,a\n")
    assert main(["flag", str(tmp_path / "in"), "--calibrator", str(tmp_path / "cal.json"), "--threshold", "0.5",
                 "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "notes.csv" in err and "failed" in err and key not in err
    manifest = (tmp_path / "out" / MANIFEST_FILE).read_text()
    assert "notes.csv" in json.loads(manifest)["failed"] and key not in manifest and "***" in manifest


def test_a_shard_made_by_hand_with_an_output_path_is_refused(data):
    [shard, *_] = list_shards(data / "in")
    escaping = dataclasses.replace(shard, output="../escaped.parquet")
    with pytest.raises(ValueError, match="not a file name in the output folder"):
        run_shards([escaping], data / "out", _reading_work, settings={})
    assert not (data / "escaped.parquet").exists()
