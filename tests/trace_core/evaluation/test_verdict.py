"""The verdict on TRACE+ (trace_core.evaluation.verdict.verdict): one word per opponent and metric from a t-interval over the
splits and a minimum effect, the chosen baselines named with counts, no "+0.000 ± 0.000", the skill line, the
no-detectable-skill sentence, and a verdict in every --group-by section of the Markdown report."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from trace_core.evaluation.paired import BEST_BASELINE, average_paired, paired_comparison
from trace_core.evaluation.results import average_results, report_markdown
from trace_core.evaluation.run import EvaluationConfig, evaluate_arrays
from trace_core.evaluation.verdict import MIN_EFFECT, auroc_skill, t_interval, verdict, verdict_word
from trace_core.methods.registry import METRICS, REFERENCE
from trace_core.traces.synthetic import synthetic_traces

METHODS = ["TRACE+", "TRACE", "SeqLogP", "MinProb", REFERENCE]
T_975_19 = 2.093024054408263  # t_{0.975, 19}, from a t table
NB_RATIO = 0.65 / 0.35  # evaluation / calibration sizes at the default 35% calibration
ZERO_LOOKING = re.compile(r"[+-]0\.000(?![0-9])|± 0\.000(?![0-9])")  # "+0.000", "± 0.000" with nothing after


def _case(diffs: dict[tuple[str, str], np.ndarray], *, chosen: list[str] | None = None,
          chosen_by_metric: dict[str, list[str]] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Evaluation and calibration frames where TRACE+ minus ``versus`` on ``metric`` is ``diffs[(versus, metric)]``
    per split. ``versus`` "best baseline": the calibration parts choose ``chosen[split]`` (SeqLogP or MinProb) and
    the other baseline is 0.1 worse on that split's evaluation part."""
    rows, cal_rows = [], []
    for (versus, metric), d in diffs.items():
        fitted = "none" if METRICS[metric].on == "score" else "logistic"
        scalar = "none" if METRICS[metric].on == "score" else "platt"
        worse = -0.1 if METRICS[metric].higher_is_better else 0.1
        picks = (chosen_by_metric or {}).get(metric, chosen) or ["SeqLogP"] * len(d)
        for split, value in enumerate(d):
            base = 0.7 if METRICS[metric].higher_is_better else 0.2
            rows.append((split, "TRACE+", metric, fitted, base))
            if versus == BEST_BASELINE:
                pick = picks[split]
                other = "MinProb" if pick == "SeqLogP" else "SeqLogP"
                rows.append((split, pick, metric, scalar, base - value))
                rows.append((split, other, metric, scalar, base - value + worse))
                good = 0.9 if METRICS[metric].higher_is_better else 0.1
                cal_rows += [(split, pick, metric, scalar, good), (split, other, metric, scalar, 0.5)]
            else:
                rows.append((split, versus, metric, fitted, base - value))
    columns = ["split", "method", "metric", "calibrator", "value"]
    ev = pd.DataFrame(rows, columns=columns).drop_duplicates(["split", "method", "metric", "calibrator"])
    return ev, pd.DataFrame(cal_rows, columns=columns)


def _verdict(diffs, **kwargs):
    ev, cal = _case(diffs, chosen=kwargs.pop("chosen", None), chosen_by_metric=kwargs.pop("chosen_by_metric", None))
    paired = paired_comparison(ev, cal, methods=METHODS, metrics=list(dict.fromkeys(m for _, m in diffs)))
    return paired, verdict(paired, values=ev, **kwargs)


