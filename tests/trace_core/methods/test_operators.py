"""Operators against hand-computed examples, a naive per-trace reference, and property tests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trace_core.methods import operators as ops

# Hand-computed values -------------------------------------------------------------------------------------------

def test_decayed_mean_by_hand():
    # w = 2 / (2 + t - 1) for t = 1..5 = [1, 2/3, 1/2, 2/5, 1/3]; sum w = 2.9; sum w x = 7.1
    assert ops.decayed_mean([1, 2, 3, 4, 5], lam=2) == pytest.approx(7.1 / 2.9)
    np.testing.assert_allclose(ops.decay_weights(np.arange(5), lam=2), [1, 2 / 3, 1 / 2, 2 / 5, 1 / 3])
    # exponential kernel: w = exp(-(t-1)/lam)
    w = np.exp(-np.arange(3) / 4)
    assert ops.decayed_mean([3, 0, 6], lam=4, kernel="exponential") == pytest.approx((3 * w[0] + 6 * w[2]) / w.sum())


@pytest.mark.parametrize("x, w, expected", [
    ([1, 0, 0, 8, 4, 0], 4, 3.0),      # windows 2.25, 3.0, 3.0
    ([2, 4], 4, 3.0),                  # T < w: whole-trace mean
    ([5, 1, 1, 1], 4, 2.0),            # T == w: one window
    ([1, 9, 2], 1, 9.0),               # w = 1: the maximum
    ([1, 3, 2, 8], 2, 5.0),
])
def test_window_max_mean_by_hand(x, w, expected):
    assert ops.window_max_mean(x, w=w) == pytest.approx(expected)


def test_length_normalized_sum_by_hand():
    assert ops.length_normalized_sum([1, 2, 3, 4], rho=0.25) == pytest.approx(10 / 4 ** 0.25)
    assert ops.length_normalized_sum([1, 2, 3, 4], rho=1.0) == pytest.approx(2.5)
    assert ops.length_normalized_sum([1, 2, 3, 4], rho=0.0) == pytest.approx(10)


@pytest.mark.parametrize("fn, x, expected", [
    (ops.slope, [1, 3, 5], 2.0),
    (ops.slope, [5, 4, 3, 2], -1.0),
    (ops.slope, [7], 0.0),
    (ops.first_k_mean, [1, 2, 3, 4, 5], 2.0),
    (ops.last_k_mean, [1, 2, 3, 4, 5], 4.0),
    (ops.first_k_mean, [7], 7.0),
    (ops.last_k_mean, [7, 9], 8.0),
    (ops.segment_var, [1, 2, 3, 4], 1.25),
    (ops.segment_max, [1, 9, 2], 9.0),
    (ops.segment_mean, [1, 2], 1.5),
])
def test_simple_operators_by_hand(fn, x, expected):
    assert fn(x) == pytest.approx(expected)


@pytest.mark.parametrize("fn", [ops.segment_mean, ops.segment_max, ops.segment_var, ops.slope, ops.decayed_mean,
                                ops.window_max_mean, ops.first_k_mean, ops.last_k_mean, ops.length_normalized_sum])
def test_empty_trace_gives_nan(fn):
    assert math.isnan(fn([]))
    batch = ops.Ragged.from_arrays([[1.0, 2.0], [], [3.0]])
    out = fn(batch)
    assert out.shape == (3,) and math.isnan(out[1]) and np.isfinite(out[[0, 2]]).all()


@pytest.mark.parametrize("call, match", [
    (lambda: ops.window_max_mean([1.0], w=0), "`w` must be an int >= 1, got 0"),
    (lambda: ops.first_k_mean([1.0], k=0), "`k` must be an int >= 1, got 0"),
    (lambda: ops.decayed_mean([1.0], lam=0), "`lam` must be a finite real number > 0"),
    (lambda: ops.decayed_mean([1.0], kernel="gauss"), "`kernel` must be"),
    (lambda: ops.segment_mean([[1.0, 2.0]]), "must be 1-D"),
    (lambda: ops.Ragged(np.zeros(3), np.array([0, 2])), "`offsets` must"),
])
def test_operator_validation(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: ops.window_max_mean([1.0], w=2.5), "`w` must be an int >= 1, got 2.5"),
    (lambda: ops.first_k_mean([1.0], k=True), "`k` must be an int >= 1, got True"),
    (lambda: ops.last_k_mean([1.0], k="3"), "`k` must be an int >= 1, got '3'"),
    (lambda: ops.decayed_mean([1.0], lam="2"), "`lam` must be a finite real number > 0"),
    (lambda: ops.length_normalized_sum([1.0], rho=None), "`rho` must be a finite real number"),
])
def test_operator_options_of_the_wrong_type_raise_type_error(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_operator_options_accept_numpy_scalars():
    x = [1.0, 3.0, 2.0, 5.0, 4.0]
    assert ops.window_max_mean(x, w=np.int64(2)) == ops.window_max_mean(x, w=2)
    assert ops.first_k_mean(x, k=np.int32(3)) == ops.first_k_mean(x, k=3)
    assert ops.decayed_mean(x, lam=np.float32(2.0)) == ops.decayed_mean(x, lam=2)


# Batch against a naive per-trace reference -------------------------------------------------------------------------

def naive(name, x, **kw):
    x = list(map(float, x))
    T = len(x)
    if name == "decayed_mean":
        lam = kw["lam"]
        w = [lam / (lam + t) for t in range(T)]
        return sum(a * b for a, b in zip(w, x, strict=True)) / sum(w)
    if name == "window_max_mean":
        w = kw["w"]
        if w > T:
            return sum(x) / T
        return max(sum(x[i:i + w]) / w for i in range(T - w + 1))
    if name == "slope":
        if T < 2:
            return 0.0
        return float(np.polyfit(np.arange(T), x, 1)[0])
    if name == "segment_var":
        return float(np.var(x))
    raise KeyError(name)


@pytest.mark.parametrize("name, fn, kw", [
    ("decayed_mean", ops.decayed_mean, {"lam": 2.0}),
    ("decayed_mean", ops.decayed_mean, {"lam": 4.0}),
    ("window_max_mean", ops.window_max_mean, {"w": 4}),
    ("window_max_mean", ops.window_max_mean, {"w": 3}),
    ("slope", ops.slope, {}),
    ("segment_var", ops.segment_var, {}),
])
def test_batch_equals_naive_per_trace(name, fn, kw):
    rng = np.random.default_rng(1)
    arrays = [rng.gamma(1.0, 2.0, size=rng.integers(1, 30)) for _ in range(200)]
    batch = fn(ops.Ragged.from_arrays(arrays), **kw)
    expected = [naive(name, a, **kw) for a in arrays]
    np.testing.assert_allclose(batch, expected, rtol=1e-9, atol=1e-9)
    # the single-trace call gives the same numbers
    np.testing.assert_allclose([fn(a, **kw) for a in arrays[:20]], expected[:20], rtol=1e-12)


def test_ragged_round_trip():
    arrays = [np.array([1.0, 2.0]), np.array([]), np.array([3.0])]
    batch = ops.Ragged.from_arrays(arrays)
    assert [a.tolist() for a in batch.split()] == [[1.0, 2.0], [], [3.0]]
    assert batch.lengths.tolist() == [2, 0, 1]
    assert batch.positions.tolist() == [0, 1, 0]


# Properties ------------------------------------------------------------------------------------------------------

risk_values = st.lists(st.floats(min_value=0.0, max_value=50.0, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(risk_values, st.integers(1, 6))
def test_window_max_between_mean_of_any_window_and_max(x, w):
    m = ops.window_max_mean(x, w=w)
    assert m <= max(x) + 1e-12
    if len(x) >= w:
        assert m >= max(naive("window_max_mean", x[i:i + w], w=w) for i in range(len(x) - w + 1)) - 1e-9


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.data())
def test_window_max_at_least_mean_when_windows_tile_the_trace(w, n_windows, data):
    # M_w(x) >= mean(x) holds when T < w or T is a multiple of w (disjoint windows average to the mean); it does
    # not hold in general, e.g. x = [10, 0, 0, 0, 0, 10], w = 4 (see the next test).
    x = data.draw(st.lists(st.floats(0.0, 50.0), min_size=w * n_windows, max_size=w * n_windows))
    assert ops.window_max_mean(x, w=w) >= np.mean(x) - 1e-9


def test_window_max_can_be_below_mean_for_ragged_lengths():
    x = [10, 0, 0, 0, 0, 10]
    assert ops.window_max_mean(x, w=4) == pytest.approx(2.5) and np.mean(x) == pytest.approx(20 / 6)


@settings(max_examples=300, deadline=None)
@given(risk_values, st.integers(1, 6))
def test_appending_a_zero_risk_token_never_increases_window_max(x, w):
    assert ops.window_max_mean(x + [0.0], w=w) <= ops.window_max_mean(x, w=w) + 1e-12


@settings(max_examples=200, deadline=None)
@given(risk_values, st.floats(0.1, 10.0))
def test_decayed_mean_lies_between_min_and_max(x, lam):
    d = ops.decayed_mean(x, lam=lam)
    assert min(x) - 1e-9 <= d <= max(x) + 1e-9


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 50), st.floats(-5, 5), st.floats(-5, 5))
def test_slope_of_a_line_is_its_coefficient(n, a, b):
    x = a * np.arange(n) + b
    assert ops.slope(x) == pytest.approx(a, abs=1e-9)


def test_batches_made_with_with_values_share_index_arrays_whichever_computes_them_first():
    s = ops.Ragged.from_arrays([[1.0, 2.0, 3.0], [4.0], [5.0, 6.0]])
    p = s.with_values(np.exp(-s.values))
    h = p.with_values(np.ones(6))
    assert p.positions is s.positions and h.segment_ids is s.segment_ids and h.lengths is p.lengths  # p computed
    assert s.positions.tolist() == [0, 1, 2, 0, 0, 1] and s.segment_ids.tolist() == [0, 0, 0, 1, 2, 2]
    assert s.lengths.tolist() == [3, 1, 2] and not s.positions.flags.writeable
    other = ops.Ragged(s.values, s.offsets)  # built on its own: its own arrays, the same values
    assert other.positions is not s.positions and other.positions.tolist() == s.positions.tolist()
