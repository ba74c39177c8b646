"""Where the mistake is: how often the spikes and the peak window hold a wrong answer's first wrong token.

    python -m bench.localisation [--data PATH] [--validation PATH] [--rule {current,legacy}] [--no-choose] [--section]

Two parts, both printed as Markdown:

1. **Choosing the spike rule** on ``--validation`` (default ``assets/datasets/real_validation.csv``, SmolLM2-135M-
   Instruct's validation answers): a grid search over the surprisal floor (0 to 4 nats in steps of 0.1) and the
   margin over the answer's median (0, 0.1, 0.2, 0.3, 0.5, 1, 1.5, 2 nats) of
   :func:`trace_core.methods.risk.spike_indices`, maximising a token-level Youden index

       objective = (share of located wrong answers whose first wrong token is a spike)
                   - (share of the tokens of correct answers that are spikes)

   ties going to the stricter rule (larger floor, then larger margin). The false alarms are counted per token, not
   per answer: a long right answer (a paragraph of 80 tokens) nearly always holds some token the model was unsure
   of, so "correct answers with any spike" (also reported) punishes length, and on the real model's answers every
   rule that marks anything scores below marking nothing by that count. The search runs on surprisal, on entropy (when
   every trace has it) and on the per-token TRACE risk contributions, so the three signals can be compared; the
   spike constants in ``trace_core/methods/risk.py`` are the surprisal row, and that row is marked when they agree.
2. **The localisation table** on ``--data`` (default ``assets/datasets/real_test.csv``), per ``family`` and overall,
   for the current rule (``explain_trace``'s spikes) and for the legacy rule (contribution above mean + 2 std, at
   most the top 10%, and the single largest contributor when none passes), or only the one named by ``--rule``.

**The first wrong token** of a wrong answer (label 0) is read from its ``first_wrong_token`` column when the file has
one (0-based; empty means not located, and such answers are skipped and counted as below; the real-model datasets
carry it, from per-fact judgements: see ``demo/build_real.py``). Otherwise it is found from the ``solution`` column
when the file has one (the gold answer in full, e.g. a worked calculation whose label checks only the final number),
else from its ``reference``:

- the answer's leading whitespace is skipped; so is the reference's (and its trailing whitespace);
- a reference that is a plain number (``-12``, ``3.5``; no thousands commas) is compared with the *last* number in
  the answer (the numeric matcher's choice); any other reference with the whole answer;
- the two texts are compared character by character, case-insensitively (``str.casefold`` per character); the
  divergence is the first position where they differ, or, when one text is a prefix of the other, the position just
  after the shorter one;
- the first wrong token is the token whose characters cover that position of the answer (the tokens must spell the
  answer). With several references (``a || b``) the one the answer follows longest is used.

A wrong answer is *skipped* (and counted) when no token covers the divergence: the answer stops where the reference
goes on (a prefix of it, e.g. ``10`` for ``103``) or equals it case-insensitively (labelled wrong by a
normalisation this comparison does not make), a numeric reference meets an answer without a number, or the tokens do
not spell the answer.

The table's chance columns are exact expectations, not simulations: a uniformly random token of the answer is the
first wrong token with probability 1/T, and lies in the peak window with probability (window length)/T.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "assets" / "datasets" / "real_test.csv"
DEFAULT_VALIDATION = ROOT / "assets" / "datasets" / "real_validation.csv"

#: The grid of the rule search: surprisal floors (nats) and margins over the answer's median (nats).
FLOORS = tuple(round(0.1 * i, 1) for i in range(41))
MARGINS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0, 1.5, 2.0)
SIGNALS = ("surprisal", "entropy", "contribution")
#: A column that gives each wrong answer's first wrong token (0-based; empty when not located) in place of the
#: comparison with the reference: the real-model datasets' builder writes it from per-fact judgements.
TOKEN_COLUMN = "first_wrong_token"

_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)")
_ANSWER_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)")


# --------------------------------------------------------------------------------------------- the first wrong token

def _divergence(answer: str, reference: str) -> int:
    """The first index where ``answer`` stops spelling ``reference`` (case-insensitive); ``len`` of the shorter text
    when one is a prefix of the other."""
    n = min(len(answer), len(reference))
    for i in range(n):
        if answer[i].casefold() != reference[i].casefold():
            return i
    return n


def first_wrong_char(answer: str, reference: str) -> int | None:
    """The position in ``answer`` where it first departs from ``reference``, or None when no character of the
    answer is there (see the module docstring for the rule).

    Examples
    --------
    >>> first_wrong_char(" 1219", "1106")  # the "2"
    2
    >>> first_wrong_char("It is 57.", "53"), first_wrong_char("Pia Lones", "Pia Lone")
    (7, 8)
    >>> first_wrong_char(" 10", "103") is None  # the answer stops early: no token of it is wrong
    True
    """
    best: int | None = None
    for ref in (piece.strip() for piece in str(reference).split("||")):
        if not ref:
            continue
        if _PLAIN_NUMBER.fullmatch(ref):
            numbers = list(_ANSWER_NUMBER.finditer(answer))
            if not numbers:
                continue
            start = numbers[-1].start()
        else:
            start = len(answer) - len(answer.lstrip())
        position = start + _divergence(answer[start:], ref)
        if position < len(answer) and (best is None or position > best):
            best = position
    return best


def first_wrong_token(tokens: Sequence[str], answer: str, reference: str) -> int | None:
    """The index of the token covering :func:`first_wrong_char`, or None (no position, or the tokens do not spell
    ``answer``).

    Examples
    --------
    >>> first_wrong_token([" ", "1", "2", "1", "9"], " 1219", "1106")
    2
    """
    if "".join(tokens) != answer:
        return None
    position = first_wrong_char(answer, reference)
    if position is None:
        return None
    ends = np.cumsum([len(t) for t in tokens])
    return int(np.searchsorted(ends, position, side="right"))


# ------------------------------------------------------------------------------------------------------ the rules

def legacy_spikes(contributions: np.ndarray) -> np.ndarray:
    """The earlier display rule: contributions above mean + 2 std, at most the top 10% (at least one), and the
    single largest contributor when none passes, so every answer had a spike."""
    threshold = contributions.mean() + 2 * contributions.std()
    order = np.argsort(-contributions, kind="stable")
    top = order[:max(1, int(np.floor(0.1 * len(contributions))))]
    spikes = top[contributions[top] > threshold]
    return np.sort(spikes if spikes.size else order[:1]).astype(np.int64)


@dataclass(frozen=True)
class Answer:
    """One answer with a trace: what the table and the search need."""

    family: str
    correct: bool
    length: int
    first_wrong: int | None  # None for correct answers and for skipped wrong ones
    signals: dict[str, np.ndarray]
    peak_window: tuple[int, int]
    spikes: np.ndarray
    legacy: np.ndarray


def load_answers(path: str | Path) -> tuple[list[Answer], int]:
    """The answers of a labeled dataset with stored traces and a ``first_wrong_token``, ``solution`` or
    ``reference`` column, and how many rows had no trace (left out)."""
    from trace_core import explain_trace, read_dataset

    data = read_dataset(path)
    frame = data.frame
    given = pd.to_numeric(frame[TOKEN_COLUMN], errors="coerce") if TOKEN_COLUMN in frame.columns else None
    gold = "solution" if "solution" in frame.columns else "reference"
    if given is None and gold not in frame.columns:
        raise SystemExit(f"{path}: needs a `reference` (or `solution`) column to find the first wrong token")
    families = frame["family"].astype(str) if "family" in frame.columns else pd.Series(["all"] * len(frame))
    answers, no_trace = [], 0
    for i, trace in enumerate(data.traces):
        if trace is None or len(trace) == 0:
            no_trace += 1
            continue
        exp = explain_trace(trace)
        correct = bool(frame["label"].iat[i] == 1)
        if correct:
            first = None
        elif given is not None:
            first = None if pd.isna(given.iat[i]) or not 0 <= int(given.iat[i]) < len(trace) else int(given.iat[i])
        else:
            first = first_wrong_token(trace.tokens, trace.answer, str(frame[gold].iat[i]))
        signals = {"surprisal": trace.surprisal, "contribution": exp.contributions}
        if trace.has_entropy:
            signals["entropy"] = trace.entropy
        answers.append(Answer(families.iat[i], correct, len(trace), first, signals, exp.peak_window, exp.spikes,
                              legacy_spikes(exp.contributions)))
    return answers, no_trace


# -------------------------------------------------------------------------------------------------- the rule search

@dataclass(frozen=True)
class Choice:
    """The best grid point for one signal."""

    signal: str
    floor: float
    margin: float
    hit_rate: float  # share of located wrong answers whose first wrong token is a spike
    token_false_alarm: float  # share of the tokens of correct answers that are spikes
    false_alarm: float  # share of correct answers with at least one spike (reported, not optimised)

    @property
    def objective(self) -> float:
        return self.hit_rate - self.token_false_alarm


def choose_rule(answers: Sequence[Answer], signal: str = "surprisal", *, floors: Sequence[float] = FLOORS,
                margins: Sequence[float] = MARGINS) -> Choice:
    """The floor and margin of :func:`trace_core.methods.risk.spike_indices` on ``signal`` that maximise the hit rate
    minus the share of correct answers' tokens marked (ties: the larger floor, then the larger margin)."""
    from trace_core.methods.risk import spike_indices

    if any(signal not in a.signals for a in answers):
        raise SystemExit(f"some traces have no {signal}")
    wrong = [(a.signals[signal], a.first_wrong) for a in answers if a.first_wrong is not None]
    correct = [a.signals[signal] for a in answers if a.correct]
    if not wrong or not correct:
        raise SystemExit("the rule search needs located wrong answers and correct answers")
    tokens = sum(len(x) for x in correct)
    choices = []
    for floor in floors:
        for margin in margins:
            hits = sum(k in spike_indices(x, floor=floor, margin=margin) for x, k in wrong)
            marked = [spike_indices(x, floor=floor, margin=margin).size for x in correct]
            choices.append(Choice(signal, floor, margin, hits / len(wrong), sum(marked) / tokens,
                                  sum(m > 0 for m in marked) / len(correct)))
    # Rounding absorbs float noise in the objective, so that equal objectives tie and the stricter rule wins.
    return max(choices, key=lambda c: (round(c.objective, 12), c.floor, c.margin))


