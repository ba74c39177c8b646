"""Span risk on a real model's answers: which span is wrong, and how well a span calibrator says so.

    python -m bench.spans [--fit PATH] [--data PATH] [--write-calibrator PATH] [--bootstrap N]

Data: the ``country_facts`` answers of SmolLM2-135M-Instruct (``assets/datasets/real_validation.csv`` to fit,
``real_test.csv`` to measure; a paragraph about a country that should name its capital and official language).
Each answer's facts are judged by ``demo.real_tasks.judge_facts`` (the rules that label these answers), which gives
each stated fact a clause and, for a wrong fact, where its value starts and its first wrong character.

**Span labels** (spans from :func:`trace_core.segment` of the answer): a span is *wrong* (0) when it overlaps the
value of a wrong fact (from the value's start to the end of its clause: ``Khantak`` in "The capital of Mongolia is
Khantak"); *right* (1) when it lies in a right fact's clause, or in a wrong fact's clause before the value (the
``Mongolia`` of that sentence); any other span says nothing the judge checked and is left out. A sentence is wrong
when it overlaps a wrong value and right when it holds a right fact's clause and no wrong value.

Printed as Markdown:

1. **Localisation** over the wrong answers whose first wrong character is located: how often the riskiest span
   contains it, for the dates/numbers/names ("fine"), the sentences, and :func:`trace_core.riskiest_span`'s choice
   (fine spans, else sentences), ranked by peak surprisal and by the span calibrator fitted on ``--fit``; against a
   random span of the same level (the exact expectation, per answer the share of its spans that contain the
   character) and the answer's last span. An answer whose first wrong character lies in no span of a level counts as
   a miss for every rule of that level (the table says how many).
2. **Span calibration** on the labelled spans of ``--data``: AUROC and Brier of the span calibrator fitted on
   ``--fit``'s labelled spans; of the span's peak surprisal (as ``exp(-peak)``, a ranking score, with Platt scaling
   fitted on ``--fit`` for its Brier); of the answer's TRACE confidence given to each of its spans; and the base rate
   (Brier only). 95% intervals by a bootstrap over answers (``--bootstrap`` draws, seed 0).

``--write-calibrator`` saves the span calibrator fitted on ``--fit`` (the product's bundled one is made this way).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "assets" / "datasets"
FAMILY = "country_facts"


@dataclass
class Answer:
    risks: list            # SpanRisk of every span
    labels: list           # per span: 1, 0 or None (unjudged)
    first_wrong: int | None  # character of the first wrong fact, when the answer is wrong and it is located
    confidence: float      # the answer's TRACE confidence
    wrong: bool            # the answer's label is 0


def _country(prompt: str, table: dict) -> object:
    name = re.match(r"Write a short paragraph about (.+?)\. Say", prompt)
    if name is None:
        raise SystemExit(f"not a country-facts prompt: {prompt[:80]!r}")
    key = name.group(1)
    key = key[4:] if key.startswith("the ") else key
    return table[key]


def _label(span, verdicts) -> int | None:
    wrong_values = [(v.value_start, v.clause[1]) for v in verdicts
                    if v.status == "wrong" and v.value_start is not None]
    if any(span.start < end and span.end > start for start, end in wrong_values):
        return 0
    inside = [v for v in verdicts if v.clause is not None and v.status in ("right", "wrong")]
    for v in inside:
        lo, hi = v.clause
        if v.status == "wrong" and v.value_start is not None:
            hi = v.value_start
        if span.kind == "sentence":
            if span.start <= v.clause[0] and v.clause[1] <= span.end and v.status == "right":
                return 1
        elif lo <= span.start and span.end <= hi:
            return 1
    return None


def load(path: Path) -> list[Answer]:
    from demo import real_tasks as rt
    from trace_core import explain_trace, read_dataset, span_risks

    data = read_dataset(path)
    frame = data.frame
    table = rt.countries()
    out = []
    for i in np.flatnonzero((frame["family"] == FAMILY).to_numpy()):
        trace = data.traces[i]
        text = "".join(trace.tokens)
        verdicts = rt.judge_facts(text, _country(frame["prompt"].iloc[i], table), rt.LONG_RELATIONS)
        exp = explain_trace(trace)
        risks = span_risks(trace, explanation=exp)
        _, first = rt.locate_first_wrong(verdicts)
        out.append(Answer(risks, [_label(r.span, verdicts) for r in risks],
                          first if int(data.labels[i]) == 0 else None, exp.confidence, int(data.labels[i]) == 0))
    return out


def labelled(answers: list[Answer], level: str = "all") -> tuple[list, np.ndarray, np.ndarray]:
    """The labelled spans of ``answers`` at ``level``, their labels and each one's answer index."""
    risks, labels, groups = [], [], []
    for a, answer in enumerate(answers):
        for r, y in zip(answer.risks, answer.labels, strict=True):
            if y is not None and (level == "all" or (r.kind == "sentence") == (level == "sentence")):
                risks.append(r), labels.append(y), groups.append(a)
    return risks, np.array(labels, dtype=np.int64), np.array(groups, dtype=np.int64)


