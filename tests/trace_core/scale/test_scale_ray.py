"""The Ray engine (trace_core.scale.ray_engine) on a local Ray of 2 CPUs: the same output folder as the one-process
run, byte for byte; complete shards never sent to Ray; a work's error raised on the driver; a worker killed mid-run
restarted and its shard redone; a shard whose worker dies every time reported failed; a driver killed mid-run
resumed; and ``trace-core score --engine ray`` on a tiny model equal to ``--engine stream``.

One local Ray serves the module (the engine uses a Ray already started in its process, as it would a cluster's
driver); the driver-kill test starts its own in a subprocess. Work functions are cheap (each shard read back as a
dataset), except the command line's, which loads the tiny test model once per worker."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from helpers import labeled_answers

ray = pytest.importorskip("ray", reason="ray is not installed: `make test-ray` installs requirements-ray.txt")

from trace_core.data import DatasetError, DatasetWarning, read_dataset, write_dataset  # noqa: E402
from trace_core.scale import (  # noqa: E402
    MANIFEST_FILE,
    ShardOutput,
    list_shards,
    ray_engine,  # noqa: E402
    run_shards,
)
from trace_core.scale.ray_engine import ray_session, run_shards_ray  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

# Ray's workers cannot import this test module by name: its functions travel by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """A local Ray of 2 CPUs for the module, started (and shut down) as the engine starts one."""
    with ray_session(workers=2) as workers:
        assert workers == 2 and ray.cluster_resources()["CPU"] == 2
        yield


def _write_shards(folder, sizes):
    """Shards of labeled answers with traces and a unique ``id`` per row (every other one in a subfolder)."""
    ids, start = [], 0
    for k, n in enumerate(sizes):
        frame, traces = labeled_answers(n, seed=k)
        frame["id"] = range(start, start + n)
        ids.extend(frame["id"].tolist())
        start += n
        target = folder / (f"part-{k}.jsonl" if k % 2 == 0 else f"sub/part-{k}.jsonl")
        target.parent.mkdir(parents=True, exist_ok=True)
        write_dataset(frame, target, traces=traces)
    return ids


def reading_work(shard):
    dataset = read_dataset(shard.path, require_label=False)
    return ShardOutput(frame=dataset.frame, traces=dataset.traces, n_read=dataset.n_read, errors=dataset.errors)


def _folder(out):
    """Every file of an output folder and its bytes."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _ids(out):
    manifest = json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8"))
    return [i for e in manifest["entries"] for i in pd.read_parquet(out / e["output"])["id"].tolist()]


def _stream_run(tmp_path, work=reading_work, **options):
    fresh = tmp_path / "stream"
    run_shards(list_shards(tmp_path / "in"), fresh, work, settings={"kind": "read"}, command="test", **options)
    return _folder(fresh)


def test_a_ray_run_writes_what_the_one_process_run_writes_and_a_rerun_skips_without_ray(tmp_path, monkeypatch):
    ids = _write_shards(tmp_path / "in", [4, 6, 5, 3])
    seen = []
    summary = run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", reading_work, settings={"kind": "read"},
                             command="test", on_shard=lambda r, i, n: seen.append((r.status, i, n)))
    assert summary.sentence() == "4 shards: 4 written, 0 already complete; 18 rows read: 18 kept, 0 rejected"
    assert sorted(seen) == [("done", i, 4) for i in (1, 2, 3, 4)]
    assert [r.shard.name for r in summary.results] == [s.name for s in list_shards(tmp_path / "in")]
    assert _folder(tmp_path / "out") == _stream_run(tmp_path)  # outputs, entries and manifest, byte for byte
    assert sorted(_ids(tmp_path / "out")) == sorted(ids)

    def no_ray(**kwargs):
        raise AssertionError("every shard is complete: Ray is not needed")

    monkeypatch.setattr(ray_engine, "ray_session", no_ray)
    again = run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", reading_work, settings={"kind": "read"},
                           command="test")
    assert (again.done, again.skipped) == (0, 4) and _folder(tmp_path / "out") == _stream_run(tmp_path)