def test_the_t_interval_is_the_hand_computed_one_plain_and_corrected_for_overlapping_splits():
    x = np.array([0.012, 0.015, 0.009, 0.011, 0.013, 0.010, 0.014, 0.012, 0.016, 0.008,
                  0.011, 0.013, 0.012, 0.010, 0.015, 0.009, 0.012, 0.014, 0.011, 0.013])
    mean, sd = x.mean(), x.std(ddof=1)
    m, low, high = t_interval(x)
    assert m == pytest.approx(mean)
    assert (low, high) == pytest.approx((mean - T_975_19 * sd / math.sqrt(20), mean + T_975_19 * sd / math.sqrt(20)))
    half = T_975_19 * sd * math.sqrt(1 / 20 + NB_RATIO)  # Nadeau-Bengio corrected resampled t
    assert t_interval(x, test_train_ratio=NB_RATIO)[1:] == pytest.approx((mean - half, mean + half))
    scipy_stats = pytest.importorskip("scipy.stats")
    ci = scipy_stats.t.interval(0.95, df=19, loc=mean, scale=sd / math.sqrt(20))
    assert (low, high) == pytest.approx(ci)
    assert math.isnan(t_interval([0.3])[1])  # one split: no interval
    assert t_interval([0.1, np.nan, 0.3])[0] == pytest.approx(0.2)  # NaN left out


def test_minimum_effects_are_documented_constants_for_every_metric():
    assert MIN_EFFECT["brier"] == 0.005 and MIN_EFFECT["auroc"] == 0.01
    assert set(MIN_EFFECT) == set(METRICS)


def test_verdict_word_follows_each_metrics_direction():
    assert verdict_word("brier", -0.02, -0.03, -0.01) == "beats"  # lower Brier is better
    assert verdict_word("brier", 0.02, 0.01, 0.03) == "loses"
    assert verdict_word("auroc", 0.02, 0.01, 0.03) == "beats"
    assert verdict_word("aurc", 0.02, 0.01, 0.03) == "loses"
    assert verdict_word("auroc", 0.02, -0.01, 0.05) == "ties"  # the interval holds 0
    assert verdict_word("auroc", 0.005, 0.004, 0.006) == "ties"  # excludes 0, below the minimum effect
    assert verdict_word("auroc", 0.02, math.nan, math.nan) == "ties"  # no interval


def test_trace_plus_losing_every_split_loses_with_the_hand_computed_interval():
    rng = np.random.default_rng(0)
    d = 0.0123 + rng.normal(0, 0.002, 20)  # Brier: TRACE+ worse on every split
    assert (d > 0).all()
    paired, found = _verdict({(BEST_BASELINE, "brier"): d}, calibration_fraction=0.35)
    entry = found.get(BEST_BASELINE, "brier")
    half = T_975_19 * d.std(ddof=1) * math.sqrt(1 / 20 + NB_RATIO)
    assert (entry.mean, entry.low, entry.high) == pytest.approx((d.mean(), d.mean() - half, d.mean() + half))
    assert entry.word == "loses" and (entry.wins, entry.losses, entry.n_splits) == (0, 20, 20)
    assert found.sentence.startswith(
        f"TRACE+ loses to the best baseline (SeqLogP in 20 of 20 splits) on Brier (+{d.mean():#.3g}, 95% CI "
        f"+{d.mean() - half:#.3g} to +{d.mean() + half:#.3g}, wins 0 of 20 splits)")


def test_tiny_differences_whose_interval_excludes_zero_are_ties_and_never_print_as_zero():
    d = 0.0004 + 0.0001 * np.tile([-1.0, 1.0], 10)  # +0.0004 ± 0.0001 over 20 splits
    paired, found = _verdict({(BEST_BASELINE, "brier"): d, (REFERENCE, "auroc"): -d},
                             calibration_fraction=0.35)
    for entry in found.entries:
        assert entry.low > 0 or entry.high < 0  # the interval excludes zero ...
        assert entry.word == "ties"  # ... but |mean| is far below the minimum effect
    assert "+0.000400, 95% CI +0.000" in found.sentence and "-0.000400" in found.sentence
    table = paired.table(versus=(BEST_BASELINE, REFERENCE))
    assert table.loc[0, "brier"] == "+0.00040 ± 0.00010 (0/20)"
    for text in (found.sentence, found.text(), "\n".join(table.astype(str).stack()),
                 paired.to_markdown(versus=(BEST_BASELINE, REFERENCE))):
        assert not ZERO_LOOKING.search(text), text


