"""torch's thread count: the CPUs a process really has (affinity, cgroup v1 and v2 quotas, from fixture files) and
the count a model load applies (explicit, TRACE_THREADS, OMP_NUM_THREADS left to act, automatic)."""

from __future__ import annotations

import os

import pytest

from trace_core.record import threads
from trace_core.record.threads import (
    SMALL_MODEL_PARAMETERS,
    automatic_threads,
    available_cpus,
    cgroup_cpu_limit,
    choose_threads,
)
from trace_core.settings import SettingError


def _four() -> set[int]:
    return {0, 1, 2, 3}


def _v2(tmp_path, *, group: str = "/user.slice/app", files: dict[str, str]) -> dict:
    """A cgroup v2 layout: the process in ``group``, ``cpu.max`` written at each folder of ``files`` (relative to the
    root; "" is the root itself)."""
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::{group}\n", encoding="ascii")
    root = tmp_path / "fs"
    for folder, text in files.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "cpu.max").write_text(text + "\n", encoding="ascii")
    root.mkdir(exist_ok=True)
    return {"proc_cgroup": proc, "cgroup_root": root}


def _v1(tmp_path, quota: str, period: str = "100000", *, mount: str = "cpu,cpuacct") -> dict:
    """A cgroup v1 layout (hybrid: an empty unified line too), the quota in the process's group."""
    proc = tmp_path / "cgroup"
    proc.write_text("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n", encoding="ascii")
    group = tmp_path / "fs" / mount / "docker" / "abc"
    group.mkdir(parents=True)
    (group / "cpu.cfs_quota_us").write_text(quota + "\n", encoding="ascii")
    (group / "cpu.cfs_period_us").write_text(period + "\n", encoding="ascii")
    (tmp_path / "fs" / "memory").mkdir()
    return {"proc_cgroup": proc, "cgroup_root": tmp_path / "fs"}


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("150000 100000", 1),  # 1.5 CPUs: a second thread would be throttled half of each period
    ("max 100000", 4),  # no quota: the affinity
    ("200000 100000", 2),  # affinity 4, quota 2
    ("800000 100000", 4),  # a quota above the affinity does not add CPUs
    ("50000 100000", 1),  # half a CPU: still one thread
    ("garbage", 4),  # unreadable as a quota: left out, not guessed
])
def test_cgroup_v2_quota_caps_the_affinity(tmp_path, cpu_max, expected):
    paths = _v2(tmp_path, files={"user.slice/app": cpu_max})
    assert available_cpus(affinity=_four, **paths) == expected


def test_a_parent_groups_quota_limits_its_children(tmp_path):
    paths = _v2(tmp_path, files={"": "max 100000", "user.slice": "100000 100000", "user.slice/app": "max 100000"})
    assert cgroup_cpu_limit(**paths) == 1.0
    assert available_cpus(affinity=_four, **paths) == 1


def test_a_container_reads_its_own_root_when_its_group_path_is_the_hosts(tmp_path):
    # inside a container, /proc/self/cgroup may name the host's path while /sys/fs/cgroup is the container's group
    paths = _v2(tmp_path, group="/kubepods/pod1/abc", files={"": "300000 100000"})
    assert cgroup_cpu_limit(**paths) == 3.0
    assert available_cpus(affinity=lambda: set(range(16)), **paths) == 3


@pytest.mark.parametrize(("quota", "period", "expected"), [("300000", "100000", 3), ("-1", "100000", 8),
                                                           ("150000", "100000", 1), ("100000", "0", 8)])
def test_cgroup_v1_quota_over_period(tmp_path, quota, period, expected):
    paths = _v1(tmp_path, quota, period)
    assert available_cpus(affinity=lambda: set(range(8)), **paths) == expected


def test_cgroup_v1_under_a_cpu_only_mount(tmp_path):
    paths = _v1(tmp_path, "200000", mount="cpu")
    assert available_cpus(affinity=lambda: set(range(8)), **paths) == 2


def test_unreadable_files_fall_back_to_the_affinity_then_the_cpu_count(tmp_path):
    missing = {"proc_cgroup": tmp_path / "none", "cgroup_root": tmp_path / "none-either"}
    assert cgroup_cpu_limit(**missing) is None
    assert available_cpus(affinity=_four, **missing) == 4

    def refused() -> set[int]:
        raise OSError("no affinity here")

    assert available_cpus(affinity=refused, **missing) == (os.cpu_count() or 1)
    (tmp_path / "binary").write_bytes(b"\xff\xfe0::/\n")
    assert cgroup_cpu_limit(proc_cgroup=tmp_path / "binary", cgroup_root=tmp_path) is None


def test_this_process_never_gets_more_than_its_affinity():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity on this platform")
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


def test_automatic_threads_one_for_a_small_model_else_the_available_cpus(monkeypatch):
    assert automatic_threads(134_515_008, cpus=8) == 1
    assert automatic_threads(SMALL_MODEL_PARAMETERS, cpus=8) == 1
    assert automatic_threads(SMALL_MODEL_PARAMETERS + 1, cpus=8) == 8
    monkeypatch.setattr(threads, "available_cpus", lambda: 3)
    assert automatic_threads(7_000_000_000) == 3