def test_rejected_rows_and_an_unreadable_shard_come_back_as_in_one_process(tmp_path):
    _write_shards(tmp_path / "in", [3])
    (tmp_path / "in" / "bad.jsonl").write_text('{"prompt": "a", "answer": "x", "label": 1}\n'
                                               '{"prompt": "b", "answer": "y", "label": "maybe"}\n', encoding="utf-8")
    (tmp_path / "in" / "empty.jsonl").write_text("", encoding="utf-8")
    seen = {}
    summary = run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", reading_work, settings={"kind": "read"},
                             command="test", skip_errors=(DatasetError,),
                             on_shard=lambda r, i, n: seen.setdefault(r.shard.name, r))
    assert seen["bad.jsonl"].problems[0].startswith("bad.jsonl: row 2: label: ")
    assert seen["bad.jsonl"].entry.rejected[0]["row"] == 2
    assert seen["empty.jsonl"].status == "failed" and [r.shard.name for r in summary.failed] == ["empty.jsonl"]
    with pytest.warns(DatasetWarning):
        assert _folder(tmp_path / "out") == _stream_run(tmp_path, skip_errors=(DatasetError,))


def failing_work(shard):
    if shard.name == "part-2.jsonl":
        raise KeyError("no such column in part-2")
    return reading_work(shard)


def test_an_error_of_the_work_is_raised_on_the_driver_and_a_rerun_finishes(tmp_path):
    _write_shards(tmp_path / "in", [2, 2, 2])
    with pytest.raises(KeyError, match="no such column in part-2"):
        run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", failing_work, settings={"kind": "read"},
                       command="test")
    assert not (tmp_path / "out" / "part-2.parquet").exists() and not (tmp_path / "out" / MANIFEST_FILE).exists()
    run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", reading_work, settings={"kind": "read"},
                   command="test")
    assert _folder(tmp_path / "out") == _stream_run(tmp_path)


def killing_work(shard):
    """Kills its own worker process (SIGKILL: no cleanup) on ``part-2.jsonl``, the first time only, or every time
    when the marker's folder says so."""
    marker = shard.path.parent.parent / "killed"
    if shard.name == "part-2.jsonl" and (not marker.exists() or (marker.parent / "always").exists()):
        marker.write_text(str(os.getpid()), encoding="utf-8")
        os.kill(os.getpid(), signal.SIGKILL)
    return reading_work(shard)


def test_a_worker_killed_mid_run_is_restarted_and_its_shard_redone(tmp_path):
    ids = _write_shards(tmp_path / "in", [4, 6, 5, 3])
    summary = run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", killing_work, settings={"kind": "read"},
                             command="test")
    assert (tmp_path / "killed").exists()  # the worker did die
    assert (summary.done, summary.failed) == (4, [])
    got = _ids(tmp_path / "out")
    assert sorted(got) == sorted(ids) and len(got) == len(set(got))  # every input row exactly once
    assert _folder(tmp_path / "out") == _stream_run(tmp_path)