def test_a_large_win_beats_and_words_are_per_opponent_and_metric():
    rng = np.random.default_rng(1)
    win = 0.05 + rng.normal(0, 0.01, 20)  # AUROC +0.05 ± 0.01
    _, found = _verdict({(BEST_BASELINE, "auroc"): win, (BEST_BASELINE, "brier"): -win / 5,
                         (REFERENCE, "auroc"): rng.normal(0, 0.01, 20), (REFERENCE, "brier"): np.full(20, 0.03)},
                        calibration_fraction=0.35)
    assert found.word(BEST_BASELINE, "auroc") == "beats" and found.word(BEST_BASELINE, "brier") == "beats"
    assert found.word(REFERENCE, "auroc") == "ties" and found.word(REFERENCE, "brier") == "loses"
    assert found.sentence.startswith("TRACE+ beats the best baseline (SeqLogP in 20 of 20 splits) on Brier (-0.0")
    assert "; it loses to the supervised likelihood reference on Brier (+0.0300" in found.sentence
    assert " and cannot be told apart from it on AUROC (" in found.sentence
    assert found.sentence.count(".") - found.sentence.count("0.") <= 1  # one sentence


def test_the_issue_case_no_beats_from_a_tiny_mean_and_a_loss_to_the_best_baseline_is_said_first():
    """The real-data report said "beats ... on AUROC (+0.000 ± 0.000, wins 12 of 20 splits)" while TRACE+ lost to
    the best baseline on every split."""
    rng = np.random.default_rng(2)
    tiny = 0.0002 + rng.normal(0, 0.0003, 20)
    _, found = _verdict({(BEST_BASELINE, "brier"): 0.02 + rng.normal(0, 0.003, 20),
                         (BEST_BASELINE, "auroc"): -0.03 + rng.normal(0, 0.004, 20),
                         (REFERENCE, "auroc"): tiny, (REFERENCE, "brier"): -0.006 + rng.normal(0, 0.0002, 20)},
                        calibration_fraction=0.35)
    assert found.word(BEST_BASELINE, "brier") == found.word(BEST_BASELINE, "auroc") == "loses"
    assert found.word(REFERENCE, "auroc") == "ties" and found.word(REFERENCE, "brier") == "beats"
    assert found.sentence.startswith("TRACE+ loses to the best baseline")
    assert not ZERO_LOOKING.search(found.sentence)
    assert "length-aware" not in found.text() and "gain here" not in found.text()


def test_the_chosen_baselines_are_named_with_counts_shared_or_per_metric():
    picks = ["SeqLogP"] * 14 + ["MinProb"] * 6
    d = np.full(20, 0.02)
    paired, found = _verdict({(BEST_BASELINE, "brier"): d, (BEST_BASELINE, "auroc"): -d}, chosen=picks)
    assert "the best baseline (SeqLogP in 14 of 20 splits, MinProb in 6) on Brier" in found.sentence
    assert found.get(BEST_BASELINE, "brier").chosen == {"SeqLogP": 14, "MinProb": 6}
    assert paired.chosen_note() == ("Brier: SeqLogP in 14 of 20 splits, MinProb in 6; "
                                    "AUROC: SeqLogP in 14 of 20 splits, MinProb in 6")
    other = ["MinProb"] * 11 + ["SeqLogP"] * 9
    _, per_metric = _verdict({(BEST_BASELINE, "brier"): d, (BEST_BASELINE, "auroc"): -d},
                             chosen_by_metric={"brier": picks, "auroc": other})
    assert "wins 0 of 20 splits; chosen: SeqLogP in 14 of 20 splits, MinProb in 6)" in per_metric.sentence
    assert "wins 0 of 20 splits; chosen: MinProb in 11 of 20 splits, SeqLogP in 9)" in per_metric.sentence


