"""Engine tests: a real vLLM server on a tiny random-weight GPT-2, compared with the local Hugging Face path.

They run only when ``TRACE_VLLM_PYTHON`` names the Python of an environment with vLLM (``make test-engine`` builds
one under ``~/.cache/trace-core`` and sets it); otherwise every test here is skipped with the reason. One server
serves the whole module (it takes minutes to start) and is always stopped, also when a test fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from serving import served

from bench.server_throughput import SERVED_NAME, save_tiny_gpt2, vllm_python_from_env, vllm_unavailable

_REASON: list[str | None] = []  # probed once per session: the probe starts a Python


def pytest_configure(config):
    config.addinivalue_line("markers", "engine: needs a real model server (vLLM); run by `make test-engine`")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    engine_items = [item for item in items if here in item.path.parents]
    if not engine_items:
        return
    if not _REASON:
        _REASON.append(vllm_unavailable(vllm_python_from_env()))
    for item in engine_items:
        item.add_marker(pytest.mark.engine)
        if _REASON[0]:
            item.add_marker(pytest.mark.skip(reason=_REASON[0]))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2-served"))


@pytest.fixture(scope="module")
def server_url(model_dir, tmp_path_factory, request):
    """The base URL of a vLLM server on `model_dir`, stopped after the module; a module whose model takes longer to
    load sets ``SERVER_START_TIMEOUT`` (seconds)."""
    yield from served(model_dir, tmp_path_factory, timeout=getattr(request.module, "SERVER_START_TIMEOUT", 360.0))


@pytest.fixture(scope="module")
def local(model_dir):
    """The served folder loaded locally (the independent computation the server is compared with)."""
    from trace_core import load_model

    return load_model(model_dir, device="cpu")


@pytest.fixture(scope="module")
def served_name() -> str:
    return SERVED_NAME
