"""Compare over a dataset: the same prompts answered by side A (the sidebar's model and decoding) and side B (another
decoding or another model), each side's answers labeled against ``reference`` and evaluated as on the Calibrate page;
accuracy, TRACE+ and the baselines side by side, and the prompts where the two disagree with both answers' heatmaps.

Answers are generated in batches with a progress bar and a Stop, and kept in the session by the file, the model and
the decoding (the store :mod:`app.batch` uses), so Stop, another page or a change of B loses nothing generated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from trace_core import DecodingConfig, EvaluationConfig, EvaluationResult, Trace, explain_trace, label_from_reference
from trace_core.data import MATCHERS
from trace_core.data.labels import exact_match_hint
from trace_core.evaluation.run import NoUsableSplitError
from trace_core.evaluation.small_sample import SMALL_CLASS, SMALL_SAMPLE
from trace_core.methods.registry import METRICS, method_names

from . import state
from .batch import generate_with_progress, prompts_cached
from .compare_view import aligned_heatmap_html
from .evaluation import evaluate_cached
from .heatmap import HEATMAP_CSS, legend_html, signal_values
from .inputs import DatasetFile
from .keys import digest, model_key
from .text import control_safe, counted, md_literal
from .tokenizer_text import alternatives_for

#: The most prompts one comparison answers (each is answered twice).
MAX_PROMPTS = 2_000
#: Splits of the evaluation of each side (fewer than Calibrate's 20: two evaluations, usually of fewer answers).
SPLITS = 10
#: The metrics of the side-by-side table.
SHOWN_METRICS = ("auroc", "brier")


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its model (loaded), the model's store key and its decoding."""

    label: str
    model: Any
    decoding: DecodingConfig

    def key(self, file_key: str) -> tuple[str, str, str]:
        return (file_key, model_key(self.model), repr(self.decoding))


def prompts_of(file: DatasetFile) -> Any:
    """The file's prompts and references (:func:`trace_core.data.read_prompts`; an ``answer`` column is ignored: both
    sides answer anew)."""
    return prompts_cached(file.data, file.name)


def generate_panel(sides: Sequence[Side], prompts: Sequence[str], n: int, file_key: str) -> bool:
    """A button that answers the first ``n`` prompts with each side (progress bar, Stop; each batch kept at once);
    True when both sides have answered all ``n`` (or said why some cannot be answered)."""
    stores = {s.label: _store(s, file_key) for s in sides}
    waiting = {label: [i for i in range(n) if i not in store and i not in failed]
               for label, (store, failed) in stores.items()}
    total = sum(len(w) for w in waiting.values())
    if total == 0:
        return True
    answered = sum(n - len(w) for w in waiting.values())
    label = (f"Answer {counted(n, 'prompt')} with A and with B" if answered == 0 else
             f"Answer the other {total:,} ({answered:,} of {2 * n:,} answers kept)")
    if not st.button(label, type="primary", key="compare_dataset_run"):
        return False
    generate_with_progress(prompts, [(s.label, s.model, s.decoding, waiting[s.label], *stores[s.label])
                                     for s in sides], stop_key="compare_dataset_stop")
    return False  # stopped by an error (said on the page); otherwise the page reran


def _store(side: Side, file_key: str) -> tuple[dict[int, Trace], dict[int, str]]:
    return state.generated_answers(side.key(file_key))


def labels_of(traces: Sequence[Trace], references: Sequence[Any], matcher: str) -> np.ndarray:
    """Each answer's 0/1 label against its reference; -1 where the reference cannot label it."""
    out = []
    for trace, reference in zip(traces, references, strict=True):
        try:
            out.append(label_from_reference(trace.answer, reference, matcher=matcher))
        except (TypeError, ValueError):
            out.append(-1)
    return np.asarray(out, dtype=np.int64)


def label_hints(traces: Mapping[str, Sequence[Trace]], references: Sequence[Any], labels: Mapping[str, np.ndarray],
                rows: Sequence[int], matcher: str) -> list[str]:
    """For each side whose answers the exact matcher labeled wrong although they hold their reference (answers in
    sentences: every figure of that side would be off), the warning of
    :func:`~trace_core.data.labels.exact_match_hint`, naming the side."""
    if matcher != "exact":
        return []
    hints = {side: exact_match_hint([t.answer for t in traces[side]], references, labels[side].tolist(), rows)
             for side in traces}
    return [f"{side}: {hint}" for side, hint in hints.items() if hint]