def test_an_average_over_groups_counts_every_groups_choices():
    d = np.full(4, 0.02)
    ev_a, cal_a = _case({(BEST_BASELINE, "auroc"): d}, chosen=["SeqLogP"] * 4)
    ev_b, cal_b = _case({(BEST_BASELINE, "auroc"): d}, chosen=["MinProb", "SeqLogP", "MinProb", "MinProb"])
    a = paired_comparison(ev_a, cal_a, methods=METHODS, metrics=["auroc"])
    b = paired_comparison(ev_b, cal_b, methods=METHODS, metrics=["auroc"])
    averaged = average_paired([a, b], splits=[0, 1, 2, 3])
    row = averaged.get("TRACE+", BEST_BASELINE, "auroc")
    assert row["chosen_counts"] == {"SeqLogP": 5, "MinProb": 3}
    assert row["chosen"] == "SeqLogP in 5 of 8 group splits, MinProb in 3"
    assert "per dataset" not in averaged.chosen_note()


def test_the_extra_metric_gets_its_own_word():
    d = np.full(20, -0.03)
    _, found = _verdict({(BEST_BASELINE, "brier"): d, (BEST_BASELINE, "aurc"): d}, extra_metric="aurc")
    assert found.word(BEST_BASELINE, "aurc") == "beats" and "on AURC (-0.0300" in found.sentence


@pytest.fixture(scope="module")
def spike_results():
    """Two groups of informative synthetic traces, evaluated with a few methods, and their average."""
    config = EvaluationConfig(n_splits=6)
    methods = ["TRACE+", "TRACE", "SeqLogP", "Mean Entropy", REFERENCE]
    out = {}
    for seed, name in [(0, "family = a"), (1, "family = b")]:
        s, h, y = synthetic_traces(400, kind="spike", mean_length=30, seed=seed)
        out[name] = evaluate_arrays(s, h, y, config=config, methods=methods)
    out["average"] = average_results(list(out.values()))
    return out


def test_each_group_section_of_the_report_has_its_own_paired_table_and_verdict(spike_results):
    text = report_markdown(spike_results)
    sections = text.split("### ")[1:]
    assert [s.split(" (")[0] for s in sections] == ["family = a", "family = b", "average"]
    for section, result in zip(sections, spike_results.values(), strict=True):
        assert "| TRACE+ | best baseline |" in section and "| TRACE+ | Likelihood LR (reference) |" in section
        assert "Best baseline chosen on calibration: Brier: " in section
        found = result.verdict()
        assert found is not None and f"\n{found.sentence}\n" in section  # this group's own numbers
        assert f"\n{found.auroc_sentence}\n" in section
        assert "Base-rate Brier p(1−p) " in section and "Brier skill score 1 − Brier/" in section
    assert "group splits" in sections[2]
    assert spike_results["family = a"].verdict().sentence != spike_results["family = b"].verdict().sentence
    assert "Verdict: beats (loses) when the paired difference's 95% t-interval" in text and "Nadeau–Bengio" in text
    assert "no detectable skill" not in text  # spikes are detectable


