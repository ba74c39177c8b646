"""Flagging with a guarantee (trace_core.flagging.guarantee): Learn-then-Test with fallback tests on labeled calibration
answers, checked by hand on small cases and by simulation over thousands of redrawn calibration sets from known
distributions (confident mistakes among the most confident answers included)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from trace_core.flagging.flag import threshold_for_risk
from trace_core.flagging.guarantee import GRID, fallback_starts, guaranteed_threshold, needed

REDRAWS = 2_000
TOP = 0.97  # "confident_top": the answers with p above it are right only 70% of the time


def selective_risk(threshold: float, kind: str) -> float:
    """The error rate among kept answers, exactly, for P(correct) = p ~ Uniform(0, 1) with P(right | p) = f(p)."""
    t = threshold
    if t >= 1:
        return 0.0
    if kind == "calibrated":  # f(p) = p: E[1 - p | p >= t]
        return (1 - t) / 2
    if kind == "overconfident":  # f(p) = p ** 2: the calibrator says p, the answers are right less often
        return 1 - (1 - t ** 3) / (3 * (1 - t))
    if kind == "confident_top":  # f(p) = p, but 0.7 above TOP: confident mistakes, a risk that is not monotone
        if t >= TOP:
            return 0.3
        return ((1 - t) ** 2 / 2 - (1 - TOP) ** 2 / 2 + 0.3 * (1 - TOP)) / (1 - t)
    if kind == "flat":  # f(p) = 0.795: every threshold lets 20.5% errors through
        return 0.205
    raise ValueError(kind)


def right(p: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    rate = {"calibrated": p, "overconfident": p ** 2, "confident_top": np.where(p > TOP, 0.7, p),
            "flat": np.full_like(p, 0.795)}[kind]
    return (rng.random(p.shape[0]) < rate).astype(int)


@pytest.mark.parametrize("kind, n, max_risk, delta, least_certified", [
    ("calibrated", 500, 0.1, 0.1, 0.25),
    ("calibrated", 2_000, 0.05, 0.05, 0.1),  # a clean top: one sequence from it certified more (~33%)
    ("overconfident", 1_000, 0.1, 0.2, 0.25),
    ("confident_top", 1_500, 0.2, 0.1, 0.25),  # the fixed sequence from the top certified ~2% of these
    ("flat", 1_500, 0.2, 0.1, 0.0),  # every threshold is too risky: each certificate is a violation
])
@pytest.mark.slow
def test_the_guarantee_holds_over_redrawn_calibration_sets(kind, n, max_risk, delta, least_certified):
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
    assert certified >= least_certified * REDRAWS  # it does certify thresholds: the test measured something
    assert naive_failed / REDRAWS > delta + slack  # and the empirical choice would have broken the promise


def test_the_selective_risks_are_right():
    rng = np.random.default_rng(0)
    p = rng.random(400_000)
    for kind in ("calibrated", "overconfident", "confident_top", "flat"):
        y = right(p, kind, rng)
        for t in (0.0, 0.5, 0.9, 0.98):
            assert 1 - y[p >= t].mean() == pytest.approx(selective_risk(t, kind), abs=0.01), (kind, t)


def test_the_p_values_by_hand():
    # twelve answers, the second most confident wrong: it stops the first start, the second start certifies
    p = np.round(np.linspace(0.99, 0.88, 12), 2)
    y = np.array([1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0])
    # max_risk 0.5, delta 0.3: two starts fit in 12 answers (needed(0.5, 0.15) = 3, then 6), each at level 0.15
    assert fallback_starts(12, 0.5, 0.3) == [3, 6] and needed(0.5, 0.15) == 3
    g = guaranteed_threshold(p, y, max_risk=0.5, delta=0.3)
    # the first start (3 kept, 1 wrong): P(Bin(3, .5) <= 1) = 0.5 > 0.15 fails; 4 and 5 kept have no level of their own
    assert binom.cdf(1, 3, 0.5) == pytest.approx(0.5)
    # the second (6 kept, 1 wrong): 0.109 <= 0.15 passes, and hands its level on: 7, 8 (1 wrong), 9, 10 (2 wrong),
    # 11 (3 wrong: 0.113) pass; 12 (4 wrong: 0.194) fails
    assert binom.cdf(1, 6, 0.5) <= 0.15 and binom.cdf(3, 11, 0.5) <= 0.15 < binom.cdf(4, 12, 0.5)
    assert g.threshold == 0.89 and (g.n_kept, g.errors_kept) == (11, 3)
    assert g.n_calibration == 12 and g.certified
    # one fixed sequence from the top would stop at once: 2 kept, 1 wrong, P = 0.75 > 0.3


def test_when_no_start_passes_the_confident_wrong_answers_are_named():
    # the same answers with the sixth wrong too: the second start fails as well (6 kept, 2 wrong: 0.34 > 0.15)
    p = np.round(np.linspace(0.99, 0.88, 12), 2)
    y = np.array([1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0])
    order = np.array([4, 0, 11, 2, 7, 1, 3, 10, 5, 6, 8, 9])  # given in another order than by confidence
    g = guaranteed_threshold(p[order], y[order], max_risk=0.5, delta=0.3)
    assert g.threshold is None and g.starts == ((3, 1), (6, 2)) and g.n_top == 3
    assert g.blocking == (int(np.flatnonzero(order == 1)[0]),)  # the second most confident, where it was given
    rows = [f"{100 + i}" for i in range(12)]  # the caller's names for the answers (file rows)
    text = g.sentence(rows)
    assert "No threshold can be guaranteed" in text
    assert f"the 1 wrong answer among the 3 most confident (row {rows[g.blocking[0]]}) stops the first test" in text
    assert "the later start fails too (up to the 6 most confident, 33.3% of them wrong)" in text
    assert "keeping none" in text and "exchangeable" in text
    assert f"(answer {g.blocking[0] + 1})" in g.sentence()  # without rows: its 1-based position


def test_the_labeled_answers_needed_would_certify_at_the_same_error_rates():
    rng = np.random.default_rng(3)
    p = rng.random(300)
    y = (rng.random(300) < p).astype(int)
    y[np.argsort(-p)[[1, 4]]] = 0  # two confident mistakes
    g = guaranteed_threshold(p, y, max_risk=0.2, delta=0.1)
    assert g.threshold is None and len(g.blocking) >= 2 and g.labeled_needed is not None
    assert f"About {g.labeled_needed:,} labeled answers would be needed" in g.sentence()
    # the same answers repeated (the same error rate at every coverage) certify with that many, not with far fewer
    copies = math.ceil(g.labeled_needed / 300)
    assert guaranteed_threshold(np.tile(p, copies), np.tile(y, copies), max_risk=0.2, delta=0.1).certified
    fewer = copies // 2
    assert not guaranteed_threshold(np.tile(p, fewer), np.tile(y, fewer), max_risk=0.2, delta=0.1).certified


def test_more_labeled_answers_would_not_help_when_every_coverage_is_too_risky():
    rng = np.random.default_rng(4)
    p = rng.random(500)
    y = (rng.random(500) < 0.6).astype(int)  # 40% wrong whatever the probability
    g = guaranteed_threshold(p, y, max_risk=0.2, delta=0.1)
    assert g.threshold is None and g.labeled_needed is None
    assert "More labeled answers would not help" in g.sentence()


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


def test_cli_flags_every_answer_when_a_small_risk_set_certifies_nothing(files, capsys):
    import pandas as pd

    from trace_core.cli import main

    small_path, _, _ = files["small"]
    new_path, new_traces, _ = files["new"]
    out = files["folder"] / "flagged.csv"
    assert main(["flag", str(new_path), "--calibrator", str(files["calibrator"]), "--risk-data",
                 str(small_path), "--max-risk", "0.02", "--delta", "0.05", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "No threshold can be guaranteed" in err and f"at least {needed(0.02, 0.05):,}" in err
    assert "keeping none" in err
    flagged = pd.read_csv(out)  # keeping none is the guaranteed choice: every answer is flagged, least likely first
    assert len(flagged) == len(new_traces) and flagged["probability_correct"].is_monotonic_increasing


def test_sharded_flag_flags_every_answer_when_nothing_certifies(files, capsys):
    """Over shards too: the output is written, every answer flagged, and the reason said as a warning."""
    import shutil

    import pandas as pd

    from trace_core.cli import main

    small_path, _, _ = files["small"]
    new_path, new_traces, _ = files["new"]
    shards = files["folder"] / "shards"
    shards.mkdir()
    shutil.copy(new_path, shards / "a.jsonl")
    out = files["folder"] / "flagged"
    assert main(["flag", str(shards), "--calibrator", str(files["calibrator"]), "--risk-data", str(small_path),
                 "--max-risk", "0.02", "--delta", "0.05", "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "No threshold can be guaranteed" in err and "keeping none" in err, err
    flagged = pd.read_parquet(out / "a.parquet")
    assert len(flagged) == len(new_traces) and flagged["flagged"].all()
    assert f"flagged {len(new_traces):,} of {len(new_traces):,} answers" in err


def test_cli_names_the_confident_wrong_rows_that_stop_the_guarantee(files, capsys):
    import pandas as pd

    from trace_core import TracePlus, read_dataset, write_dataset
    from trace_core.cli import main

    risk_path, risk_traces, _ = files["risk"]
    calibrator = TracePlus.from_json(files["calibrator"].read_text(encoding="utf-8"))
    # 60 labeled answers across the range of confidence, all right but the two most confident
    keep = np.argsort(-calibrator.predict_proba(risk_traces))[::25][:60]
    frame = read_dataset(risk_path).frame.iloc[keep].reset_index(drop=True).drop(columns=["row"])
    frame["label"] = 1
    frame.loc[[0, 1], "label"] = 0
    small = files["folder"] / "confident_mistakes.jsonl"
    write_dataset(frame, small, traces=[risk_traces[i] for i in keep])
    read = read_dataset(small)
    g = guaranteed_threshold(calibrator.predict_proba(list(read.traces)), read.labels, max_risk=0.1, delta=0.1)
    assert g.threshold is None and sorted(g.blocking) == [0, 1]  # the two stop every start
    rows = read.frame["row"].tolist()
    out = files["folder"] / "flagged.csv"
    assert main(["flag", str(files["new"][0]), "--calibrator", str(files["calibrator"]), "--risk-data", str(small),
                 "--max-risk", "0.1", "--delta", "0.1", "--out", str(out)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"confident_mistakes.jsonl: {g.sentence(rows)}" in err, err  # named by their rows in the file
    assert f"the 2 wrong answers among the {g.n_top} most confident (rows {rows[0]} and {rows[1]})" in err, err
    assert len(pd.read_csv(out)) == 500  # every answer flagged


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


def test_cli_group_by_certifies_each_group_and_keeps_by_its_threshold(files, capsys):
    """flag --group-by COLUMN: one threshold per group of --risk-data at delta / groups; each new answer is kept by
    its group's; a group of the new answers without labeled answers is flagged whole, and said."""
    import pandas as pd

    from trace_core import TracePlus, write_dataset
    from trace_core.cli import main
    from trace_core.data import read_dataset
    from trace_core.flagging.guarantee import guaranteed_thresholds

    folder = files["folder"]

    def grouped(key, name, names):
        path, traces, y = files[key]
        frame = read_dataset(path).frame.drop(columns=["row"])
        frame["family"] = [names[i % len(names)] for i in range(len(frame))]
        write_dataset(frame, folder / name, traces=traces)
        return folder / name, traces, y, frame["family"].to_numpy()

    risk_path, risk_traces, risk_y, risk_groups = grouped("risk", "risk_g.jsonl", ["a", "b"])
    new_path, new_traces, _, new_groups = grouped("new", "new_g.jsonl", ["a", "b", "c"])
    out = folder / "flagged_g.csv"
    assert main(["flag", str(new_path), "--calibrator", str(files["calibrator"]), "--risk-data", str(risk_path),
                 "--max-risk", "0.15", "--delta", "0.1", "--group-by", "family", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    calibrator = TracePlus.from_json(files["calibrator"].read_text(encoding="utf-8"))
    found = guaranteed_thresholds(calibrator.predict_proba(risk_traces), risk_y, risk_groups, max_risk=0.15,
                                  delta=0.1)
    assert set(found) == {"a", "b"} and all(g.delta == 0.05 for g in found.values())
    assert "family = 'a': Keeping answers" in err or "warning: family = 'a':" in err
    assert "1 group(s)" in err and "(e.g. 'c')" in err and "all flagged" in err
    p_new = calibrator.predict_proba(new_traces)
    limits = {k: (g.threshold if g.threshold is not None else np.inf) for k, g in found.items()}
    expected = sum(p < limits.get(g, np.inf) for p, g in zip(p_new, new_groups, strict=True))
    flagged = pd.read_csv(out)
    assert len(flagged) == expected
    assert (flagged["family"] == "c").sum() == (new_groups == "c").sum()


def test_cli_group_by_needs_max_risk_and_one_file(files, capsys):
    from trace_core.cli import main

    new_path, _, _ = files["new"]
    out = files["folder"] / "x.csv"
    assert main(["flag", str(new_path), "--calibrator", str(files["calibrator"]), "--threshold", "0.5",
                 "--group-by", "family", "--out", str(out)]) == 1
    assert "--group-by is for --max-risk" in capsys.readouterr().err
    risk_path, _, _ = files["risk"]
    assert main(["flag", str(new_path), "--calibrator", str(files["calibrator"]), "--risk-data", str(risk_path),
                 "--max-risk", "0.2", "--group-by", "family", "--out", str(out)]) == 1
    assert "has no column 'family'" in capsys.readouterr().err


def test_cli_warns_when_the_labeled_answers_repeat_prompts(files, capsys):
    """Several answers to one prompt are not independent, as the guarantee's binomial tests assume: said."""
    from trace_core import write_dataset
    from trace_core.cli import main
    from trace_core.data import read_dataset

    risk_path, risk_traces, _ = files["risk"]
    frame = read_dataset(risk_path).frame.drop(columns=["row"])
    frame["prompt"] = [f"Q{i // 4}" for i in range(len(frame))]  # four answers per prompt
    repeated = files["folder"] / "repeated.jsonl"
    write_dataset(frame, repeated, traces=risk_traces)
    new_path, _, _ = files["new"]
    assert main(["flag", str(new_path), "--calibrator", str(files["calibrator"]), "--risk-data", str(repeated),
                 "--max-risk", "0.2", "--out", str(files["folder"] / "f.csv")]) == 0
    err = capsys.readouterr().err
    assert f"{len(frame) - len(frame) // 4:,} labeled answers repeat an earlier answer's prompt" in err
    assert "keep one answer per prompt" in err
    risk_path, _, _ = files["risk"]  # distinct prompts: no such warning
    assert main(["flag", str(new_path), "--calibrator", str(files["calibrator"]), "--risk-data", str(risk_path),
                 "--max-risk", "0.2", "--out", str(files["folder"] / "g.csv")]) == 0
    assert "repeat an earlier answer's prompt" not in capsys.readouterr().err


def test_repeated_prompts_note_counts_repeats_only():
    from trace_core.flagging.guarantee import repeated_prompts_note

    assert repeated_prompts_note(["a", "b", "c"]) is None and repeated_prompts_note([]) is None
    assert repeated_prompts_note(["a", "b", "a", "a"]).startswith("2 labeled answers repeat")