@pytest.fixture
def no_thread_variables(monkeypatch):
    for name in ("TRACE_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_choose_threads_order_explicit_setting_user_variable_automatic(no_thread_variables):
    monkeypatch = no_thread_variables
    monkeypatch.setattr(threads, "available_cpus", lambda: 6)
    assert choose_threads(1_000) == 1
    assert choose_threads(10**9) == 6
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the user's choice: torch already follows it, left alone
    assert choose_threads(1_000) is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    assert choose_threads(1_000) is None
    monkeypatch.setenv("TRACE_THREADS", "2")  # the setting wins over OMP/MKL variables
    assert choose_threads(1_000) == 2
    assert choose_threads(1_000, threads=5) == 5  # an explicit count wins over everything, even above the CPUs
    assert choose_threads(1_000, threads=64) == 64


def test_choose_threads_refuses_bad_counts(no_thread_variables):
    with pytest.raises(ValueError, match="`threads` must be an int >= 1, got 0"):
        choose_threads(1_000, threads=0)
    with pytest.raises(TypeError, match="`threads`"):
        choose_threads(1_000, threads=2.0)
    no_thread_variables.setenv("TRACE_THREADS", "0")
    with pytest.raises(SettingError, match="TRACE_THREADS='0': expected a whole number from 1 to 4,096"):
        choose_threads(1_000)


@pytest.fixture
def torch_threads():
    """torch's thread count, restored after the test (it is process-wide)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def test_load_model_records_the_choice(tiny_model_dirs, torch_threads, no_thread_variables):
    from trace_core import load_model

    torch = torch_threads
    torch.set_num_threads(3)
    lm = load_model(tiny_model_dirs["gpt2"], device="cpu")  # a tiny model: one thread
    assert lm.threads == 1 and torch.get_num_threads() == 3  # the process keeps its count
    assert load_model(tiny_model_dirs["gpt2"], device="cpu", threads=2).threads == 2
    no_thread_variables.setenv("TRACE_THREADS", "3")
    assert load_model(tiny_model_dirs["gpt2"], device="cpu").threads == 3
    no_thread_variables.delenv("TRACE_THREADS")
    no_thread_variables.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(4)  # as if OMP_NUM_THREADS had been read at start: torch's own count is used
    assert load_model(tiny_model_dirs["gpt2"], device="cpu").threads == 4
    with pytest.raises(ValueError, match="`threads`"):
        load_model(tiny_model_dirs["gpt2"], device="cpu", threads=0)


def test_each_recording_call_runs_on_the_models_threads_then_gives_them_back(tiny_model_dirs, torch_threads,
                                                                             no_thread_variables):
    """generate, stream (on its own thread) and teacher forcing run the model on ``lm.threads``; the caller's count
    is back afterwards, so other torch work of the process (the semantic baselines' embedder) keeps its own."""
    from trace_core import DecodingConfig, generate_traces, load_model, score_answers
    from trace_core.record import stream_trace

    torch = torch_threads
    torch.set_num_threads(2)
    lm = load_model(tiny_model_dirs["gpt2"], device="cpu", threads=1)
    seen = []
    forward = lm.model.forward

    def counting(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return forward(*args, **kwargs)

    lm.model.forward = counting
    config = DecodingConfig(max_new_tokens=3)
    generate_traces(lm, ["Q: 2 + 2 =", "Q: 1 + 3 ="], config=config)
    list(stream_trace(lm, "Q: 2 + 2 =", config=config))
    score_answers(lm, ["Q: 2 + 2 ="], [" 4"])
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2


def test_the_cli_passes_threads_to_the_load(monkeypatch):
    from trace_core.cli import common
    from trace_core.cli.parser import build_parser

    seen = {}
    monkeypatch.setattr(common, "load_local_model", lambda name, **options: seen.update(options) or "model")
    args = build_parser().parse_args(["generate", "prompts.txt", "--out", "x.jsonl", "--model", "m", "--threads",
                                      "3"])
    assert common.load_model(args) == "model" and seen["threads"] == 3
    args = build_parser().parse_args(["score", "data.jsonl", "--out", "x.jsonl", "--model", "m"])
    common.load_model(args)
    assert seen["threads"] is None  # automatic
    # a sharded run's loader (what each shard, or each Ray worker, loads with) carries it too
    from trace_core.cli.score_shards import ModelLoader

    args = build_parser().parse_args(["score", "shards/", "--out", "out/", "--model", "m", "--threads", "2"])
    assert ModelLoader.from_args(args)() == "model" and seen["threads"] == 2
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["generate", "p.txt", "--out", "x.jsonl", "--model", "m", "--threads", bad])


def test_openmp_passive_wait_is_a_default_the_user_overrides(monkeypatch):
    from trace_core.settings import openmp_passive_wait

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    openmp_passive_wait()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice stays
    openmp_passive_wait()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_the_dashboard_sets_the_wait_policy_before_anything_imports_torch():
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[3] / "app" / "main.py").read_text(encoding="utf-8"))
    calls = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", None) == "openmp_passive_wait"]

    def top_names(node: ast.stmt) -> set[str]:
        if isinstance(node, ast.ImportFrom):
            return {(node.module or "").split(".")[0]}
        return {alias.name.split(".")[0] for alias in node.names} if isinstance(node, ast.Import) else set()

    # streamlit and the dashboard's own modules are imported after the call (neither imports torch at import)
    imports = [node.lineno for node in tree.body if top_names(node) & {"streamlit", "app", "torch"}]
    assert len(calls) == 1 and imports and calls[0] < min(imports)
