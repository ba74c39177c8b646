"""``trace-core score --engine``: the options checked before any work, a clear line when Ray is missing, a model
loader that pickles without the API key, the recorded command without the engine options, and how the Ray engine
starts or joins Ray (a stand-in for ray: none of these tests needs it installed)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pandas as pd
import pytest

from trace_core.cli import build_parser, common, main
from trace_core.cli.score_shards import ModelLoader, recorded_command
from trace_core.scale import ShardOutput, list_shards, ray_engine, run_shards
from trace_core.scale.ray_engine import INSTALL_HINT, RayNotInstalledError, ray_session, run_shards_ray
from trace_core.scale.score import ShardScorer


@pytest.fixture
def shards(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a", "b"):
        pd.DataFrame({"prompt": ["Q"], "answer": [" A"]}).to_json(folder / f"{name}.jsonl", orient="records",
                                                                   lines=True)
    return folder


@pytest.fixture
def no_ray(monkeypatch):
    """``import ray`` fails here, as where it is not installed."""
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.data", None)


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_without_ray_the_ray_engine_is_one_line_saying_how_to_install_it(shards, tmp_path, no_ray, capsys,
                                                                          monkeypatch):
    monkeypatch.setattr(common, "load_model", lambda args: pytest.fail("work started"))
    assert main(["score", str(shards), "--model", "m", "--out", str(tmp_path / "out"), "--engine", "ray"]) == 1
    line = _one_line_error(capsys)
    assert line.startswith("error: --engine ray: the Ray engine needs Ray Data") and INSTALL_HINT in line
    assert INSTALL_HINT == "pip install 'trace-core[ray]'"


@pytest.mark.parametrize("extra, words", [
    (["--workers", "2"], "--workers: only with --engine ray"),
    (["--ray-address", "ray://h:10001"], "--ray-address: only with --engine ray"),
    (["--engine", "ray", "--workers", "0"], "--workers: expected a whole number >= 1, got 0"),
])
def test_engine_options_are_checked_before_any_work(shards, tmp_path, extra, words, capsys, monkeypatch):
    monkeypatch.setattr(common, "load_model", lambda args: pytest.fail("work started"))
    assert main(["score", str(shards), "--model", "m", "--out", str(tmp_path / "out"), *extra]) == 1
    assert _one_line_error(capsys) == f"error: {words}"
    assert not (tmp_path / "out").exists()


def test_credentials_in_the_server_address_never_travel_to_ray(shards, tmp_path, capsys):
    assert main(["score", str(shards), "--server", "http://user:hunter2@127.0.0.1:9", "--server-model", "m",
                 "--out", str(tmp_path / "out"), "--engine", "ray"]) == 1
    line = _one_line_error(capsys)
    assert line.startswith("error: --server: ") and "credentials" in line and "hunter2" not in line


def test_the_ray_engine_takes_a_folder_or_pattern_not_one_file(shards, tmp_path, capsys):
    assert main(["score", str(shards / "a.jsonl"), "--model", "m", "--out", str(tmp_path / "o.jsonl"),
                 "--engine", "ray"]) == 1
    assert "DATA is one file" in _one_line_error(capsys)


def test_the_model_loader_pickles_without_the_api_key_and_loads_as_the_command_line_does(monkeypatch):
    monkeypatch.setenv("TRACE_TEST_KEY", "sk-test-very-secret-value")
    args = build_parser().parse_args(["score", "d", "--out", "o", "--server", "http://127.0.0.1:9", "--server-model",
                                      "m", "--api-key-env", "TRACE_TEST_KEY", "--engine", "ray"])
    loader = ModelLoader.from_args(args)
    scorer = ShardScorer(loader)
    data = pickle.dumps(scorer)
    assert b"sk-test-very-secret-value" not in data and b"TRACE_TEST_KEY" in data
    assert pickle.loads(data).settings() == scorer.settings()
    seen = []
    monkeypatch.setattr(common, "load_model", lambda a: seen.append(a) or "model")
    assert pickle.loads(pickle.dumps(loader))() == "model"
    assert (seen[0].server, seen[0].api_key_env, seen[0].alternatives) == ("http://127.0.0.1:9", "TRACE_TEST_KEY", 5)
    scorer._model = "loaded"
    assert pickle.loads(pickle.dumps(scorer))._model is None  # a worker loads its own


def test_the_recorded_command_leaves_the_engine_options_out():
    argv = ["score", "in", "--engine", "ray", "--model", "m", "--workers=4", "--out", "o", "--ray-address",
            "ray://h:10001", "--quiet"]
    assert recorded_command(argv) == "trace-core score in --model m --out o --quiet"
    assert recorded_command(["score", "in", "--engine=stream"]) == "trace-core score in"


# --- how the engine starts or joins Ray (a stand-in for the ray module) ---------------------------------------------

class FakeRay:
    def __init__(self, initialized=False, cpus=8):
        self.initialized, self.cpus, self.calls = initialized, cpus, []

    def is_initialized(self):
        return self.initialized

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))
        self.initialized = True

    def shutdown(self):
        self.calls.append(("shutdown", {}))

    def cluster_resources(self):
        return {"CPU": float(self.cpus)}


@pytest.fixture
def fake_ray(monkeypatch):
    fake = FakeRay()
    monkeypatch.setattr(ray_engine, "import_ray", lambda: fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return fake


def test_a_local_ray_gets_the_workers_as_cpus_no_dashboard_and_is_shut_down(fake_ray):
    with ray_session(workers=3) as workers:
        assert workers == 3
    [(verb, kwargs), shutdown] = fake_ray.calls
    assert verb == "init" and kwargs["address"] == "local" and kwargs["num_cpus"] == 3
    assert kwargs["include_dashboard"] is False and shutdown[0] == "shutdown"


@pytest.mark.parametrize("asked, sent", [(None, "0"), ("1", "1")])
def test_a_local_ray_sends_no_usage_statistics_unless_asked(fake_ray, monkeypatch, asked, sent):
    import os

    if asked is None:
        monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    else:
        monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", asked)
    with ray_session(workers=1):
        assert os.environ["RAY_USAGE_STATS_ENABLED"] == sent


def test_a_local_ray_defaults_to_every_cpu(fake_ray, monkeypatch):
    monkeypatch.setattr(ray_engine.os, "cpu_count", lambda: 6)
    with ray_session() as workers:
        assert workers == 8  # what Ray reports having
    assert fake_ray.calls[0][1]["num_cpus"] == 6


@pytest.mark.parametrize("given, environment", [("ray://head:10001", None), (None, "head:6379")])
def test_a_cluster_is_joined_by_address_or_ray_address(fake_ray, monkeypatch, given, environment):
    if environment:
        monkeypatch.setenv("RAY_ADDRESS", environment)
    with ray_session(address=given) as workers:
        assert workers == 8  # the cluster's CPUs
    verb, kwargs = fake_ray.calls[0]
    assert kwargs["address"] == (given or environment) and "num_cpus" not in kwargs
    assert fake_ray.calls[-1][0] == "shutdown"


def test_a_ray_already_started_is_used_and_left_running(fake_ray):
    fake_ray.initialized = True
    with ray_session(workers=2) as workers:
        assert workers == 2
    assert fake_ray.calls == []


# --- without Ray installed -----------------------------------------------------------------------------------------

def _work(shard):
    frame = pd.read_json(shard.path, lines=True)
    return ShardOutput(frame=frame, traces=None, n_read=len(frame))


def test_complete_shards_need_no_ray_and_others_say_how_to_install_it(shards, tmp_path, no_ray):
    run_shards(list_shards(shards), tmp_path / "out", _work, settings={})
    summary = run_shards_ray(list_shards(shards), tmp_path / "out", _work, settings={})
    assert (summary.done, summary.skipped) == (0, 2)
    (shards / "c.jsonl").write_text('{"prompt": "Q", "answer": " A"}\n', encoding="utf-8")
    with pytest.raises(RayNotInstalledError, match=r"pip install 'trace-core\[ray\]'"):
        run_shards_ray(list_shards(shards), tmp_path / "out", _work, settings={})


def test_importing_the_library_and_the_command_line_loads_no_ray():
    code = ("import sys, trace_core, trace_core.scale, trace_core.scale.ray_engine, trace_core.cli, "
            "trace_core.cli.score_shards; sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


@pytest.mark.ray
def test_the_stand_in_asks_what_ray_takes():
    """The keyword arguments the engine gives ray.init are ray.init's (when ray is installed)."""
    import inspect

    ray = pytest.importorskip("ray", reason="ray is not installed: `make test-ray` installs requirements-ray.txt")
    assert {"address", "num_cpus", "include_dashboard", "logging_level", "log_to_driver"} <= set(
        inspect.signature(ray.init).parameters)
    strategy = inspect.signature(ray.data.ActorPoolStrategy).parameters
    assert {"size", "max_tasks_in_flight_per_actor"} <= set(strategy)
