"""Evaluating shards on Ray Data (a local Ray of 2 CPUs): the same compact table and result as the one-process pass,
and a shard's error raised on the driver naming the shard."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_trace_objects

pytest.importorskip("ray", reason="ray is not installed: `make test-ray` installs requirements-ray.txt")

from trace_core import EvaluationConfig  # noqa: E402
from trace_core.data import write_dataset  # noqa: E402
from trace_core.scale import list_shards  # noqa: E402
from trace_core.scale.evaluate import UnreadableShardError, evaluate_table, read_compact  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray_evaluate")
    traces, y = synthetic_trace_objects(1_200, seed=31)
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces], "label": y})
    for k in range(4):
        a, b = 300 * k, 300 * (k + 1)
        write_dataset(frame.iloc[a:b].reset_index(drop=True), root / f"p{k}.parquet", traces=traces[a:b])
    return root


def test_the_ray_pass_gives_the_stream_pass_table_and_result(shards):
    found = list_shards(str(shards))
    stream = read_compact(found)
    seen = []
    on_ray = read_compact(found, engine="ray", workers=2, on_shard=lambda account: seen.append(account.shard))
    assert sorted(seen) == [s.name for s in found]
    assert on_ray.table.inputs.wanted == stream.table.inputs.wanted
    for m, values in stream.table.inputs.scalar.items():
        np.testing.assert_array_equal(on_ray.table.inputs.scalar[m], values)
    for m, F in stream.table.inputs.features.items():
        np.testing.assert_array_equal(on_ray.table.inputs.features[m], F)
    np.testing.assert_array_equal(on_ray.table.rows, stream.table.rows)
    config = EvaluationConfig(n_splits=3)
    a, b = evaluate_table(on_ray.table, config=config), evaluate_table(stream.table, config=config)
    pd.testing.assert_frame_equal(a.summary, b.summary)


def test_a_shard_that_cannot_be_read_on_a_worker_is_named_on_the_driver(shards, tmp_path):
    for k in range(2):
        (tmp_path / f"p{k}.parquet").write_bytes((shards / f"p{k}.parquet").read_bytes())
    (tmp_path / "p1.parquet").write_bytes(b"broken")
    with pytest.raises(UnreadableShardError, match="p1.parquet"):
        read_compact(list_shards(str(tmp_path)), engine="ray", workers=2)


def test_evaluate_and_flag_with_engine_ray_print_and_write_what_stream_does(shards, tmp_path, capsys):
    import json

    from trace_core.calibration.calibrators import TracePlus
    from trace_core.cli import main
    from trace_core.data import read_dataset

    tables = {}
    for engine in ("stream", "ray"):
        assert main(["evaluate", str(shards), "--splits", "3", "--format", "json", "--quiet", "--engine", engine,
                     *(["--workers", "2"] if engine == "ray" else [])]) == 0
        tables[engine] = json.loads(capsys.readouterr().out)
    assert tables["ray"] == tables["stream"]
    first = read_dataset(shards / "p0.parquet")
    calibrator = tmp_path / "cal.json"
    calibrator.write_text(TracePlus().fit(first.traces, first.frame["label"].to_numpy()).to_json())
    for engine in ("stream", "ray"):
        assert main(["flag", str(shards), "--calibrator", str(calibrator), "--coverage", "0.8", "--quiet",
                     "--out", str(tmp_path / engine), "--engine", engine]) == 0
    for k in range(4):
        assert (tmp_path / "ray" / f"p{k}.parquet").read_bytes() == (tmp_path / "stream" / f"p{k}.parquet").read_bytes()
    manifests = [json.loads((tmp_path / engine / "manifest.json").read_text()) for engine in ("stream", "ray")]
    for manifest in manifests:  # the command names its own --out
        manifest.pop("command")
        for entry in manifest["entries"]:
            entry.pop("command")
    assert manifests[0] == manifests[1]