def test_a_shard_whose_worker_dies_every_time_fails_alone_and_runs_again_next_time(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_engine, "RETRIES", 1)
    _write_shards(tmp_path / "in", [2, 3, 4])
    (tmp_path / "always").touch()
    summary = run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", killing_work, settings={"kind": "read"},
                             command="test")
    [failed] = summary.failed
    assert failed.shard.name == "part-2.jsonl" and "its Ray worker died 2 times on it" in failed.error
    assert summary.done == 2
    manifest = json.loads((tmp_path / "out" / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert list(manifest["failed"]) == ["part-2.jsonl"] and manifest["shards"] == 2
    (tmp_path / "always").unlink()
    again = run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", reading_work, settings={"kind": "read"},
                           command="test")
    assert (again.done, again.skipped, again.failed) == (1, 2, [])
    assert _folder(tmp_path / "out") == _stream_run(tmp_path)


# The driver of the next test, in its own process with its own local Ray: its work stops on one shard (after saying
# so in a marker file) until the test kills the driver.
DRIVER = '''
import sys
import time

from trace_core.data import read_dataset
from trace_core.scale import ShardOutput, list_shards
from trace_core.scale.ray_engine import run_shards_ray


def work(shard):
    if shard.name == "sub/part-3.jsonl":
        (shard.path.parents[2] / "marker").write_text("working", encoding="utf-8")  # IN/sub/x -> IN's folder
        time.sleep(120)
    dataset = read_dataset(shard.path, require_label=False)
    return ShardOutput(frame=dataset.frame, traces=dataset.traces, n_read=dataset.n_read, errors=dataset.errors)


if __name__ == "__main__":
    run_shards_ray(list_shards(sys.argv[1]), sys.argv[2], work, settings={"kind": "read"}, command="test", workers=2)
'''


def _wait_for(path, process, seconds):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, f"{path.name} did not appear in {seconds} s"
        time.sleep(0.2)


def test_resume_after_the_driver_is_killed_mid_run(tmp_path):
    ids = _write_shards(tmp_path / "in", [4, 6, 5, 3, 2])
    script = tmp_path / "driver.py"
    script.write_text(DRIVER, encoding="utf-8")
    marker = tmp_path / "marker"
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path / "in"), str(tmp_path / "out")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait_for(marker, driver, 120)
        driver.send_signal(signal.SIGKILL)  # the driver only: its local Ray goes down with it
        assert driver.wait(timeout=30) == -signal.SIGKILL
    finally:
        time.sleep(1)
        # whatever of its Ray outlived it (nothing, normally), so that no old worker writes into the rerun
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.stderr.close()
    assert not (tmp_path / "out" / MANIFEST_FILE).exists() and not (tmp_path / "out" / "sub__part-3.parquet").exists()

    summary = run_shards_ray(list_shards(tmp_path / "in"), tmp_path / "out", reading_work, settings={"kind": "read"},
                             command="test")
    assert summary.done >= 1 and summary.done + summary.skipped == 5
    got = _ids(tmp_path / "out")
    assert sorted(got) == sorted(ids) and len(got) == len(set(got))  # every input row exactly once
    assert _folder(tmp_path / "out") == _stream_run(tmp_path)


# --- the command line on the tiny model ---------------------------------------------------------------------------

def test_score_with_the_ray_engine_writes_what_the_stream_engine_writes(tmp_path, tiny_model_dirs, capsys,
                                                                       monkeypatch):
    import torch

    # A Ray worker of one CPU runs torch on one thread; so does the stream run here, or the last bit of a float may
    # differ (a sum's order follows the thread count), which no engine can help.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _score_both_ways(tmp_path, str(tiny_model_dirs["gpt2"]), capsys, monkeypatch)
    finally:
        torch.set_num_threads(threads)


def _score_both_ways(tmp_path, model, capsys, monkeypatch):
    from trace_core.cli import main

    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    pd.DataFrame({"prompt": ["Q: 2 + 2 =", "Q: 3 + 4 ="], "answer": [" 4", " 7"], "id": [0, 1]}).to_json(
        folder / "a.jsonl", orient="records", lines=True)
    pd.DataFrame({"prompt": ["The capital of France is"], "answer": [" Paris"], "id": [2]}).to_json(
        folder / "sub" / "b.jsonl", orient="records", lines=True)
    (folder / "c.jsonl").write_text('{"prompt": "Q: 1 + 1 =", "answer": " 2", "id": 3}\n'
                                    '{"prompt": "", "answer": " x", "id": 4}\n', encoding="utf-8")
    command = ["score", str(folder), "--model", model, "--alternatives", "3", "--out", "out"]
    errs = {}
    for engine, extra in (("stream", []), ("ray", ["--engine", "ray", "--workers", "2"])):
        (tmp_path / engine).mkdir()
        monkeypatch.chdir(tmp_path / engine)  # the same command line, --out relative to each folder
        assert main([*command, *extra]) == 0
        errs[engine] = capsys.readouterr().err
    # outputs, entries and manifest byte for byte: the recorded command leaves the engine options out
    assert _folder(tmp_path / "ray" / "out") == _folder(tmp_path / "stream" / "out")
    summary = "3 shards: 3 written, 0 already complete; 5 rows read: 4 kept, 1 rejected; manifest: out/manifest.json"
    assert errs["stream"].splitlines()[-1] == summary == errs["ray"].splitlines()[-1]
    assert "rejected: c.jsonl: row 2: prompt: " in errs["ray"]
    assert not [line for line in errs["ray"].splitlines() if line.startswith("warning")], errs["ray"]
    assert main([*command, "--engine", "ray", "--quiet"]) == 0
    assert capsys.readouterr().err == ""  # every shard complete: nothing to say, no Ray started
