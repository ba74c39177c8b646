"""The dashboard's services, state and recording, without a browser: settings-driven limits, the hand-off object,
recording in batches."""

from __future__ import annotations

import dataclasses
import html
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import dashboard, random_traces

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest  # noqa: E402

from app import services  # noqa: E402
from app.state import Answers  # noqa: E402
from trace_core import DatasetError, TraceTable  # noqa: E402

APP = str(Path(__file__).resolve().parents[2] / "app" / "main.py")


@pytest.mark.parametrize("value", [None, "", "0", "false", "FALSE", "no", "Off", " off "])
def test_local_files_off(monkeypatch, value):
    # Regression: only "0" turned file reading off; "false" left it on. Off unless the deployment turns it on.
    if value is None:
        monkeypatch.delenv("TRACE_LOCAL_FILES", raising=False)
    else:
        monkeypatch.setenv("TRACE_LOCAL_FILES", value)
    assert services.local_files_allowed() is False


@pytest.mark.parametrize("value", ["1", "true", "Yes", "ON"])
def test_local_files_on(monkeypatch, value):
    monkeypatch.setenv("TRACE_LOCAL_FILES", value)
    assert services.local_files_allowed() is True


def _calibrate_page(monkeypatch, **env: str) -> AppTest:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return dashboard("../pages/calibrate.py", no_model=True, timeout=60)


@pytest.mark.slow
def test_calibrate_page_offers_no_file_path_when_local_files_are_false(monkeypatch):
    at = _calibrate_page(monkeypatch, TRACE_LOCAL_FILES="false")
    assert not at.exception
    assert "File path" not in at.radio(key="data_source").options
    at = _calibrate_page(monkeypatch, TRACE_LOCAL_FILES="true")
    assert "File path" in at.radio(key="data_source").options


def test_a_bad_setting_stops_the_app_with_its_name(monkeypatch):
    at = _calibrate_page(monkeypatch, TRACE_MAX_ROWS="lots")
    assert not at.exception
    (error,) = [html.unescape(e.value) for e in at.error]  # shown literally (md_literal)
    assert error.startswith("TRACE_MAX_ROWS=") and "lots" in error and "whole number" in error
    assert not at.radio and not at.sidebar.radio  # nothing else runs with a broken setting


def test_file_size_limit_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACE_DATA_DIR", str(tmp_path))
    path = tmp_path / "big.csv"
    path.write_bytes(b"x" * (2**20 + 1))
    monkeypatch.setenv("TRACE_MAX_FILE_MB", "1")
    with pytest.raises(ValueError, match=r"'big.csv' is 1,048,577 bytes \(1.0 MB\); the limit is 1,048,576 bytes "
                                         r"\(1 MB, TRACE_MAX_FILE_MB\)."):
        services.read_local_file(str(path))
    monkeypatch.setenv("TRACE_MAX_FILE_MB", "2")
    assert services.read_local_file(str(path)) == (path.read_bytes(), "big.csv")
    with pytest.raises(ValueError, match="No file at"):
        services.read_local_file(str(tmp_path / "missing.csv"))


def test_row_limit_comes_from_the_environment_when_reading(monkeypatch):
    data = pd.DataFrame({"prompt": list("abc"), "answer": list("xyz"), "label": [1, 0, 1]}).to_csv(index=False)
    monkeypatch.setenv("TRACE_MAX_ROWS", "2")
    with pytest.raises(DatasetError, match="more than 2 data rows"):
        services.read_cached(data.encode(), "three.csv", "exact")
    monkeypatch.setenv("TRACE_MAX_ROWS", "3")  # the cache does not hide the new limit
    assert services.read_cached(data.encode(), "three.csv", "exact").n_valid == 3


def _csv(rows: int, seed: int, width: int = 3_000) -> bytes:
    return pd.DataFrame({"prompt": [f"{seed} {j} " + "x" * width for j in range(rows)], "answer": "a",
                         "label": 1}).to_csv(index=False).encode()


def _dataset_entries() -> list[int]:
    """The byte sizes of the datasets the process keeps read (Streamlit's per-entry cache statistics)."""
    from streamlit.runtime.caching.cache_data_api import _data_caches

    return [stat.byte_length for caches in _data_caches._function_caches.values() for cache in caches.values()
            for stats in cache.get_stats().values() for stat in stats if stat.cache_name.endswith("services._read")]