def test_skill_line_uses_the_base_rate_brier_and_the_best_baseline(spike_results):
    result = spike_results["family = a"]
    p = result.accuracy
    skill = result.skill()
    assert skill["base_rate_brier"] == pytest.approx(p * (1 - p))
    brier = result.table().loc["TRACE+", "brier"]
    assert skill["brier_skill_score"]["TRACE+"] == pytest.approx(1 - brier / (p * (1 - p)))
    per_split = result.paired.per_split.query("method == 'TRACE+' and versus == @BEST_BASELINE and metric == 'brier' "
                                              "and calibrator == 'platt'")
    own = result.per_split.query("method == 'TRACE+' and metric == 'brier'").set_index("split")["value"]
    best = (own - per_split.set_index("split")["difference"]).mean()
    assert skill["brier_skill_score"][BEST_BASELINE] == pytest.approx(1 - best / (p * (1 - p)))
    note = result.skill_note()
    assert note.startswith(f"Base-rate Brier p(1−p) {p * (1 - p):.3f} (p = {p:.1%} correct among all 400 answers)")
    average = spike_results["average"]
    groups = list(spike_results.values())[:2]
    assert average.base_rate_brier == pytest.approx(np.mean([r.base_rate_brier for r in groups]))
    assert "mean over the groups" in average.skill_note()
    assert all(v > 0 for v in skill["brier_skill_score"].values()) and "below 0" not in note  # spikes: skill
    assert note.endswith(f" AUPRC takes the correct answers as its positives: a score that ranks them at random gets "
                         f"about {p:.1%}.")
    assert "AUPRC" not in average.skill_note()  # the groups' shares differ


@pytest.mark.parametrize("share", [0.01, 0.3, 0.93])
def test_auprc_of_a_random_ranking_is_about_the_share_correct(share):
    """What the skill note says of AUPRC, checked with scikit-learn: random scores average about the share correct."""
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(0)
    y = (rng.random(20_000) < share).astype(int)
    values = [average_precision_score(y, rng.random(y.size)) for _ in range(20)]
    assert np.mean(values) == pytest.approx(y.mean(), rel=0.1, abs=0.003)


def test_json_carries_a_structured_verdict(spike_results):
    data = json.loads(json.dumps(spike_results["family = a"].to_dict()))
    verdict_json = data["verdict"]
    assert verdict_json["method"] == "TRACE+" and verdict_json["confidence"] == 0.95
    assert verdict_json["test_train_ratio"] == pytest.approx(NB_RATIO)
    pairs = {(c["versus"], c["metric"]): c for c in verdict_json["comparisons"]}
    assert set(pairs) == {(v, m) for v in (BEST_BASELINE, REFERENCE) for m in ("brier", "auroc")}
    best = pairs[(BEST_BASELINE, "auroc")]
    assert best["word"] in ("beats", "ties", "loses") and best["n_splits"] == 6
    assert best["low"] <= best["mean"] <= best["high"] and sum(best["chosen"].values()) == 6
    assert set(verdict_json["auroc"]) == {"TRACE+", BEST_BASELINE, REFERENCE}
    assert verdict_json["skill_detected"] is True and data["no_skill_sentence"] is None
    assert data["skill"]["base_rate_brier"] == pytest.approx(data["accuracy"] * (1 - data["accuracy"]))


def test_random_scores_give_the_no_detectable_skill_sentence():
    s, h, _ = synthetic_traces(300, kind="spike", mean_length=20, seed=5)
    y = np.random.default_rng(7).integers(0, 2, 300)  # labels independent of the traces
    result = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=8),
                             methods=["TRACE+", "TRACE", "SeqLogP", "MinProb", "Mean Entropy", REFERENCE])
    found = result.verdict()
    assert found.skill_detected is False
    sentence = result.no_skill_sentence()
    assert re.fullmatch(r"No method's AUROC is detectably above 0\.5 here \(best: .+ 0\.\d{3}, 95% CI 0\.\d{3} to "
                        r"[01]\.\d{3}\): the data show no detectable skill\.", sentence)
    assert found.best_auroc[2] <= 0.5  # the best method's interval reaches down to 0.5
    text = report_markdown({"": result})
    assert sentence in text and text.count("the data show no detectable skill") == 1
    # labels independent of the traces: a calibrated probability does no better than the share correct, and where
    # a score is below 0 the line says what that means
    scores = result.skill()["brier_skill_score"]
    below = " (below 0: less accurate than giving every answer the share correct as its probability)"
    assert (below in result.skill_note()) == any(v < 0 for v in scores.values())
    assert any(v < 0 for v in scores.values())


