"""Starting a real vLLM server for the engine tests (shared by their fixtures)."""

from __future__ import annotations

import pytest

from bench.server_throughput import SERVED_NAME, start_vllm, stop_vllm, vllm_python_from_env


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


def connect(url, model_dir, **options):
    """``connect_server`` to the vLLM server at `url` serving `model_dir` (the folder's tokenizer, no API key)."""
    from trace_core import connect_server

    return connect_server(url, SERVED_NAME, tokenizer=str(model_dir), api_key_env=None, **options)
