from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import random_traces
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from trace_core import (
    IsotonicCalibrator,
    NotFittedError,
    PlattCalibrator,
    TracePlus,
    calibrator_from_json,
    feature_matrix,
    trace_confidence,
)


@pytest.fixture(scope="module")
def data():
    traces = random_traces(400, seed=11)
    conf = trace_confidence(traces)
    rng = np.random.default_rng(0)
    # Labels from a noisy function of the trace, so both classes appear and features carry signal.
    y = (rng.random(400) < 0.15 + 0.8 * conf / conf.max()).astype(int)
    return traces, y


@pytest.mark.parametrize("feature_set", ["paper", "extended"])
def test_traceplus_equals_sklearn_pipeline(data, feature_set):
    traces, y = data
    model = TracePlus(feature_set=feature_set, C=0.5).fit(traces, y)
    F = feature_matrix(traces, feature_set=feature_set)
    scaler = StandardScaler().fit(F)
    reference = LogisticRegression(C=0.5, tol=1e-12, max_iter=10000).fit(scaler.transform(F), y)
    np.testing.assert_allclose(model.predict_proba(traces), reference.predict_proba(scaler.transform(F))[:, 1],
                               atol=1e-6)
    assert model.coef_.shape == (F.shape[1],) and model.n_samples_ == 400
    # the feature matrix is accepted directly too
    np.testing.assert_allclose(model.predict_proba(F), model.predict_proba(traces))
    contributions = model.feature_contributions(traces)
    np.testing.assert_allclose(contributions.sum(axis=1) + model.intercept_, model.decision_function(traces))


def test_traceplus_json_round_trip_predicts_identically(data):
    traces, y = data
    model = TracePlus().fit(traces, y)
    text = model.to_json()
    assert json.loads(text)["type"] == "TracePlus"
    for loaded in (TracePlus.from_json(text), calibrator_from_json(text)):
        np.testing.assert_array_equal(loaded.predict_proba(traces), model.predict_proba(traces))


@pytest.mark.parametrize("make", [TracePlus, PlattCalibrator, IsotonicCalibrator])
def test_predicting_before_fit_raises_clear_error(make):
    with pytest.raises(NotFittedError, match=f"This {make.__name__} is not fitted yet"):
        make().predict_proba(np.zeros((1, 8)) if make is TracePlus else [0.5])
    with pytest.raises(NotFittedError):
        make().to_json()


def test_fit_errors_name_the_problem(data):
    traces, y = data
    with pytest.raises(ValueError, match="both correct .* and incorrect"):
        TracePlus().fit(traces[:10], np.ones(10))
    with pytest.raises(ValueError, match="`y` has 3 labels but there are 400 answers"):
        TracePlus().fit(traces, [0, 1, 0])
    with pytest.raises(ValueError, match=r"0/1 labels .* index 1 is 2"):
        PlattCalibrator().fit([0.1, 0.2, 0.3], [0, 2, 1])
    with pytest.raises(ValueError, match="must be finite; index 1 is nan"):
        IsotonicCalibrator().fit([0.1, np.nan, 0.3], [0, 1, 1])
    with pytest.raises(ValueError, match=r"shape \(n, 8\)"):
        TracePlus().fit(np.zeros((4, 3)), [0, 1, 0, 1])
    with pytest.raises(ValueError, match="`C` must be a finite real number > 0"):
        TracePlus(C=0).fit(traces, y)
    with pytest.raises(TypeError, match="`C` must be a finite real number > 0, got '1'"):
        PlattCalibrator(C="1").fit([0.1, 0.2, 0.3], [0, 1, 1])
    with pytest.raises(TypeError, match="`max_iter` must be an int >= 1, got 10.5"):
        TracePlus(max_iter=10.5).fit(traces, y)


@pytest.mark.parametrize("C", [1e4, 0.05])
def test_platt_equals_sklearn_logistic_on_standardised_score(data, C):
    traces, y = data
    score = trace_confidence(traces)
    platt = PlattCalibrator(C=C).fit(score, y)
    z = (score - score.mean()) / score.std()
    reference = LogisticRegression(C=C, tol=1e-12, max_iter=10000).fit(z[:, None], y)
    np.testing.assert_allclose(platt.predict_proba(score), reference.predict_proba(z[:, None])[:, 1], atol=1e-6)
    loaded = calibrator_from_json(platt.to_json())
    np.testing.assert_array_equal(loaded.predict_proba(score), platt.predict_proba(score))


def test_isotonic_equals_sklearn(data):
    traces, y = data
    score = trace_confidence(traces)
    iso = IsotonicCalibrator().fit(score, y)
    reference = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(score, y)
    probe = np.concatenate([score, [-1.0, 2.0], np.linspace(0, 1, 50)])
    np.testing.assert_allclose(iso.predict_proba(probe), reference.predict(probe), atol=1e-12)
    loaded = calibrator_from_json(iso.to_json())
    np.testing.assert_array_equal(loaded.predict_proba(probe), iso.predict_proba(probe))
    assert (np.diff(iso.predict_proba(np.sort(probe))) >= 0).all()


