"""Starting a real vLLM server for the engine tests (shared by their fixtures)."""

from __future__ import annotations

import pytest

from bench.server_throughput import start_vllm, stop_vllm, vllm_python_from_env


def served(model_dir, tmp_path_factory, *, timeout: float = 360.0):
    """A generator fixture's body: the base URL of a vLLM server on `model_dir` (``--max-logprobs -1``), stopped
    when the fixture ends."""
    log = tmp_path_factory.mktemp("vllm-log") / "server.log"
    try:
        proc, url = start_vllm(vllm_python_from_env(), model_dir, log, timeout=timeout)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield url
    finally:
        stop_vllm(proc)