def test_the_dataset_cache_is_bounded_in_entries_and_bytes(monkeypatch):
    monkeypatch.setenv("TRACE_MAX_DATA_MB", "1")
    for i in range(6):  # each about 300 KB: together over the 1 MiB the cache may hold
        assert services.read_cached(_csv(100, i), f"d{i}.csv", "exact").n_valid == 100
    sizes = _dataset_entries()
    assert sizes and all(size > 250_000 for size in sizes) and sum(sizes) <= 2**20
    monkeypatch.setenv("TRACE_MAX_DATA_MB", "64")
    for i in range(services.DATASETS_KEPT + 3):
        services.read_cached(_csv(2, i, width=10), f"small{i}.csv", "exact")
    assert len(_dataset_entries()) == services.DATASETS_KEPT


def test_each_reader_of_a_cached_dataset_gets_its_own_copy(monkeypatch):
    import streamlit as st

    data = _csv(3, 0, width=5)
    calls = []
    real = services.read_dataset
    monkeypatch.setattr(services, "read_dataset", lambda *a, **k: calls.append(1) or real(*a, **k))
    st.cache_data.clear()
    first = services.read_cached(data, "same.csv", "exact")
    first.frame.loc[0, "prompt"] = "changed by one session"
    first.traces.append(None)
    second = services.read_cached(bytes(data), "same.csv", "exact")  # the same content, read once
    assert calls == [1]
    assert second.frame.loc[0, "prompt"] != "changed by one session" and len(second.traces) == 3


def test_calibrated_data_is_frozen_and_checked():
    traces = random_traces(3, seed=1)
    frame = pd.DataFrame({"row": [2, 5, 9], "prompt": list("abc"), "answer": [t.answer for t in traces]})
    labels = np.array([1, 0, 1])
    data = Answers(frame=frame, traces=traces, labels=labels, name="f.csv", row_column="row", key="k")
    assert isinstance(data.traces, TraceTable) and data.traces == traces and data.labels.tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match="read-only"):  # one table per dataset: read-only columns
        data.traces.surprisal[0] = 0.0
    labels[0] = 0  # the page's array changing later does not change what was handed over
    assert data.labels[0] == 1
    with pytest.raises(ValueError):
        data.labels[1] = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.key = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="3 rows, 2 traces and 3 labels"):
        Answers(frame=frame, traces=traces[:2], labels=labels, name="f.csv", row_column="row", key="k")


def test_record_batches_match_one_call_and_keep_finished_batches(tiny_model_dirs):
    pytest.importorskip("torch")
    from app.recording import record_batches
    from trace_core import load_model, read_dataset, score_answers

    lm = load_model(tiny_model_dirs["gpt2"])
    frame = pd.DataFrame({"prompt": [f"Q: {i} plus {i}?" for i in range(7)], "answer": [f" {2 * i}" for i in range(7)],
                          "label": [1, 0] * 3 + [1]})
    buffer = io.BytesIO(frame.to_csv(index=False).encode())
    buffer.name = "d.csv"
    dataset = read_dataset(buffer)
    positions = [6, 0, 3, 4, 1]
    batches = list(record_batches(lm, dataset, positions, batch_size=2))
    assert [list(b) for b in batches] == [[6, 0], [3, 4], [1]]
    expected = score_answers(lm, [frame["prompt"][i] for i in positions], [frame["answer"][i] for i in positions])
    got = {i: t for b in batches for i, t in b.items()}
    for i, trace in zip(positions, expected, strict=True):
        np.testing.assert_array_equal(got[i].token_ids, trace.token_ids)
        np.testing.assert_allclose(got[i].surprisal, trace.surprisal, atol=1e-5)
    # Stopping after the first batch (the Stop button) keeps it: batches are produced one at a time.
    store: dict = {}
    for batch in record_batches(lm, dataset, positions, batch_size=2):
        store.update(batch)
        break
    assert sorted(store) == [0, 6]


@pytest.mark.slow
def test_the_app_preloads_the_numeric_libraries_once_per_process():
    """A fresh process: `import trace_core` and the app's modules leave scipy unloaded; the first page run starts one
    background import of what the first evaluation needs, and later runs start no other."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from streamlit.testing.v1 import AppTest\n"
        "from app import services\n"
        "assert 'scipy.optimize' not in sys.modules and 'scipy.special' not in sys.modules\n"
        f"at = AppTest.from_file({APP!r}, default_timeout=120)\n"
        "at.run()\n"
        "first = services._preloading\n"
        "assert first is not None, 'the page run started no preload'\n"
        "at.run()\n"
        "assert services.preload_in_background() is first\n"
        "first.join(60)\n"
        "assert 'scipy.optimize' in sys.modules and 'scipy.special' in sys.modules\n"
        "print('ok')\n"
    )
    root = Path(APP).parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
