"""The demo: deterministic, disjoint task generators; a few-step training smoke test; the shipped model and datasets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from demo.tasks import KnowledgeBase, arithmetic_problems, fact_problems, training_texts

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "assets" / "demo-model"
DATASETS = ROOT / "assets" / "datasets"


def test_generators_are_deterministic():
    assert arithmetic_problems(50, split="test", seed=3) == arithmetic_problems(50, split="test", seed=3)
    assert arithmetic_problems(50, split="test", seed=3) != arithmetic_problems(50, split="test", seed=4)
    assert fact_problems("test") == fact_problems("test")
    assert training_texts(n_arithmetic=300) == training_texts(n_arithmetic=300)


def test_arithmetic_answers_are_right_and_splits_disjoint():
    splits = {s: arithmetic_problems(400, split=s) for s in ("train", "validation", "test")}
    questions = {s: {p.question for p in ps} for s, ps in splits.items()}
    assert not questions["train"] & questions["test"] and not questions["train"] & questions["validation"]
    assert not questions["validation"] & questions["test"]
    p = next(p for p in splits["test"] if "buys" in p.question and "gives" not in p.question)
    numbers = [int(w) for w in p.question.replace("?", " ").replace(".", " ").split() if w.isdigit()]
    assert int(p.answer) == sum(numbers)
    assert {p.detail for p in splits["test"]} == {"one-step", "two-step"}


def test_fact_exposure_is_long_tailed_and_test_questions_never_appear_in_training():
    kb = KnowledgeBase()
    exposure = np.array(list(kb.exposure.values()))
    assert 0.2 < (exposure == 0).mean() < 0.3 and ((exposure >= 1) & (exposure <= 2)).mean() > 0.15
    assert exposure.max() > 4 * np.median(exposure[exposure >= 4])
    prompts = {prompt for prompt, _ in kb.training_pairs()}
    for split in ("validation", "test"):
        assert not {p.prompt for p in fact_problems(split)} & prompts
    corpus = "\n".join(prompts)
    assert all(c in corpus for (c, r), n in kb.exposure.items() if n > 0)
    # every test question's template is trained on, for other countries
    trained_templates = set()
    for prompt in prompts:
        country = next(c for c in kb.countries if c in prompt)
        trained_templates.add(prompt.replace(country, "{x}"))
    for problem in fact_problems("test"):
        country = next(c for c in kb.countries if c in problem.question)
        assert problem.prompt.replace(country, "{x}") in trained_templates


def greedy(lm, prompt: str, max_new_tokens: int) -> tuple[list[int], list[float], bool]:
    """An independent greedy loop: argmax of the model's logits, one full forward pass per token, until the model's
    end-of-answer token or the limit; returns the ids, their surprisal and whether it stopped at the end token."""
    import torch

    ids = lm.tokenizer(prompt, add_special_tokens=True)["input_ids"]
    out: list[int] = []
    surprisal: list[float] = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = lm.model(torch.tensor([ids + out])).logits[0, -1].double()
            token = int(logits.argmax())
            if token == lm.tokenizer.eos_token_id:
                return out, surprisal, True
            out.append(token)
            surprisal.append(float(-torch.log_softmax(logits, -1)[token]))
    return out, surprisal, False


def test_training_smoke_run_saves_a_loadable_model(tmp_path):
    pytest.importorskip("torch")
    from demo.train import main
    from trace_core import DecodingConfig, generate_trace, load_model

    main(["--out", str(tmp_path / "m"), "--smoke", "--tasks", "short", "--steps", "2"])
    lm = load_model(tmp_path / "m", device="cpu")
    prompt = "Q: What is 1 plus 1?\nA:"
    trace = generate_trace(lm, prompt, config=DecodingConfig(max_new_tokens=3))
    ids, surprisal, stopped = greedy(lm, prompt, 3)  # the saved weights, decoded without trace_core
    np.testing.assert_array_equal(trace.token_ids, ids)
    np.testing.assert_allclose(trace.surprisal, surprisal, atol=1e-4)
    assert trace.metadata.extra["finish_reason"] == ("eos" if stopped else "length")


@pytest.mark.slow
def test_long_tasks_train_and_build_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    import pandas as pd

    from demo.build_assets import main as build
    from demo.train import main as train
    from trace_core import read_dataset

    train(["--out", str(tmp_path / "m"), "--smoke", "--tasks", "long", "--steps", "2"])
    build(["--tasks", "long", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "d"), "--splits", "test",
           "--n-arithmetic", "2", "--n-worked", "3", "--n-facts", "2", "--n-descriptions", "2", "--no-beams"])
    printed = capsys.readouterr().out
    assert "worked_arithmetic" in printed and "first wrong token after >= 5 right ones" in printed
    data = read_dataset(tmp_path / "d" / "demo_test.csv")
    frame = data.frame
    assert frame["family"].value_counts().to_dict() == {"worked_arithmetic": 3, "arithmetic": 2, "facts": 2,
                                                          "descriptions": 2}
    worked = frame[frame["family"] == "worked_arithmetic"]
    assert worked["solution"].str.contains(" The answer is ").all()
    assert all(sol.endswith(f" {ref}.") for sol, ref in zip(worked["solution"], worked["reference"].astype(str), strict=True))
    assert frame.loc[frame["family"] == "descriptions", "detail"].str.contains(r"exposure=\d+,\d+,\d+ wrong=").all()
    examples = json.loads((tmp_path / "d" / "try_prompts.json").read_text(encoding="utf-8"))
    assert {e["label"] for e in examples} <= {0, 1} and {e["family"] for e in examples} >= {"worked_arithmetic"}
    assert set(pd.read_csv(tmp_path / "d" / "demo_test.csv", nrows=1).columns) >= {"solution", "detail", "label"}

    # The recipe diagnostic runs on any such model: one row per kind and relation, each bucket's count of facts.
    from demo.diagnose import main as diagnose
    from demo.tasks import description_problems

    diagnose(["--model", str(tmp_path / "m"), "--split", "test"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"{len(description_problems('test'))} descriptions, all facts right in 0 (0.0%)")
    rows = [line for line in lines[2:] if line.split()[0] in ("greedy", "forced,", "question")]
    assert len(rows) == 12
    totals = [sum(int(n) for n in re.findall(r"\(\s*(\d+)\)", row)) for row in rows]
    assert totals == [len(description_problems("test"))] * 12


@pytest.mark.slow
@pytest.mark.skipif(not (MODEL / "model.safetensors").exists(), reason="demo model not built")
def test_shipped_model_loads_offline_and_reproduces_stored_traces(monkeypatch):
    pytest.importorskip("torch")
    from trace_core import DecodingConfig, generate_trace, generate_traces, load_model, read_dataset

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_model(MODEL, device="cpu")
    dataset = read_dataset(DATASETS / "demo_test.csv")
    longest = max(len(t) for t in dataset.traces)
    # A "try these" question the model gets wrong (the README's screenshot): its stored answer, decoded again by an
    # independent greedy loop, ends with the end-of-answer token before the limit.
    examples = json.loads((DATASETS / "try_prompts.json").read_text(encoding="utf-8"))
    example = next(e for e in examples if e["label"] == 0)
    stored = dataset.traces[dataset.frame["prompt"].tolist().index(example["prompt"])]
    trace = generate_trace(lm, example["prompt"], config=DecodingConfig(max_new_tokens=longest + 4))
    ids, surprisal, stopped = greedy(lm, example["prompt"], longest + 4)
    assert stopped and trace.answer == stored.answer and trace.metadata.extra["finish_reason"] == "eos"
    np.testing.assert_array_equal(trace.token_ids, ids)
    np.testing.assert_allclose(trace.surprisal, surprisal, atol=1e-4)
    rows = list(range(0, dataset.n_valid, max(1, dataset.n_valid // 12)))
    prompts = [dataset.frame["prompt"].iloc[i] for i in rows]
    fresh = generate_traces(lm, prompts, config=DecodingConfig(max_new_tokens=longest, n_alternatives=5),
                            batch_size=32)
    for i, trace in zip(rows, fresh, strict=True):
        stored = dataset.traces[i]
        assert trace.answer == dataset.frame["answer"].iloc[i]
        np.testing.assert_array_equal(trace.token_ids, stored.token_ids)
        np.testing.assert_allclose(trace.surprisal, stored.surprisal, atol=1e-4)
        np.testing.assert_allclose(trace.entropy, stored.entropy, atol=1e-4)


@pytest.mark.skipif(not (DATASETS / "demo_test.csv").exists(), reason="demo datasets not built")
@pytest.mark.parametrize("name", ["demo_validation.csv", "demo_test.csv"])
def test_shipped_datasets_are_valid_with_varied_correctness(name):
    from trace_core import read_dataset

    dataset = read_dataset(DATASETS / name)
    assert dataset.n_rejected == 0 and dataset.has_traces
    accuracy = dataset.frame.groupby("family")["label"].mean()
    assert set(accuracy.index) == {"arithmetic", "facts", "worked_arithmetic", "descriptions"}
    assert ((accuracy >= 0.15) & (accuracy <= 0.95)).all(), accuracy.to_dict()  # every family has right and wrong
    # The long families, meant to show local errors, are in their target range.
    assert 0.4 <= accuracy["worked_arithmetic"] <= 0.8 and 0.4 <= accuracy["descriptions"] <= 0.8, accuracy.to_dict()


# ------------------------------------------------------------------------------------------------ long answers

def test_worked_problems_are_deterministic_disjoint_and_right():
    from demo.tasks import worked_problems

    assert worked_problems(40, split="test") == worked_problems(40, split="test")
    splits = {s: worked_problems(300, split=s) for s in ("train", "validation", "test")}
    questions = {s: {p.question for p in ps} for s, ps in splits.items()}
    assert not questions["train"] & questions["test"] and not questions["train"] & questions["validation"]
    assert not questions["validation"] & questions["test"]
    for p in splits["test"]:
        # Recompute every step from the question's numbers and its verbs, independently of worked_solution.
        numbers = [int(w) for w in re.findall(r"\d+", p.question)]
        steps = re.findall(r"(\d+) ([+-]) (\d+) = (\d+)\.", p.solution)
        assert len(steps) == len(numbers) - 1 == int(p.detail[0])
        value = numbers[0]
        for (left, op, right, result), number in zip(steps, numbers[1:], strict=True):
            assert int(left) == value and int(right) == number
            value = value + number if op == "+" else value - number
            assert int(result) == value >= 0
        assert p.solution.endswith(f" The answer is {value}.") and p.answer == str(value)
        assert p.question.endswith("Show your steps.")
    assert {p.detail for p in splits["test"]} == {"2-step", "3-step"}
    tokens_per_answer = [len(p.solution.split()) for p in splits["test"]]
    assert min(tokens_per_answer) >= 10


@pytest.mark.parametrize("fact_form", ["varied", "partial"])
def test_descriptions_ask_only_about_countries_never_described_in_training(fact_form):
    from demo.tasks import _PARTIAL_PROMPTS, description_problems, description_world, long_training_pairs, wrong_facts

    kb = description_world()
    pairs = long_training_pairs(n_arithmetic=50, n_worked=50, fact_repeats=2, fact_form=fact_form)
    trained_prompts = {prompt for prompt, _ in pairs}
    described = {prompt for prompt, answer in pairs if prompt.startswith("Q: Tell me about ")
                 and answer.count(".") == 3}
    tests = {s: description_problems(s) for s in ("validation", "test")}
    assert len(tests["test"]) >= 60 and len(tests["validation"]) >= 60
    assert not {p.prompt for p in tests["validation"]} & {p.prompt for p in tests["test"]}
    for split, problems in tests.items():
        assert not {p.prompt for p in problems} & trained_prompts, split
        assert not {p.prompt for p in problems} & described
    # Each test fact was shown (in a partial description) exactly its exposure times per repeat, and some test
    # descriptions hold a fact never shown among facts shown often.
    starts = [f"Q: {t.split('{x}')[0]}" for t in _PARTIAL_PROMPTS]
    assert not any("Tell me about" in t for t in _PARTIAL_PROMPTS)
    answers = [answer for prompt, answer in pairs if prompt.startswith(tuple(starts))]
    used = {start for start in starts if any(prompt.startswith(start) for prompt, _ in pairs)}
    assert len(used) == (len(_PARTIAL_PROMPTS) if fact_form == "varied" else 1)
    mixed = 0
    for p in tests["test"]:
        country = p.question.removeprefix("Tell me about ").removesuffix(".")
        counts = [int(c) for c in p.detail.removeprefix("exposure=").split(",")]
        for relation, count in zip(("founded", "leader", "capital"), counts, strict=True):
            assert kb.exposure[(country, relation)] == count
        for sentence, count in zip(re.findall(r" [^.]+\.", p.solution), counts, strict=True):
            assert sum(sentence in answer for answer in answers) == 2 * count
        mixed += min(counts) == 0 and max(counts) >= 4
        assert wrong_facts(p.solution, kb, country) == []
    assert mixed >= 5
    some = tests["test"][0]
    country = some.question.removeprefix("Tell me about ").removesuffix(".")
    slip = some.solution.replace(kb.facts[(country, "capital")], "Zzyzx")
    assert wrong_facts(slip, kb, country) == ["capital"]


def test_the_short_world_is_unchanged_by_the_long_one():
    import hashlib

    from demo.tasks import description_world

    # The long world has names of two or three syllables; the default one refuses to run out of names, and still
    # draws the very test questions of the short demo's datasets (those of the earlier bundled model: the hash of
    # its test file's prompts and references, arithmetic and facts, taken when that file was checked against them).
    assert len(description_world().countries) == 200
    with pytest.raises(ValueError, match="name_syllables"):
        KnowledgeBase(n_countries=400)
    drawn = fact_problems("test") + arithmetic_problems(800, split="test")
    digest = hashlib.sha256("\n".join(f"{p.prompt}|{p.answer}" for p in drawn).encode()).hexdigest()
    assert digest == "11bae0ae5390919006f35ddb4e06ecc9da16dc1e0170299ff0a42f7bd7ffd325"


@pytest.mark.skipif(not (DATASETS / "demo_test.csv").exists(), reason="demo datasets not built")
@pytest.mark.parametrize("split", ["validation", "test"])
def test_shipped_datasets_hold_the_generators_problems(split):
    import pandas as pd

    from demo.build_assets import problems_of

    shipped = pd.read_csv(DATASETS / f"demo_{split}.csv", dtype=str, keep_default_na=False)
    drawn = problems_of(split, tasks="long", n_arithmetic=400, n_worked=600, n_facts=360, seed=0)
    assert shipped["prompt"].tolist() == [p.prompt for p in drawn]
    assert shipped["reference"].tolist() == [p.answer for p in drawn]
    assert shipped["family"].tolist() == [p.family for p in drawn]


@pytest.mark.skipif(not (DATASETS / "demo_test.csv").exists(), reason="demo datasets not built")
def test_wrong_long_try_these_examples_have_their_spike_on_the_first_wrong_token():
    from bench.localisation import first_wrong_token
    from trace_core import read_dataset, spike_indices

    dataset = read_dataset(DATASETS / "demo_test.csv")
    prompts = dataset.frame["prompt"].tolist()
    examples = json.loads((DATASETS / "try_prompts.json").read_text(encoding="utf-8"))
    wrong = [e for e in examples if e["family"] == "worked_arithmetic" and e["label"] == 0]
    assert wrong
    for example in wrong:
        row = prompts.index(example["prompt"])
        trace = dataset.traces[row]
        first = first_wrong_token(trace.tokens, trace.answer, dataset.frame["solution"].iloc[row])
        assert first is not None and first >= 5, example["prompt"]
        assert first in spike_indices(trace.surprisal).tolist(), example["prompt"]