def test_one_split_gives_no_interval_and_no_skill_claim():
    values = pd.DataFrame({"split": [0, 0], "method": ["TRACE+", "SeqLogP"], "metric": "auroc", "calibrator": "none",
                           "value": [0.9, 0.52]})
    best, detected = auroc_skill(values)
    assert best[0] == "TRACE+" and best[1] == pytest.approx(0.9) and detected is None
    values = pd.concat([values, values.assign(split=1, value=[0.88, 0.50])])
    assert auroc_skill(values)[1] is True  # TRACE+ 0.89 ± t * 0.014 / √2: above 0.5


def test_ece_best_baseline_is_chosen_by_calibration_brier_not_by_a_zero_isotonic_ece():
    from trace_core.evaluation.paired import CHOSEN_BY, chosen_by

    assert CHOSEN_BY == {"ece": "brier"} and chosen_by("ece", ["ece"]) == "ece" and chosen_by("auroc") == "auroc"
    s, h, y = synthetic_traces(600, seed=3)
    methods = ["TRACE+", "First-Token Prob", "SeqLogP", "Windowed Entropy"]
    result = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=6, scalar_calibrator="isotonic"),
                             methods=methods)
    cal = result.calibration_values
    ece = cal[(cal.metric == "ece") & (cal.calibrator == "isotonic")]
    assert ece["value"].abs().max() < 1e-9  # every baseline's isotonic ECE on its own calibration part is 0
    rows = result.paired.per_split
    picks = rows[(rows.versus == BEST_BASELINE) & (rows.method == "TRACE+") & (rows.calibrator == "isotonic")]
    by_ece = picks[picks.metric == "ece"].set_index("split")["chosen"]
    by_brier = picks[picks.metric == "brier"].set_index("split")["chosen"]
    assert by_ece.equals(by_brier) and set(by_ece) != {"First-Token Prob"}
    assert "ECE (chosen by Brier)" in result.paired.chosen_note(calibrator="isotonic")


def test_a_small_sample_bolds_nothing_and_says_the_figures_are_unreliable():
    from trace_core.evaluation.small_sample import SMALL_CLASS, SMALL_SAMPLE

    s, h, y = synthetic_traces(40, seed=2)
    small = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=4, stratified=True), methods=METHODS)
    assert small.small_sample and "**" not in small.to_markdown()
    (note,) = [n for n in small.notes if n.startswith("Only 40 answers")]
    assert f"fewer than {SMALL_SAMPLE} answers or fewer than {SMALL_CLASS} of either class" in note
    assert note in report_markdown({"": small}) and note in json.dumps(small.to_dict())
    # the captions say so too, instead of explaining a bold that is not there
    from trace_core.report.html import report_html

    for text in (report_markdown({"": small}), report_html({"": small})):
        assert "Nothing is bolded: too few answers to tell the best (see the note)." in text
        assert "Bold: the best mean" not in text
    s, h, y = synthetic_traces(400, seed=2)
    large = evaluate_arrays(s, h, y, config=EvaluationConfig(n_splits=4), methods=METHODS)
    assert not large.small_sample and "**" in large.to_markdown() and not any("Only" in n for n in large.notes)
    for text in (report_markdown({"": large}), report_html({"": large})):
        assert "Bold: the best mean per column" in text and "Nothing is bolded" not in text
    mixed = report_markdown({"a": small, "b": large})
    assert "Bold: the best mean per column (uninformative scores excluded; none in a table of too few answers)." in \
        mixed


# What is said: plain words for each outcome, next to the numbers