def localisation(answers: list[Answer], calibrator) -> str:
    from dataclasses import replace

    from trace_core import rank_spans

    located = [a for a in answers if a.first_wrong is not None]
    lines = [f"{len(located)} wrong answers with a located first wrong character (of {len(answers)} answers, "
             f"{sum(a.wrong for a in answers)} wrong; a wrong answer that only leaves a fact out is not located).", "",
             "| spans | in a span | riskiest by peak surprisal | riskiest by span calibrator | random span "
             "| last span |",
             "|---|---:|---:|---:|---:|---:|"]
    for level, title in (("fine", "dates, numbers, names"), ("sentence", "sentences"), ("auto", "riskiest_span's")):
        hits = {"peak": 0, "cal": 0, "random": 0.0, "last": 0, "covered": 0}
        for a in located:
            c = a.first_wrong
            fine = [r for r in a.risks if r.kind != "sentence"]
            sentences = [r for r in a.risks if r.kind == "sentence"]
            pool = {"fine": fine, "sentence": sentences, "auto": fine or sentences}[level]
            if not pool:
                continue
            contains = [r.span.start <= c < r.span.end for r in pool]
            hits["covered"] += any(contains)
            hits["random"] += sum(contains) / len(pool)
            hits["last"] += contains[max(range(len(pool)), key=lambda j: pool[j].span.start)]
            by_peak = rank_spans(pool)[0]
            hits["peak"] += by_peak.span.start <= c < by_peak.span.end
            p = calibrator.predict_proba(pool)
            by_cal = rank_spans([replace(r, probability=float(q)) for r, q in zip(pool, p, strict=True)])[0]
            hits["cal"] += by_cal.span.start <= c < by_cal.span.end
        n = len(located)
        lines.append(f"| {title} | {hits['covered']}/{n} | {hits['peak'] / n:.0%} ({hits['peak']}) | "
                     f"{hits['cal'] / n:.0%} ({hits['cal']}) | {hits['random'] / n:.0%} | "
                     f"{hits['last'] / n:.0%} ({hits['last']}) |")
    return "\n".join(lines)


def _interval(values_of, groups: np.ndarray, n_boot: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    answers = np.unique(groups)
    members = [np.flatnonzero(groups == g) for g in answers]
    stats = []
    for _ in range(n_boot):
        idx = np.concatenate([members[j] for j in rng.integers(0, len(answers), len(answers))])
        value = values_of(idx)
        if np.isfinite(value):
            stats.append(value)
    return float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))


def calibration(fit: list[Answer], test: list[Answer], calibrator, n_boot: int) -> str:
    import warnings

    from trace_core import PlattCalibrator, auroc, brier_score

    lines = ["| spans | method | labelled spans (wrong) | AUROC [95%] | Brier [95%] |", "|---|---|---:|---:|---:|"]
    fit_risks, fit_y, _ = labelled(fit)
    platt = PlattCalibrator().fit(np.array([-r.peak_surprisal for r in fit_risks]), fit_y)
    base = float(fit_y.mean())
    for level, title in (("all", "all"), ("fine", "dates, numbers, names"), ("sentence", "sentences")):
        risks, y, groups = labelled(test, level)
        if len(y) == 0 or len(np.unique(y)) < 2:
            lines.append(f"| {title} | — | {len(y)} ({int((y == 0).sum())}) | both classes needed | |")
            continue
        peak = np.array([-r.peak_surprisal for r in risks])
        scores = {f"span calibrator ({', '.join(calibrator.features)})": (calibrator.predict_proba(risks), True),
                  "peak surprisal (Platt)": (platt.predict_proba(peak), True),
                  "answer's TRACE confidence": (np.array([test[g].confidence for g in groups]), False),
                  "base rate of --fit": (np.full(len(y), base), True)}
        for name, (score, probability) in scores.items():
            def a_of(idx, s=score, y=y):
                if len(np.unique(y[idx])) < 2:
                    return np.nan
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return auroc(y[idx], s[idx])
            lo, hi = _interval(a_of, groups, n_boot)
            auc = f"{a_of(np.arange(len(y))):.3f} [{lo:.2f}, {hi:.2f}]" if name != "base rate of --fit" else "—"
            if probability:
                b_lo, b_hi = _interval(lambda idx, s=score, y=y: brier_score(y[idx], s[idx]), groups, n_boot)
                brier = f"{brier_score(y, score):.3f} [{b_lo:.3f}, {b_hi:.3f}]"
            else:
                brier = "— (not a probability)"
            lines.append(f"| {title} | {name} | {len(y)} ({int((y == 0).sum())}) | {auc} | {brier} |")
    return "\n".join(lines)


