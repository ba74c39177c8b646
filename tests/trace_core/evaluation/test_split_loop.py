"""The split loop's mechanics: one method at a time over every split, its state dropped after its run, progress
reported from the caller's thread, a failing method's error raised (not a hang), the values in split order."""

from __future__ import annotations

import importlib
import threading
import warnings
import weakref

import numpy as np
import pytest

from trace_core.evaluation.run import EvaluationConfig, evaluate_arrays
from trace_core.evaluation.splits import Splits, draw_splits
from trace_core.traces.synthetic import synthetic_traces

protocol = importlib.import_module("trace_core.evaluation.protocol")


def _evaluate(n=1500, splits=4, **kwargs):
    s, h, y = synthetic_traces(n, kind="spike", mean_length=12, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=splits), **kwargs)


def test_one_methods_sorted_scores_at_a_time_on_one_thread(monkeypatch):
    """Every scalar score's presorted copy was held for the whole loop; now a method's is freed when its run ends,
    so on one thread at most one is alive whenever a method runs on a split."""
    monkeypatch.setattr(protocol, "THREADS_FROM", 10**9)
    alive: list[weakref.ref] = []
    most = [0]
    of, on_split = protocol.Ascending.of.__func__, protocol._Protocol.on_split

    def counted_of(cls, *args):
        made = of(cls, *args)
        alive.append(weakref.ref(made))
        return made

    def counting_on_split(self, *args):
        most[0] = max(most[0], sum(r() is not None for r in alive))
        return on_split(self, *args)

    monkeypatch.setattr(protocol.Ascending, "of", classmethod(counted_of))
    monkeypatch.setattr(protocol._Protocol, "on_split", counting_on_split)
    result = _evaluate()
    assert len(alive) >= 10  # every scalar score was sorted
    assert most[0] == 1
    assert len(result.per_split)


def test_progress_comes_from_the_callers_thread_from_zero_to_every_split(monkeypatch):
    monkeypatch.setattr(protocol, "THREADS_FROM", 0)  # methods on threads
    calls = []
    main = threading.get_ident()
    _evaluate(splits=6, progress=lambda done, total: calls.append((done, total, threading.get_ident() == main)))
    assert calls[0] == (0, 6, True) and calls[-1] == (6, 6, True)
    assert all(on_main and total == 6 for _, total, on_main in calls)
    done = [d for d, _, _ in calls]
    assert done == sorted(done) and len(set(done)) == len(done)


@pytest.mark.parametrize("threads_from", [0, 10**9])
@pytest.mark.parametrize("broken", ["MeanProb", "CES"])  # CES: run early on threads, late in the methods' order
def test_a_failing_method_raises_its_error(monkeypatch, threads_from, broken):
    monkeypatch.setattr(protocol, "THREADS_FROM", threads_from)
    on_split = protocol._Protocol.on_split

    def failing(self, method, part, state):
        if method == broken and part.split == 1:
            raise RuntimeError(f"{broken} broke on split 1")
        return on_split(self, method, part, state)

    monkeypatch.setattr(protocol._Protocol, "on_split", failing)
    with pytest.raises(RuntimeError, match=f"{broken} broke on split 1"):
        _evaluate(n=3000)


def test_values_come_in_split_order_methods_in_their_order_within_a_split(monkeypatch):
    monkeypatch.setattr(protocol, "THREADS_FROM", 0)
    result = _evaluate()
    frame = result.per_split
    splits = frame["split"].to_numpy()
    assert (np.diff(splits) >= 0).all()
    first = frame[frame["split"] == splits[0]]["method"]
    assert list(dict.fromkeys(first)) == result.methods


def test_the_kept_splits_are_the_drawn_ones_skipped_ones_counted():
    y = np.array([1] * 6 + [0] * 2)
    config = EvaluationConfig(n_splits=12, calibration_fraction=0.5, seed=1)
    drawn = draw_splits(y, config)
    splits = Splits.draw(y, config)
    usable = [(k, cal, ev) for k, (cal, ev) in enumerate(drawn)
              if 0 < y[cal].sum() < len(cal) and 0 < y[ev].sum() < len(ev)]
    assert 0 < splits.skipped == len(drawn) - len(usable)
    parts = list(splits.parts(y))
    assert [p.split for p in parts] == [k for k, _, _ in usable]
    assert [p.first for p in parts] == [True] + [False] * (len(parts) - 1)
    for part, (_, cal, ev) in zip(parts, usable, strict=True):
        np.testing.assert_array_equal(part.cal, cal)
        np.testing.assert_array_equal(part.ev, ev)
        np.testing.assert_array_equal(part.y_ev, y[ev])
        assert part.n_cal == len(cal)


@pytest.mark.parametrize("threads_from", [0, 10**9])
def test_a_released_methods_score_is_freed_after_its_run_and_the_users_inputs_are_left_whole(monkeypatch,
                                                                                            threads_from):
    from trace_core.evaluation.chunked import chunked_protocol_inputs
    from trace_core.evaluation.results import split_frame
    from trace_core.evaluation.run import evaluate_scores

    monkeypatch.setattr(protocol, "THREADS_FROM", threads_from)
    s, h, y = synthetic_traces(1500, kind="spike", mean_length=12, seed=5)
    inputs = chunked_protocol_inputs(s, h)
    methods = [m for m in inputs.wanted if m in inputs.scalar or m in inputs.features]
    config = EvaluationConfig(n_splits=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept = evaluate_scores(inputs, y, config=config)  # the user's inputs: nothing taken from them
    assert sorted([*inputs.scalar, *inputs.features]) == sorted(methods)

    first = weakref.ref(inputs.scalar["TRACE"])
    freed_before_last = []
    on_split = protocol._Protocol.on_split

    def watching(self, method, part, state):
        if method == methods[-1]:
            freed_before_last.append(first() is None)
        return on_split(self, method, part, state)

    monkeypatch.setattr(protocol._Protocol, "on_split", watching)
    scalar, features = dict(inputs.scalar), dict(inputs.features)
    inputs = None  # the split loop's dicts now hold the only references
    run = protocol.run_splits(y, scalar, features, config=config, methods=methods, release=True)
    assert scalar == {} and features == {} and first() is None
    if threads_from:  # one thread: TRACE's run ended before the last method's started
        assert freed_before_last and all(freed_before_last)
    np.testing.assert_array_equal(split_frame(run.rows)["value"].to_numpy(), kept.per_split["value"].to_numpy())
