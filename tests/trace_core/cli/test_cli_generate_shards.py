"""``trace-core generate`` over shards of prompts, through the in-process OpenAI-compatible fake server (and the tiny
local model): every prompt row once across the output shards, the same rows and traces as a one-file run, a rerun
that skips complete shards without connecting, a failed or interrupted run resumed to the same output, several
servers sharing the requests with at most --concurrency in flight at each, and servers of other models refused."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from fake_server import FakeServer  # noqa: E402

from trace_core.cli import main  # noqa: E402
from trace_core.data import read_dataset  # noqa: E402
from trace_core.scale import generate as scale_generate  # noqa: E402

pytestmark = pytest.mark.slow  # runs a tiny model behind a local HTTP server


@pytest.fixture
def servers(tiny_model_dirs, capsys):
    """servers(**options) -> a running FakeServer of the tiny GPT-2, stopped at the end of the test."""
    started = []

    def start(**options):
        started.append(FakeServer(tiny_model_dirs["gpt2"], **options))
        capsys.readouterr()  # its model's loading lines
        return started[-1]

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def prompts(tmp_path):
    """Three JSON Lines shards of prompts with a `reference` and a unique `id` (one in a subfolder; a.jsonl has a row
    without a prompt)."""
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.jsonl").write_text('{"prompt": "Q: 2 + 2 =", "reference": "4", "id": 0}\n'
                                    '{"prompt": "", "reference": "x", "id": 1}\n'
                                    '{"prompt": "The quick brown", "reference": "fox", "id": 2}\n', encoding="utf-8")
    pd.DataFrame({"prompt": ["Q: 3 + 4 =", "Numbers: 0 1 2"], "reference": ["7", "3"], "id": [3, 4]}).to_json(
        folder / "c.jsonl", orient="records", lines=True)
    pd.DataFrame({"prompt": ["The capital of France is"], "reference": ["Paris"], "id": [5]}).to_json(
        folder / "sub" / "b.jsonl", orient="records", lines=True)
    return folder


def _generate(data, out, urls, folder, *extra):
    servers = [a for url in urls for a in ("--server", url)]
    return main(["generate", str(data), "--out", str(out), *servers, "--server-model", "tiny", "--server-tokenizer",
                 str(folder), "--max-new-tokens", "3", "--alternatives", "3", "--retries", "0", *map(str, extra)])


def _ids(out):
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    return [i for e in manifest["entries"] for i in pd.read_parquet(out / e["output"])["id"].tolist()]


def _parquet(out):
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.parquet"))}


def test_shards_equal_a_single_file_run_and_a_rerun_needs_no_server(prompts, tmp_path, tiny_model_dirs, servers,
                                                                    capsys):
    folder, fake = tiny_model_dirs["gpt2"], servers()
    out = tmp_path / "out"
    assert _generate(prompts, out, [fake.url], folder, "--quiet") == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rejected: a.jsonl: row 2: prompt: is empty; expected non-empty text"], err
    assert sorted(p.name for p in out.iterdir()) == ["_manifest", "a.parquet", "c.parquet", "manifest.json",
                                                     "sub__b.parquet"]
    assert sorted(_ids(out)) == [0, 2, 3, 4, 5]  # every row with a prompt, once
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["rows_read"], manifest["rows_kept"], manifest["rows_rejected"]) == (6, 5, 1)
    settings = manifest["settings"]
    assert settings["server"] == fake.url and settings["server_model"] == "tiny"
    assert (settings["max_new_tokens"], settings["sample"], settings["seed"], settings["alternatives"]) == (3, False,
                                                                                                         None, 3)
    assert settings["server_api"] == "completions" and settings["matcher"] == "exact"
    assert fake.attempts == 5

    single = tmp_path / "single.parquet"
    assert _generate(prompts / "a.jsonl", single, [fake.url], folder, "--quiet") == 0
    sharded, one = read_dataset(out / "a.parquet"), read_dataset(single)
    assert list(sharded.frame.columns) == list(one.frame.columns) and "label" in sharded.frame.columns
    assert sharded.frame.equals(one.frame)
    for a, b in zip(sharded.traces, one.traces, strict=True):
        assert a.answer == b.answer and a.token_ids.tolist() == b.token_ids.tolist()
        np.testing.assert_array_equal(a.surprisal, b.surprisal)
        np.testing.assert_array_equal(a.top_ids, b.top_ids)
    capsys.readouterr()

    fake.stop()  # every shard is complete: nothing connects
    assert _generate(prompts, out, [fake.url], folder) == 0
    err = capsys.readouterr().err
    assert "[1/3] a.jsonl: already complete, skipped" in err
    assert "3 shards: 0 written, 3 already complete; 6 rows read: 5 kept, 1 rejected" in err


def test_a_shard_whose_requests_fail_is_redone_by_the_next_run(prompts, tmp_path, tiny_model_dirs, servers, capsys):
    folder, fake = tiny_model_dirs["gpt2"], servers()
    assert _generate(prompts, tmp_path / "clean", [fake.url], folder, "--quiet") == 0
    # c.jsonl's requests fail (no retries) however many of them are sent before the shard gives up; the others are
    # answered
    fake.fail_texts = ("Q: 3 + 4 =", "Numbers: 0 1 2")
    out = tmp_path / "out"
    assert _generate(prompts, out, [fake.url], folder, "--quiet") == 1
    fake.fail_texts = ()
    err = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith("warning: [2/3] c.jsonl: failed: ") for line in err), err
    assert err[-1].startswith("error: 1 of 3 shards failed (c.jsonl); the others are written"), err
    assert sorted(_parquet(out)) == ["a.parquet", "sub__b.parquet"]
    assert _generate(prompts, out, [fake.url], folder) == 0
    assert "3 shards: 1 written, 2 already complete" in capsys.readouterr().err
    assert _parquet(out) == _parquet(tmp_path / "clean")  # the same bytes as a run that never failed


def test_an_interrupted_run_resumes_to_the_same_output(prompts, tmp_path, tiny_model_dirs, servers, monkeypatch,
                                                       capsys):
    folder, fake = tiny_model_dirs["gpt2"], servers()
    assert _generate(prompts, tmp_path / "clean", [fake.url], folder, "--quiet") == 0
    calls = []
    work = scale_generate.ShardGenerator.__call__

    def stopping(self, shard):
        calls.append(shard.name)
        if len(calls) == 2:
            raise RuntimeError("the machine went away")
        return work(self, shard)

    monkeypatch.setattr(scale_generate.ShardGenerator, "__call__", stopping)
    out = tmp_path / "out"
    assert _generate(prompts, out, [fake.url], folder, "--quiet") == 1
    assert "the machine went away" in capsys.readouterr().err
    assert sorted(_parquet(out)) == ["a.parquet"] and not (out / "manifest.json").exists()
    monkeypatch.setattr(scale_generate.ShardGenerator, "__call__", work)
    assert _generate(prompts, out, [fake.url], folder) == 0
    assert "3 shards: 2 written, 1 already complete" in capsys.readouterr().err
    assert _parquet(out) == _parquet(tmp_path / "clean")


def test_several_servers_share_the_requests_with_at_most_concurrency_at_each(tmp_path, tiny_model_dirs, servers):
    folder = tiny_model_dirs["gpt2"]
    data = tmp_path / "in"
    data.mkdir()
    texts = [f"Q: {i} + {i} =" for i in range(12)]
    for k in range(2):
        pd.DataFrame({"prompt": texts[6 * k:6 * k + 6], "id": range(6 * k, 6 * k + 6)}).to_json(
            data / f"part-{k}.jsonl", orient="records", lines=True)
    one, two = servers(), servers()
    for fake in (one, two):
        fake.hold_first = [0.05] * 12  # slow answers, so that requests pile up
    out = tmp_path / "out"
    assert _generate(data, out, [one.url, two.url], folder, "--quiet", "--concurrency", "2",
                     "--batch-size", "1") == 0
    assert one.attempts > 0 and two.attempts > 0 and one.attempts + two.attempts == 12
    assert one.max_in_flight <= 2 and two.max_in_flight <= 2
    assert max(one.max_in_flight, two.max_in_flight) == 2  # --batch-size 1 is raised to 2 servers x 2
    assert sorted(_ids(out)) == list(range(12))
    settings = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["settings"]
    assert settings["server"] == [one.url, two.url]
    both = read_dataset(out / "part-0.parquet", require_label=False).traces
    assert {t.metadata.extra["base_url"] for t in both} <= {one.url, two.url}
    alone = tmp_path / "alone"
    assert _generate(data, alone, [one.url], folder, "--quiet") == 0
    for a, b in zip(both, read_dataset(alone / "part-0.parquet", require_label=False).traces, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        np.testing.assert_array_equal(a.surprisal, b.surprisal)


@pytest.mark.parametrize("options, words", [
    ({"served_name": "other"}, "does not serve the model 'tiny'"),
    ({"max_model_len": 256}, "does not serve the same model as the one at"),
])
def test_servers_of_another_model_are_refused_naming_the_address(prompts, tmp_path, tiny_model_dirs, servers,
                                                                 capsys, options, words):
    first, other = servers(), servers(**options)
    assert _generate(prompts, tmp_path / "out", [first.url, other.url], tiny_model_dirs["gpt2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --server: ") and other.url in err[-1] and words in err[-1], err
    assert not list((tmp_path / "out").glob("*.parquet"))


def test_sampling_without_a_seed_says_so_and_still_resumes(prompts, tmp_path, tiny_model_dirs, capsys):
    command = ["generate", str(prompts), "--out", str(tmp_path / "out"), "--model", str(tiny_model_dirs["gpt2"]),
               "--max-new-tokens", "2", "--sample", "--quiet"]
    assert main(command) == 0
    assert "warning: --sample without --seed: the answers cannot be drawn again" in capsys.readouterr().err
    settings = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))["settings"]
    assert settings["sample"] is True and settings["seed"] is None and settings["model"] == str(
        tiny_model_dirs["gpt2"])
    assert main([*command[:-1]]) == 0
    assert "3 shards: 0 written, 3 already complete" in capsys.readouterr().err


def test_seeded_shards_draw_differently_and_again_alike(tmp_path, tiny_model_dirs):
    data = tmp_path / "in"
    data.mkdir()
    for name in ("a", "b"):  # the same prompts in two shards
        pd.DataFrame({"prompt": ["The quick brown"] * 4}).to_json(data / f"{name}.jsonl", orient="records",
                                                                   lines=True)
    answers = []
    for run in ("one", "two"):
        assert main(["generate", str(data), "--out", str(tmp_path / run), "--model", str(tiny_model_dirs["gpt2"]),
                     "--max-new-tokens", "6", "--sample", "--seed", "3", "--quiet"]) == 0
        answers.append([pd.read_parquet(tmp_path / run / f"{n}.parquet")["answer"].tolist() for n in ("a", "b")])
    assert answers[0] == answers[1]  # reproducible
    assert answers[0][0] != answers[0][1]  # two shards never repeat each other's draws


def test_the_engine_options_are_refused_with_one_prompts_file(prompts, tmp_path, capsys):
    assert main(["generate", str(prompts / "a.jsonl"), "--model", "m", "--out", str(tmp_path / "o.jsonl"),
                 "--engine", "ray"]) == 1
    assert "DATA is one file" in capsys.readouterr().err