@pytest.mark.parametrize("kind", ["normal", "integers", "near_ties", "rounded", "wide"])
def test_isotonic_thresholds_equal_sklearn_number_for_number(kind):
    """Ties, and chains of values closer than 1e-15 to each other that scikit-learn splits by their distance to the
    run's first value, give the very same thresholds."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(2, 2000))
        x = {"normal": lambda n=n: rng.normal(size=n), "integers": lambda n=n: rng.integers(0, 20, n).astype(float),
             "near_ties": lambda n=n: 0.5 + rng.integers(0, 12, n) * 2.2e-16,
             "rounded": lambda n=n: np.round(rng.random(n), 3),
             "wide": lambda n=n: -np.exp(rng.normal(size=n) * 30)}[kind]()
        y = (rng.random(n) < 0.4).astype(int)
        y[:2] = [0, 1]
        ours = IsotonicCalibrator().fit(x, y)
        theirs = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(x, y)
        np.testing.assert_array_equal(ours.x_thresholds_, theirs.X_thresholds_)
        np.testing.assert_array_equal(ours.y_thresholds_, theirs.y_thresholds_)


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.update(type="Pickle"), "unknown calibrator type"),
    (lambda d: d.update(format_version=99), "unsupported calibrator format_version"),
    (lambda d: d.update(coef=[1.0, 2.0]), "'coef' must hold 8 numbers"),
    (lambda d: d.update(scale=[0.0] * 8), r"'scale\[0\]' must be > 1e-12"),
    (lambda d: d.update(feature_names=["a"] * 8), "'feature_names' holds unknown feature 'a'"),
    (lambda d: d.update(feature_names=d["feature_names"][::-1]), "do not match feature set"),
])
def test_from_json_validates(data, mutate, match):
    traces, y = data
    obj = json.loads(TracePlus().fit(traces, y).to_json())
    mutate(obj)
    with pytest.raises(ValueError, match=match):
        calibrator_from_json(json.dumps(obj))


def test_probabilities_are_in_unit_interval_even_for_extreme_scores():
    platt = PlattCalibrator().fit(np.array([0.0, 0.1, 0.9, 1.0] * 5), np.array([0, 0, 1, 1] * 5))
    p = platt.predict_proba([-1e6, 1e6])
    assert ((p >= 0) & (p <= 1)).all()


@pytest.mark.parametrize("C", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("case", ["overlapping", "separable", "constant_feature", "imbalanced"])
def test_traceplus_newton_solver_matches_sklearn_coefficients(C, case):
    rng = np.random.default_rng(3)
    F = rng.normal(size=(300, 8)) * rng.uniform(0.1, 5.0, size=8)
    if case == "separable":
        y = (F[:, 0] > 0).astype(int)
    elif case == "imbalanced":
        y = (rng.random(300) < 0.03 + 0.05 * (F[:, 1] > 0)).astype(int)
        y[:2] = [0, 1]
    else:
        y = (rng.random(300) < 1 / (1 + np.exp(-F[:, 0] + 0.5 * F[:, 2]))).astype(int)
    if case == "constant_feature":
        F[:, 3] = 2.5
    model = TracePlus(C=C).fit(F, y)
    scaler = StandardScaler().fit(F)
    reference = LogisticRegression(C=C, tol=1e-12, max_iter=100000).fit(scaler.transform(F), y)
    np.testing.assert_allclose(model.coef_, reference.coef_.ravel(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.intercept_, reference.intercept_[0], rtol=1e-4, atol=1e-5)
    assert np.isfinite(model.predict_proba(F)).all()


def _guarded_imports(tree) -> set[int]:
    """ids of import statements inside ``try: ... except ImportError`` (optional at run time by design)."""
    import ast

    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)
                        if isinstance(n, (ast.Import, ast.ImportFrom))}
    return guarded


def test_every_library_import_is_a_declared_dependency():
    """A third-party module the library imports (scipy's expit here) must be declared in pyproject.toml.

    The recording layer (``record/``) and ``semantic.py`` import their optional extras (torch, transformers, ...);
    they are checked by the extras' own tests, not here.
    """
    import ast
    import importlib.metadata
    import re
    import sys
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[3]
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]

    def canonical(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    declared = {canonical(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]) for r in requirements}
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for path in sorted((root / "trace_core").rglob("*.py")):
        relative = path.relative_to(root / "trace_core")
        if relative.parts[0] == "record" or relative.name == "semantic.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = _guarded_imports(tree)
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top == "trace_core":
                    continue
                dists = {canonical(d) for d in distributions.get(top, [top])}
                if not dists & declared:
                    undeclared.setdefault(top, []).append(str(relative))
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