def test_a_detectable_but_negligible_difference_is_called_that_not_a_tie():
    rng = np.random.default_rng(4)
    small = 0.004 + rng.normal(0, 0.0003, 20)  # AUROC +0.004 (better), Brier +0.004 (worse): excluded 0, tiny
    _, found = _verdict({(BEST_BASELINE, "auroc"): small, (BEST_BASELINE, "brier"): small}, calibration_fraction=0.35)
    assert found.word(BEST_BASELINE, "auroc") == "ties" and found.word(BEST_BASELINE, "brier") == "ties"  # the rule
    assert found.sentence.startswith("TRACE+ is detectably but negligibly worse than the best baseline (SeqLogP in 20 "
                                     "of 20 splits) on Brier (+0.00"), found.sentence
    assert "under the minimum effect of 0.005, wins 0 of 20 splits)" in found.sentence
    assert " and detectably but negligibly better than it on AUROC (+0.00" in found.sentence
    assert "under the minimum effect of 0.01, wins 20 of 20 splits)" in found.sentence
    assert " ties " not in found.sentence and "not called a" not in found.sentence


def test_a_wide_interval_with_every_split_won_says_in_one_sentence_why_it_is_no_win():
    wide = np.linspace(0.03, 0.125, 20)  # every split won, mean 0.0775, sd 0.029: the corrected interval holds 0
    _, found = _verdict({(BEST_BASELINE, "auroc"): wide}, calibration_fraction=0.35)
    entry = found.get(BEST_BASELINE, "auroc")
    assert entry.word == "ties" and entry.low < 0 < entry.high and entry.wins == 20
    assert "TRACE+ cannot be told apart from the best baseline" in found.sentence
    assert found.sentence.endswith(
        "TRACE+ is better than the best baseline on AUROC in 20 of 20 splits, yet this is not called a win: the "
        "splits reuse the same answers, so they agree with each other more than independent samples would, and the "
        "interval, corrected for that overlap, still holds 0 (more answers would narrow it)."), found.sentence
    _, narrow = _verdict({(BEST_BASELINE, "auroc"): np.linspace(-0.05, 0.05, 20)}, calibration_fraction=0.35)
    assert "not called a" not in narrow.sentence  # half the splits each way: nothing to explain


def test_the_strongest_baseline_of_the_table_is_named_with_the_difference_against_it():
    """The per-split choice on small calibration parts may pick weaker baselines; the verdict also names the
    baseline with the best mean in the table, chosen after the fact, with TRACE+'s difference and wins against it."""
    d = np.full(20, 0.05)
    picks = ["SeqLogP", "MinProb"] * 10  # each split's other baseline is 0.1 worse on its evaluation part
    ev, cal = _case({(BEST_BASELINE, "auroc"): d}, chosen=picks)
    minprob_rows = ev["method"] == "MinProb"  # far stronger than TRACE+ on every split
    ev.loc[minprob_rows, "value"] = 0.8 + np.random.default_rng(2).normal(0, 0.003, int(minprob_rows.sum()))
    paired = paired_comparison(ev, cal, methods=METHODS, metrics=["auroc"])
    found = verdict(paired, values=ev, calibration_fraction=0.35)
    own = ev[ev["method"] == "TRACE+"].set_index("split")["value"]
    minprob = ev[ev["method"] == "MinProb"].set_index("split")["value"]
    expected = (own - minprob).to_numpy()
    [strongest] = found.strongest
    assert strongest.versus == "MinProb" and strongest.mean == pytest.approx(expected.mean())
    assert strongest.word == "loses" and strongest.wins == 0 and strongest.losses == 20
    assert found.strongest_sentence.startswith(
        "Against the strongest baseline of the table, picked after seeing the evaluation parts (so the comparison "
        f"favours it): TRACE+ loses to MinProb on AUROC ({expected.mean():+.3g}"), found.strongest_sentence
    assert found.strongest_sentence in found.paragraph() and found.to_dict()["strongest"][0]["versus"] == "MinProb"


def test_no_strongest_sentence_when_every_split_chose_that_baseline():
    _, found = _verdict({(BEST_BASELINE, "auroc"): np.full(20, 0.05)}, calibration_fraction=0.35)
    assert found.strongest == [] and found.strongest_sentence is None