def side_table(results: dict[str, EvaluationResult | None]) -> pd.DataFrame:
    """One row per method (in the evaluation's order), ``<metric> A`` and ``<metric> B`` columns (mean over the
    splits, Platt scaling for scalar methods) for :data:`SHOWN_METRICS`. A side that could not be evaluated has
    NaN."""
    methods: list[str] = []
    for result in results.values():
        if result is not None:
            methods += [m for m in result.methods if m not in methods]
    rows = []
    tables = {side: (r.table(calibrator="platt") if r is not None else None) for side, r in results.items()}
    for method in methods:
        row: dict[str, Any] = {"method": method}
        for metric in SHOWN_METRICS:
            for side, table in tables.items():
                row[f"{metric} {side}"] = (float(table.loc[method, metric])
                                           if table is not None and method in table.index else np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def disagreements(traces: Mapping[str, Sequence[Trace]], labels: Mapping[str, np.ndarray], prompts: Sequence[str],
                  rows: Sequence[int]) -> pd.DataFrame:
    """The prompts where one side is right and the other wrong (index: position among the compared prompts): the
    row, each side's answer and label, each side's TRACE confidence, then the prompt; ordered as in the file."""
    a, b = labels["A"], labels["B"]
    at = np.flatnonzero((a != b) & (a >= 0) & (b >= 0))
    where = at.tolist()
    out = pd.DataFrame({"row": [rows[i] for i in where]}, index=at)
    for side in ("A", "B"):
        out[f"answer {side}"] = [traces[side][i].answer for i in where]
        out[f"{side} correct"] = [bool(labels[side][i]) for i in where]
    for side in ("A", "B"):
        out[f"TRACE {side}"] = [explain_trace(traces[side][i]).confidence for i in where]
    out["prompt"] = [prompts[i] for i in where]
    return out


def _evaluate(side: str, traces: Sequence[Trace], labels: np.ndarray, key: str) -> tuple[EvaluationResult | None,
                                                                                          str | None]:
    keep = np.flatnonzero(labels >= 0).tolist()
    usable = [traces[i] for i in keep if len(traces[i])]
    y = np.asarray([labels[i] for i in keep if len(traces[i])])
    if len(usable) < 2 or np.unique(y).shape[0] < 2:
        return None, (f"{side}'s {len(usable):,} labeled answers are all {'right' if len(y) and y[0] else 'wrong'}: "
                      "its methods cannot be measured")
    try:
        result, _ = evaluate_cached(usable, y, EvaluationConfig(n_splits=SPLITS), tuple(method_names()), key)
    except (NoUsableSplitError, ValueError) as exc:
        return None, f"{side}: {exc}"
    return result, None


def dataset_comparison(file: DatasetFile, sides: Sequence[Side]) -> None:
    """The dataset mode of the Compare page for ``file`` (a table with ``prompt`` and ``reference``)."""
    read = prompts_of(file)
    if read.references is None:
        st.error(f"{md_literal(file.name)} has no `reference` column: each side's answers are labeled against it. "
                 "Give the gold answers in a `reference` column.")
        return
    total = len(read.rows)
    cols = st.columns(2)
    n = int(cols[0].number_input("Prompts to compare (the file's first)", 1, min(total, MAX_PROMPTS),
                                 min(total, 100), key="compare_n_prompts",
                                 help=f"Each is answered by A and by B; at most {MAX_PROMPTS:,}."))
    # streamlit's selectbox stub uses typing.Never, which Python 3.10 lacks: mypy then takes the empty-options overload
    matcher: str = cols[1].selectbox(  # type: ignore[assignment]
        "Label answers against their `reference` with", MATCHERS, key="compare_matcher")
    prompts = read.frame["prompt"].astype(str).tolist()
    file_key = digest(file.data, file.name)
    if not generate_panel(sides, prompts, n, file_key):
        return
    failed = {side.label: {i for i in _store(side, file_key)[1] if i < n} for side in sides}
    if any(failed.values()):
        n_failed = len(set().union(*failed.values()))  # a prompt too long for both models is one prompt
        st.warning(f"{counted(n_failed, 'prompt fills', 'prompts fill')} a model's context and "
                   f"{'gets no answer; it is' if n_failed == 1 else 'get no answer; they are'} left out of both "
                   "sides.")
    positions = [i for i in range(n) if not any(i in f for f in failed.values())]
    traces = {side.label: [_store(side, file_key)[0][i] for i in positions] for side in sides}
    references = [read.references[i] for i in positions]
    labels = {side: labels_of(traces[side], references, matcher) for side in traces}
    # the key names the answers evaluated: which prompts both sides answered depends on the other side too
    results, notes = _evaluate_sides(sides, traces, labels, f"|{digest(repr(positions))}|{matcher}", file_key,
                                     matcher)
    notes += label_hints(traces, references, labels, [read.rows[i] for i in positions], matcher)
    _side_by_side(len(positions), labels, results, notes)
    st.subheader("Where they disagree")
    diff = disagreements(traces, labels, [prompts[i] for i in positions], [read.rows[i] for i in positions])
    if diff.empty:
        st.caption("A and B are right and wrong on the same prompts.")
        return
    _disagreement_panel(diff, traces, [prompts[i] for i in positions], sides)


def _evaluate_sides(sides: Sequence[Side], traces: Mapping[str, Sequence[Trace]], labels: Mapping[str, np.ndarray],
                    answers_key: str, file_key: str, matcher: str) -> tuple[dict[str, EvaluationResult | None],
                                                                           list[str]]:
    """Each side's evaluation (:func:`_evaluate`, keyed by the side's store key and ``answers_key``), and a sentence
    for each side that could not be evaluated or whose figures are unreliable."""
    results: dict[str, EvaluationResult | None] = {}
    notes = []
    for side in sides:
        result, why = _evaluate(side.label, traces[side.label], labels[side.label],
                                f"{side.key(file_key)}{answers_key}")
        results[side.label] = result
        if why:
            notes.append(why + (" (labeled with the `exact` matcher: answers written as sentences may need "
                                "`contains`, numbers `numeric`)" if matcher == "exact" else ""))
        elif result is not None and result.small_sample:  # too few answers, or of one class, to read its figures
            right = int(round(result.accuracy * result.n_answers))
            notes.append(f"{side.label}'s figures are unreliable: {counted(result.n_answers, 'answer')} "
                         f"({right:,} right, {result.n_answers - right:,} wrong), fewer than {SMALL_SAMPLE:,} answers "
                         f"or than {SMALL_CLASS:,} of either class")
    return results, notes


def _side_by_side(n: int, labels: Mapping[str, np.ndarray], results: dict[str, EvaluationResult | None],
                  notes: Sequence[str]) -> None:
    """The "Side by side" section: each side's accuracy on the ``n`` compared prompts and where they disagree, the
    notes, and the methods' table."""
    accuracy = {side: float(np.mean(labels[side][labels[side] >= 0])) if (labels[side] >= 0).any() else np.nan
                for side in labels}
    a_right = int(((labels["A"] == 1) & (labels["B"] == 0)).sum())
    b_right = int(((labels["A"] == 0) & (labels["B"] == 1)).sum())
    st.subheader("Side by side")
    st.markdown(f"On {counted(n, 'prompt')}, **A** is right on {int((labels['A'] == 1).sum()):,} "
                f"({accuracy['A']:.1%}) and **B** on {int((labels['B'] == 1).sum()):,} ({accuracy['B']:.1%}); "
                f"they disagree on {a_right + b_right:,}: A right and B wrong on {a_right:,}, B right and A wrong on "
                f"{b_right:,}.")
    for note in notes:
        st.warning(md_literal(note[:1].upper() + note[1:] + "."))
    table = side_table(results)
    st.dataframe(table, hide_index=True, key="compare_side_table", column_config={
        "method": st.column_config.TextColumn("method", pinned=True),
        **{f"{m} {s}": st.column_config.NumberColumn(f"{METRICS[m].title} {s}", format="%.3f")
           for m in SHOWN_METRICS for s in ("A", "B")}})
    st.caption(f"Each side's answers evaluated as on the Calibrate page ({SPLITS} random splits; mean over the "
               "held-out parts; TRACE and the baselines after Platt scaling). A method's AUROC says how well it tells "
               "that side's right answers from its wrong ones; its Brier, how good its probabilities are.")


def _disagreement_panel(diff: pd.DataFrame, traces: Mapping[str, Sequence[Trace]], prompts: Sequence[str],
                        sides: Sequence[Side]) -> None:
    """The prompts where the sides disagree (:func:`disagreements`, ``prompts``: the compared ones), and the selected
    one's prompt with both answers aligned token by token."""
    view = diff.assign(prompt=diff["prompt"].map(control_safe), **{
        f"answer {s}": diff[f"answer {s}"].map(control_safe) for s in ("A", "B")})
    event = st.dataframe(view, hide_index=True, on_select="rerun", selection_mode="single-row",
                         key="compare_disagreements", column_config={
                             "row": st.column_config.NumberColumn("row", width="small", pinned=True),
                             "TRACE A": st.column_config.NumberColumn(format="%.3f"),
                             "TRACE B": st.column_config.NumberColumn(format="%.3f")})
    selected = event.selection.rows if event is not None else []
    if not selected:
        st.caption("Select a row to see both answers aligned token by token, coloured by surprisal.")
        return
    i = int(diff.index[selected[0]])
    a, b = traces["A"][i], traces["B"][i]
    from trace_core.traces.align import align_tokens

    st.code(control_safe(prompts[i]), language=None, wrap_lines=True)
    st.html(HEATMAP_CSS + legend_html(signal_values(a if len(a) else b, "surprisal"))
            + aligned_heatmap_html(a, b, align_tokens(a.tokens, b.tokens), signal="surprisal",
                                   alternatives=(alternatives_for(sides[0].model), alternatives_for(sides[1].model))))
    st.caption("Top row A, bottom row B, as in the one-prompt comparison.")
