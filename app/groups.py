"""Results per group on the Calibrate page: the same protocol on each value of a column (a task family, a model), the
average over the groups, each group's table, verdict and reliability diagram, as ``trace-core evaluate --group-by``
reports them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from trace_core import EvaluationConfig, EvaluationResult, Trace
from trace_core.data import TRACE_COLUMNS
from trace_core.evaluation.results import average_results
from trace_core.evaluation.run import NoUsableSplitError
from trace_core.report.figures import reliability_figure

from .evaluation import evaluate_cached
from .tables import metric_columns, metrics_frame
from .text import md_literal

#: A column is offered for grouping when it has between 2 and this many distinct values among the kept rows.
MAX_GROUPS = 20
#: Columns never offered: what every row has its own value of, or what the protocol reads.
_NOT_GROUPS = frozenset({"prompt", "answer", "reference", "label", "beam_logprobs", *TRACE_COLUMNS})


def group_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of ``frame`` (the kept rows) worth grouping by: 2 to :data:`MAX_GROUPS` distinct values, not a
    trace, text or label column."""
    out = []
    for column in frame.columns:
        if column in _NOT_GROUPS or str(column).startswith("_"):
            continue
        values = frame[column].dropna().astype(str)
        if 2 <= values.nunique() <= MAX_GROUPS:
            out.append(str(column))
    return out


def evaluate_groups(values: pd.Series, kept: Sequence[Trace], labels: np.ndarray, config: EvaluationConfig,
                    methods: tuple[str, ...], key: str, beams: Sequence[Sequence[float]] | None, embedder: Any,
                    column: str, split_groups: tuple[str, ...] | None = None,
                    ) -> tuple[dict[str, EvaluationResult], list[str]]:
    """Each group's result (titled ``"<column> = <value>"``, in sorted order), then their average under
    ``"average"``; and the groups left out with why (one class only, no usable split). ``split_groups``: as
    :func:`app.evaluation.evaluate_cached`'s, one per kept answer."""
    results: dict[str, EvaluationResult] = {}
    left_out: list[str] = []
    values = values.astype(str).to_numpy()
    for value in sorted(set(values)):
        at = np.flatnonzero(values == value)
        title = f"{column} = {value}"
        y = labels[at]
        if np.unique(y).shape[0] < 2:
            left_out.append(f"{title}: its {at.shape[0]:,} answers are all {'right' if y[0] else 'wrong'}")
            continue
        try:
            rows = at.tolist()
            semantic = [embedder[i] for i in rows] if isinstance(embedder, list) else embedder  # relevances: sliced
            result, _ = evaluate_cached([kept[i] for i in rows], y, config, methods, f"{key}|{column}={value}",
                                        [beams[i] for i in rows] if beams is not None else None, semantic,
                                        embedder is not None,
                                        None if split_groups is None else tuple(split_groups[i] for i in rows))
        except (NoUsableSplitError, ValueError) as exc:
            left_out.append(f"{title}: {exc}")
            continue
        results[title] = result
    if len(results) >= 2:
        results["average"] = average_results({t: r for t, r in results.items()})
    return results, left_out


def group_panel(frame: pd.DataFrame, kept: Sequence[Trace], labels: np.ndarray, config: EvaluationConfig,
                methods: tuple[str, ...], key: str, beams: Sequence[Sequence[float]] | None, embedder: Any,
                calibrator: str, split_groups: tuple[str, ...] | None = None) -> None:
    """A choice of column, then per group (and their average) the metrics table, the verdict on TRACE+ and, for a
    group, the reliability diagram of TRACE+ and TRACE on its first held-out split. ``frame``: the kept rows."""
    columns = group_columns(frame)
    if not columns:
        return
    st.subheader("Results per group")
    # streamlit's selectbox stub uses typing.Never, which Python 3.10 lacks: mypy then takes the empty-options overload
    column: str = st.selectbox("Group by", ["(none)", *columns], key="group_by",  # type: ignore[assignment]
                          help="Run the protocol on each value of this column separately (e.g. a task family or a "
                               "model), as `trace-core evaluate --group-by` does, and average over the groups.")
    if column == "(none)":
        return
    results, left_out = evaluate_groups(frame[column], kept, labels, config, methods, key, beams, embedder, column,
                                        split_groups)
    for why in left_out:
        st.warning(md_literal(f"Left out of the groups: {why}."))
    if not results:
        return
    tabs = st.tabs([md_literal(title, limit=60) for title in results])
    for tab, (title, result) in zip(tabs, results.items(), strict=True):
        with tab:
            if title == "average":
                st.caption(md_literal(result.group_note or "The mean over the groups' splits."))
            else:
                st.caption(f"{result.n_answers:,} answers, {result.accuracy:.1%} correct. "
                           + md_literal(result.skill_note(calibrator=calibrator)))
            for note in result.notes:
                st.warning(md_literal(note))
            st.dataframe(metrics_frame(result, calibrator), hide_index=True, key=f"group_table_{title}",
                         column_config=metric_columns(result.config.metrics),
                         column_order=["method", "family", *metric_columns(result.config.metrics), "note"])
            found = result.verdict(calibrator=calibrator)
            if found is not None:
                st.info(md_literal(found.paragraph(), limit=5_000))
            no_skill = result.no_skill_sentence()
            if no_skill:
                st.warning(md_literal(no_skill))
            held = result.held_out
            if title != "average" and len(held):
                shown = [m for m in result.methods if m.startswith(("TRACE+", "TRACE"))][:2]
                probabilities = held.probabilities(calibrator, shown)
                st.plotly_chart(reliability_figure(held.labels, probabilities,
                                                   subtitle=f"{title}: first held-out split"),
                                width="stretch", key=f"group_reliability_{title}")