def choice_table(choices: Sequence[Choice]) -> str:
    """The best grid point of each signal, as a Markdown table."""
    from trace_core.methods.risk import SPIKE_MARGIN, SPIKE_MIN_SURPRISAL

    lines = ["| signal | floor | margin | first wrong token marked | tokens of correct answers marked | objective | "
             "correct answers with a spike | in score.py |", "|---|---|---|---|---|---|---|---|"]
    for c in choices:
        same = c.signal == "surprisal" and (c.floor, c.margin) == (SPIKE_MIN_SURPRISAL, SPIKE_MARGIN)
        lines.append(f"| {c.signal} | {c.floor:g} | {c.margin:g} | {c.hit_rate:.1%} | {c.token_false_alarm:.1%} | "
                     f"{c.objective:+.3f} | {c.false_alarm:.1%} | {'yes' if same else ''} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------- the table

def _share(count: int, total: int) -> str:
    return f"{count / total:.1%} ({count}/{total})" if total else "–"


def _mean(values: list[float]) -> str:
    return f"{np.mean(values):.1%}" if values else "–"


def localisation_row(answers: Sequence[Answer], spikes_of: Callable[[Answer], np.ndarray]) -> dict[str, str]:
    """One row of the table for these answers, the spikes given by ``spikes_of``."""
    wrong = [a for a in answers if not a.correct]
    located = [a for a in wrong if a.first_wrong is not None]
    correct = [a for a in answers if a.correct]
    last = [a for a in located if a.first_wrong == a.length - 1]
    earlier = [a for a in located if a.first_wrong != a.length - 1]
    hit = lambda a: a.first_wrong in spikes_of(a)  # noqa: E731
    in_window = [a for a in located if a.peak_window[0] <= a.first_wrong < a.peak_window[1]]
    marks = [spikes_of(a) for a in located]
    n_marks = sum(m.size for m in marks)
    at_or_after = sum(int((m >= a.first_wrong).sum()) for m, a in zip(marks, located, strict=True))
    correct_counts = [spikes_of(a).size for a in correct]
    return {
        "wrong": str(len(wrong)),
        "located": str(len(located)),
        "first wrong = last token": _share(len(last), len(located)),
        "wrong with a spike": _share(sum(m.size > 0 for m in marks), len(located)),
        "spike on first wrong": _share(sum(map(hit, located)), len(located)),
        "chance 1/T": _mean([1 / a.length for a in located]),
        "spike on first wrong, when not last": _share(sum(map(hit, earlier)), len(earlier)),
        "window holds it": _share(len(in_window), len(located)),
        "chance window/T": _mean([(a.peak_window[1] - a.peak_window[0]) / a.length for a in located]),
        "spike on last token": _share(sum(a.length - 1 in spikes_of(a) for a in located), len(located)),
        "spikes at/after first wrong": _share(at_or_after, n_marks),
        "correct": str(len(correct)),
        "correct with a spike": _share(sum(c > 0 for c in correct_counts), len(correct)),
        "spikes per correct": f"{np.mean(correct_counts):.2f}" if correct_counts else "–",
    }


def localisation_table(answers: Sequence[Answer], spikes_of: Callable[[Answer], np.ndarray]) -> str:
    """Per family and overall, as a Markdown table."""
    groups = {family: [a for a in answers if a.family == family] for family in sorted({a.family for a in answers})}
    groups["all"] = list(answers)
    rows = {name: localisation_row(group, spikes_of) for name, group in groups.items()}
    columns = list(next(iter(rows.values())))
    lines = ["| family | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(row[c] for c in columns) + " |" for name, row in rows.items()]
    return "\n".join(lines)


RULES: dict[str, tuple[str, Callable[[Answer], np.ndarray]]] = {
    "current": ("current rule (trace_core.methods.risk.explain_trace)", lambda a: a.spikes),
    "legacy": ("legacy rule (contribution > mean + 2 std, else the top contributor)", lambda a: a.legacy),
}


def _summary(answers: Sequence[Answer], no_trace: int) -> str:
    wrong = sum(not a.correct for a in answers)
    skipped = sum(not a.correct and a.first_wrong is None for a in answers)
    text = (f"{len(answers):,} answers with traces ({wrong:,} wrong; {wrong - skipped:,} with a located first wrong "
            f"token, {skipped:,} skipped: no token at the divergence)")
    return text + (f"; {no_trace:,} rows without a trace left out" if no_trace else "")


def _rates(answers: Sequence[Answer], spikes_of: Callable[[Answer], np.ndarray]) -> tuple[float, float, float]:
    """Over all answers: first wrong token marked, same when it is not the last token, correct answers marked."""
    located = [a for a in answers if not a.correct and a.first_wrong is not None]
    earlier = [a for a in located if a.first_wrong != a.length - 1]
    correct = [a for a in answers if a.correct]
    hit = lambda a: a.first_wrong in spikes_of(a)  # noqa: E731
    return (sum(map(hit, located)) / max(len(located), 1), sum(map(hit, earlier)) / max(len(earlier), 1),
            sum(spikes_of(a).size > 0 for a in correct) / max(len(correct), 1))


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _has_column(path: Path) -> bool:
    import csv

    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return TOKEN_COLUMN in pq.read_schema(path).names
    with open(path, newline="", encoding="utf-8") as handle:
        return TOKEN_COLUMN in next(csv.reader(handle), [])


_FROM_REFERENCE = (
    "**The first wrong token** of a wrong answer is the token covering the first character where the answer "
    "(leading whitespace skipped; its last number when the reference is a plain number) differs from the "
    "reference, compared case-insensitively; wrong answers where no token covers it are skipped and counted. ")
_FROM_COLUMN = (
    f"**The first wrong token** of a wrong answer is the file's `{TOKEN_COLUMN}` column: for a fact, the token "
    "where the first fact stated wrong departs from the accepted form it follows longest; for a number, where the "
    "answer's last number departs from the reference (`demo/build_real.py` gives both rules). Wrong answers with "
    "no such token (a fact left out rather than stated wrong, a continent, a number that stops early) are skipped "
    "and counted. ")


def _chance(answers: Sequence[Answer]) -> float:
    """The expected share of located wrong answers in which one uniformly random token is the first wrong one."""
    located = [a for a in answers if not a.correct and a.first_wrong is not None]
    return float(np.mean([1 / a.length for a in located])) if located else float("nan")


def _intro(data: Path, validation: Path) -> str:
    from trace_core.methods.risk import SPIKE_MARGIN, SPIKE_MAX_SHARE, SPIKE_MIN_SURPRISAL

    floor_p = float(np.exp(-SPIKE_MIN_SURPRISAL))
    return (
        "## Where the mistake is: spike localisation\n\n"
        f"Generated by `python -m bench.localisation --section --validation {_shown(validation)} --data "
        f"{_shown(data)}` (the spike rule is chosen on `{validation.name}`, measured on `{data.name}`; the docstring "
        "of `bench/localisation.py` gives every definition in full).\n\n"
        "**The rule** (`trace_core.methods.risk.spike_indices`, used by `explain_trace`): a token is a spike when the "
        f"model gave it less than {floor_p:.1%} probability (surprisal ≥ {SPIKE_MIN_SURPRISAL:g} nats), it is at least "
        f"{SPIKE_MARGIN:g} nats above the answer's median surprisal, and it is among the answer's "
        f"max(1, ⌊{SPIKE_MAX_SHARE:g}·T⌋) most surprising tokens. An answer whose every token had a higher "
        "probability has no spike. The legacy rule (TRACE risk contribution above mean + 2 std, else the largest "
        "contributor) marked a token in every answer.\n\n"
        + (_FROM_COLUMN if _has_column(data) else _FROM_REFERENCE) +
        "**Choosing the rule:** grid search over the surprisal floor and the margin on the validation file, "
        "maximising (share of wrong answers whose first wrong token is a spike) minus (share of the tokens of "
        "correct answers that are spikes): false alarms per token, since a long right answer nearly always holds "
        "some token the model was unsure of; the same search on entropy and on the risk contributions is shown for "
        "comparison. "
        "\"chance 1/T\" is the exact expected hit rate of one uniformly random token, \"chance window/T\" that of "
        "the peak window.\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the labeled file the table is measured on")
    parser.add_argument("--validation", type=Path, default=DEFAULT_VALIDATION,
                        help="the labeled file the spike rule is chosen on")
    parser.add_argument("--rule", choices=list(RULES), action="append",
                        help="the rule(s) to tabulate (default: both)")
    parser.add_argument("--no-choose", action="store_true", help="skip the rule search on --validation")
    parser.add_argument("--section", action="store_true",
                        help="print the docs/results.md section: definitions, both parts and the comparison")
    args = parser.parse_args(argv)

    level = "###" if args.section else "##"
    if args.section:
        print(_intro(args.data, args.validation))
    if not args.no_choose:
        answers, no_trace = load_answers(args.validation)
        print(f"{level} Choosing the spike rule on {args.validation.name}\n\n{_summary(answers, no_trace)}\n")
        signals = [s for s in SIGNALS if all(s in a.signals for a in answers)]
        print(choice_table([choose_rule(answers, s) for s in signals]) + "\n")
    answers, no_trace = load_answers(args.data)
    print(f"{level} Localisation on {args.data.name}\n\n{_summary(answers, no_trace)}\n")
    names = args.rule or list(RULES)
    for name in names:
        title, spikes_of = RULES[name]
        print(f"{level}# {title}\n\n{localisation_table(answers, spikes_of)}\n")
    if args.section and set(names) >= {"current", "legacy"}:
        now, then = _rates(answers, RULES["current"][1]), _rates(answers, RULES["legacy"][1])
        print(f"As measured on {args.data.name}: the first wrong token is marked in {now[0]:.1%} of located wrong "
              f"answers with the current rule against {then[0]:.1%} with the legacy one ({now[1]:.1%} against "
              f"{then[1]:.1%} when it is not the answer's last token), and correct answers get a spike in "
              f"{now[2]:.1%} of cases against {then[2]:.1%}. One token drawn at random from each answer would be "
              f"the first wrong one in {_chance(answers):.1%} of them.\n")


if __name__ == "__main__":
    main()