FEATURE_SETS = {"peak surprisal": ("peak_surprisal",),
                "surprisal and length": ("peak_surprisal", "mean_surprisal", "log_tokens"),
                "all": None}


def cross_validated_loss(risks: list, y: np.ndarray, groups: np.ndarray, features, folds: int = 5) -> float:
    """Mean log-loss of a span calibrator on held-out answers: answers dealt into ``folds`` folds (seed 0)."""
    from trace_core import SpanCalibrator
    from trace_core.methods.spans import SPAN_FEATURES

    rng = np.random.default_rng(0)
    answers = np.unique(groups)
    fold_of = dict(zip(rng.permutation(answers), np.arange(len(answers)) % folds, strict=True))
    fold = np.array([fold_of[g] for g in groups])
    loss = np.zeros(len(y))
    for k in range(folds):
        train, held = fold != k, fold == k
        kept = [r for r, t in zip(risks, train, strict=True) if t]
        cal = SpanCalibrator(features=features or SPAN_FEATURES).fit(kept, y[train])
        p = np.clip(cal.predict_proba([r for r, h in zip(risks, held, strict=True) if h]), 1e-12, 1 - 1e-12)
        loss[held] = -(y[held] * np.log(p) + (1 - y[held]) * np.log(1 - p))
    return float(loss.mean())


def main(argv: list[str] | None = None) -> None:
    from trace_core import SpanCalibrator

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fit", type=Path, default=DATA / "real_validation.csv")
    parser.add_argument("--data", type=Path, default=DATA / "real_test.csv")
    parser.add_argument("--write-calibrator", type=Path, default=None)
    parser.add_argument("--bootstrap", type=int, default=1000)
    args = parser.parse_args(argv)
    fit, test = load(args.fit), load(args.data)
    risks, y, groups = labelled(fit)
    cv = {name: cross_validated_loss(risks, y, groups, features) for name, features in FEATURE_SETS.items()}
    chosen = min(cv, key=cv.get)
    calibrator = SpanCalibrator(features=FEATURE_SETS[chosen]).fit(risks, y, provenance={
        "model_id": "SmolLM2-135M-Instruct", "data": f"{args.fit.name}, family {FAMILY}",
        "labels": "per fact (bench/spans.py)", "features_chosen_by": "5-fold cross-validation grouped by answer"})
    print("## Which span is wrong: span risk on the country paragraphs\n")
    print(f"`python -m bench.spans` on the `{FAMILY}` answers of {args.data.name}: spans cut by "
          "`trace_core.segment` (sentences; dates, numbers and names), labelled right or wrong from the per-fact "
          "judgements (a span overlapping a wrong fact's value is wrong; a span inside a right fact's clause is "
          "right; spans about nothing the judge checked are left out; rules in `bench/spans.py`). The span "
          f"calibrator is fitted on the {len(y)} labelled spans of {args.fit.name} ({int((y == 0).sum())} wrong) "
          "and is the one the dashboard ships (`trace_core/methods/span_calibrator.json`).\n")
    print("Feature set of the span calibrator, chosen on " + args.fit.name + " alone by 5-fold cross-validation "
          "grouped by answer (mean log-loss of the held-out folds): "
          + "; ".join(f"{name} {loss:.4f}" + (" (chosen)" if name == chosen else "") for name, loss in cv.items())
          + ".\n")
    print("### Does the riskiest span hold the first wrong fact?\n")
    print(localisation(test, calibrator) + "\n")
    print("### Span-level calibration\n")
    print(calibration(fit, test, calibrator, args.bootstrap))
    if args.write_calibrator is not None:
        args.write_calibrator.write_text(calibrator.to_json() + "\n", encoding="utf-8")
        print(f"\nSpan calibrator written to {args.write_calibrator}.")


if __name__ == "__main__":
    main()
