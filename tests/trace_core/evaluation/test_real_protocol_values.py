"""Every per-split value of the protocol on SmolLM2's real answers, small and separable by chance (the 30
arithmetic answers with beams, 6 correct, stratified calibration parts of 10), against independent code:
scikit-learn's LogisticRegression (Platt), IsotonicRegression, roc_auc_score, average_precision_score and
brier_score_loss, the public TracePlus fitted on each split, and the ECE and AURC written out here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parents[3] / "assets" / "datasets" / "real_beams_test.csv"


def _ece(y: np.ndarray, p: np.ndarray, bins: int = 10) -> float:
    """Uniform bins, bin b holding edges[b] < p <= edges[b + 1] (the first from 0 inclusive)."""
    ids = np.searchsorted(np.linspace(0.0, 1.0, bins + 1)[1:-1], p, side="left")
    return float(sum((ids == b).mean() * abs(y[ids == b].mean() - p[ids == b].mean())
                     for b in range(bins) if (ids == b).any()))


def _aurc(y: np.ndarray, confidence: np.ndarray) -> float:
    """The mean risk over coverages 1/n .. 1, answers kept most confident first, a tie's errors spread evenly."""
    order = np.argsort(-confidence, kind="stable")
    c, wrong = confidence[order], 1 - y[order]
    risks, k = [], 0
    while k < len(c):
        j = k + int(np.sum(c[k:] == c[k]))  # the tie group at k (c descends)
        rate = wrong[k:j].mean()
        risks += [(wrong[:k].sum() + rate * (m - k)) / m for m in range(k + 1, j + 1)]
        k = j
    return float(np.mean(risks))


# scikit-learn's newton-cg warns where a part is separable; its optimum still agrees to 1e-7
@pytest.mark.filterwarnings("ignore:The line search algorithm did not converge")
@pytest.mark.filterwarnings("ignore:Line Search failed")
def test_every_split_value_on_small_real_answers_equals_independent_code():
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

    from trace_core import EvaluationConfig, evaluate, read_dataset
    from trace_core.calibration.calibrators import TracePlus
    from trace_core.data import parse_beam_logprobs
    from trace_core.evaluation.protocol import draw_splits
    from trace_core.methods.baselines import compute_baselines
    from trace_core.methods.logistic import transform_scores
    from trace_core.methods.registry import METHODS

    dataset = read_dataset(DATA)
    rows = np.flatnonzero(dataset.frame["family"].to_numpy() == "arithmetic")
    beams = parse_beam_logprobs(dataset.frame["beam_logprobs"], list(range(len(dataset.frame))))
    traces, y, beams = [dataset.traces[i] for i in rows], dataset.labels[rows], [beams[i] for i in rows]
    assert (len(y), int(y.sum())) == (30, 6)
    config = EvaluationConfig(stratified=True)
    result = evaluate(traces, y, config=config, beam_logprobs=beams)
    values = result.per_split.set_index(["method", "metric", "calibrator", "split"])["value"]
    scalar = [m for m in result.methods if METHODS[m].kind == "baseline"]
    assert {"Beam Entropy", "SeqLogP", "Max Entropy"} <= set(scalar)
    scores = compute_baselines(traces, beam_logprobs=beams, names=scalar).scores
    for split, (cal, ev) in enumerate(draw_splits(y, config)):
        for name in scalar:
            raw = scores[name].to_numpy()
            z = transform_scores(raw, METHODS[name].transform)
            mean, std = z[cal].mean(), z[cal].std() or 1.0
            platt = LogisticRegression(C=1e4, solver="newton-cg", tol=1e-12, max_iter=100_000).fit(((z[cal] - mean) / std)[:, None], y[cal])
            p_platt = platt.predict_proba(((z[ev] - mean) / std)[:, None])[:, 1]
            p_iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(z[cal], y[cal]).predict(z[ev])
            expected = {("brier", "platt"): (brier_score_loss(y[ev], p_platt), 1e-7),
                        ("ece", "platt"): (_ece(y[ev], p_platt), 1e-7),
                        ("brier", "isotonic"): (brier_score_loss(y[ev], p_iso), 1e-12),
                        ("ece", "isotonic"): (_ece(y[ev], p_iso), 1e-12),
                        ("auroc", "none"): (roc_auc_score(y[ev], raw[ev]), 1e-12),
                        ("auprc", "none"): (average_precision_score(y[ev], raw[ev]), 1e-12),
                        ("aurc", "none"): (_aurc(y[ev], raw[ev]), 1e-12)}
            for (metric, calibrator), (value, tolerance) in expected.items():
                assert values[(name, metric, calibrator, split)] == pytest.approx(value, abs=tolerance), (
                    name, metric, calibrator, split)
        p = TracePlus().fit([traces[i] for i in cal], y[cal]).predict_proba([traces[i] for i in ev])
        assert values[("TRACE+", "brier", "logistic", split)] == pytest.approx(brier_score_loss(y[ev], p), abs=1e-12)
        assert values[("TRACE+", "auroc", "none", split)] == pytest.approx(roc_auc_score(y[ev], p), abs=1e-12)
