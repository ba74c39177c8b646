"""Flagging with a guarantee (trace_core.guarantee): Learn-then-Test on labeled calibration answers, checked by hand on
small cases and by simulation over thousands of redrawn calibration sets from known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from trace_core.flag import threshold_for_risk
from trace_core.guarantee import GRID, guaranteed_threshold, needed

REDRAWS = 2_000


def selective_risk(threshold: float, kind: str) -> float:
    """The error rate among kept answers, exactly, for P(correct) = p ~ Uniform(0, 1) with P(right | p) = f(p)."""
    t = threshold
    if t >= 1:
        return 0.0
    if kind == "calibrated":  # f(p) = p: E[1 - p | p >= t]
        return (1 - t) / 2
    if kind == "overconfident":  # f(p) = p ** 2: the calibrator says p, the answers are right less often
        return 1 - (1 - t ** 3) / (3 * (1 - t))
    raise ValueError(kind)


def right(p: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    rate = p if kind == "calibrated" else p ** 2
    return (rng.random(p.shape[0]) < rate).astype(int)


@pytest.mark.parametrize("kind, n, max_risk, delta", [
    ("calibrated", 500, 0.1, 0.1),
    ("calibrated", 2_000, 0.05, 0.05),
    ("overconfident", 1_000, 0.1, 0.2),
])
@pytest.mark.slow
def test_the_guarantee_holds_over_redrawn_calibration_sets(kind, n, max_risk, delta):
    rng = np.random.default_rng(7)
    failed = certified = naive_failed = 0
    for _ in range(REDRAWS):
        p = rng.random(n)
        y = right(p, kind, rng)
        g = guaranteed_threshold(p, y, max_risk=max_risk, delta=delta)
        if g.threshold is not None:
            certified += 1
            failed += selective_risk(g.threshold, kind) > max_risk
        naive = threshold_for_risk(p, y, max_risk)  # the empirical choice: risk <= max_risk on these answers
        naive_failed += np.isfinite(naive) and selective_risk(naive, kind) > max_risk
    slack = 3 * math.sqrt(delta * (1 - delta) / REDRAWS)  # simulation error
    assert failed / REDRAWS <= delta + slack, (failed, certified)
    assert certified >= REDRAWS // 4  # it does certify thresholds: the test measured something
    assert naive_failed / REDRAWS > delta + slack  # and the empirical choice would have broken the promise


def test_the_p_values_by_hand():
    # six answers: 0.99 right, 0.97 right, 0.95 wrong, 0.9 right, 0.8 right, 0.5 wrong
    p = np.array([0.99, 0.97, 0.95, 0.9, 0.8, 0.5])
    y = np.array([1, 1, 0, 1, 1, 0])
    # with max_risk 0.5 and delta 0.3: needed = 2 (0.5 ** 2 = 0.25 <= 0.3); the sequence starts at 0.97 (2 kept)
    g = guaranteed_threshold(p, y, max_risk=0.5, delta=0.3)
    assert needed(0.5, 0.3) == 2
    # 0.97: 2 kept, 0 wrong: p-value 0.25 passes; 0.95: 3 kept, 1 wrong: P(Bin(3, .5) <= 1) = 0.5 fails
    assert binom.cdf(1, 3, 0.5) == pytest.approx(0.5)
    assert g.threshold == 0.97 and (g.n_kept, g.errors_kept) == (2, 0)
    assert g.n_calibration == 6 and g.certified


def test_a_set_too_small_gets_no_threshold_and_says_what_it_needs():
    p = np.full(40, 0.99)
    y = np.ones(40, dtype=int)
    g = guaranteed_threshold(p, y, max_risk=0.05, delta=0.1)  # needs 45 kept answers, all correct
    assert g.threshold is None and g.needed == 45
    text = g.sentence()
    assert "No threshold can be guaranteed" in text and "45" in text and "40 labeled answers" in text
    assert "exchangeable" in text
    y[:] = 1
    p = np.full(45, 0.99)
    assert guaranteed_threshold(p, np.ones(45, dtype=int), max_risk=0.05, delta=0.1).threshold == 0.99


def test_the_sentence_states_the_guarantee_and_its_assumption():
    rng = np.random.default_rng(0)
    p = rng.random(3_000)
    y = (rng.random(3_000) < p).astype(int)
    g = guaranteed_threshold(p, y, max_risk=0.1, delta=0.1)
    text = g.sentence()
    assert f"P(correct) >= {g.threshold:.3f}" in text and "at most 10.0%" in text and "at least 90%" in text
    assert "Learn-then-Test" in text and "exchangeable" in text and "fitted on other answers" in text
    kept = p >= g.threshold
    assert (g.n_kept, g.errors_kept) == (int(kept.sum()), int((1 - y[kept]).sum()))


@pytest.mark.parametrize("bad, message", [
    (dict(max_risk=0.0), "max_risk"), (dict(max_risk=1.0), "max_risk"), (dict(max_risk=0.1, delta=0.0), "delta"),
    (dict(max_risk=0.1, delta=1.5), "delta"),
])
def test_settings_are_checked(bad, message):
    with pytest.raises(ValueError, match=message):
        guaranteed_threshold([0.5, 0.6], [1, 0], **{"delta": 0.1, **bad})


def test_probabilities_and_labels_are_checked():
    with pytest.raises(ValueError, match="probability"):
        guaranteed_threshold([0.5, 1.5], [1, 0], max_risk=0.1)
    with pytest.raises(ValueError, match="labels"):
        guaranteed_threshold([0.5, 0.6], [1, 2], max_risk=0.1)


def test_the_grid_is_fixed_and_descending():
    assert GRID[0] == 1.0 and GRID[-1] == 0.0 and GRID.shape == (1001,) and (np.diff(GRID) < 0).all()


# --- the command line: flag NEW --calibrator C --risk-data LABELED --max-risk ALPHA --delta DELTA -----------------

@pytest.fixture
def files(tmp_path):
    import pandas as pd
    from helpers import synthetic_trace_objects

    from trace_core import TracePlus, write_dataset

    def save(name, n, seed):
        traces, y = synthetic_trace_objects(n, seed=seed)
        path = tmp_path / name
        write_dataset(pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                                    "label": y}), path, traces=traces)
        return path, traces, np.asarray(y)

    _, fit_traces, fit_y = save("fit.jsonl", 400, 1)
    calibrator = tmp_path / "calibrator.json"
    calibrator.write_text(TracePlus().fit(fit_traces, fit_y).to_json(), encoding="utf-8")
    return {"calibrator": calibrator, "risk": save("risk.jsonl", 1_500, 2), "new": save("new.jsonl", 500, 3),
            "small": save("small.jsonl", 40, 4), "folder": tmp_path}


def test_cli_flags_with_the_threshold_certified_on_the_risk_data(files, capsys):
    import pandas as pd

    from trace_core import TracePlus
    from trace_core.cli import main

    risk_path, risk_traces, risk_y = files["risk"]
    new_path, new_traces, _ = files["new"]
    out = files["folder"] / "flagged.csv"
    assert main(["flag", str(new_path), "--calibrator", str(files["calibrator"]), "--risk-data", str(risk_path),
                 "--max-risk", "0.1", "--delta", "0.1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    calibrator = TracePlus.from_json(files["calibrator"].read_text(encoding="utf-8"))
    g = guaranteed_threshold(calibrator.predict_proba(risk_traces), risk_y, max_risk=0.1, delta=0.1)
    assert g.threshold is not None and g.sentence() in err
    p_new = calibrator.predict_proba(new_traces)
    flagged = pd.read_csv(out)
    assert len(flagged) == int((p_new < g.threshold).sum()) and (flagged["probability_correct"] < g.threshold).all()


def test_cli_says_what_a_small_risk_set_would_need(files, capsys):
    from trace_core.cli import main

    small_path, _, _ = files["small"]
    out = files["folder"] / "flagged.csv"
    assert main(["flag", str(files["new"][0]), "--calibrator", str(files["calibrator"]), "--risk-data",
                 str(small_path), "--max-risk", "0.02", "--delta", "0.05", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "No threshold can be guaranteed" in err and f"at least {needed(0.02, 0.05):,}" in err
    assert not out.exists()


@pytest.mark.parametrize("args, expected", [
    (["--max-risk", "0.1"], "--max-risk needs --risk-data"),
    (["--threshold", "0.5", "--risk-data", "RISK"], "--risk-data is for --max-risk"),
    (["--max-risk", "1.5", "--risk-data", "RISK"], "max_risk"),
    (["--max-risk", "0.1", "--delta", "0", "--risk-data", "RISK"], "delta"),
])
def test_cli_checks_the_guarantee_options(files, capsys, args, expected):
    from trace_core.cli import main

    args = [str(files["risk"][0]) if a == "RISK" else a for a in args]
    out = files["folder"] / "flagged.csv"
    assert main(["flag", str(files["new"][0]), "--calibrator", str(files["calibrator"]), "--out", str(out),
                 *args]) != 0
    assert expected in capsys.readouterr().err and not out.exists()
