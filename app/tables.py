"""The Calibrate page's tables from an :class:`~trace_core.EvaluationResult`: the metrics table with its column
settings (headers and help from the metric registry) and the paired differences. Pure functions: the column
settings are plain Streamlit config objects, nothing is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from trace_core import EvaluationResult
from trace_core.methods.registry import METRICS


def metrics_frame(result: EvaluationResult, calibrator: str | None = None) -> pd.DataFrame:
    """The page's metrics table: :meth:`EvaluationResult.table` under ``calibrator`` (one row per method, in method
    order; ``family``, ``<metric>`` and ``<metric>_std`` columns) with the method as its first column and each
    method's note (uninformative, supervised reference) as its last."""
    table = result.table(calibrator=calibrator).rename_axis("method").reset_index()
    table["note"] = table["method"].map(result.note)
    return table


def paired_frame(result: EvaluationResult, calibrator: str | None = None) -> pd.DataFrame:
    """TRACE+ and TRACE minus the best baseline (chosen on each split's calibration part) and minus the supervised
    reference, ``"+0.012 ± 0.004 (18/20)"`` cells: one row per metric (its title from the registry), one column per
    difference (``"TRACE+ − best baseline"``, ``"TRACE+ − reference"``, ...), so that the table fits the page's width
    (six metric columns of such cells did not, at 1,400 px)."""
    from trace_core.evaluation.paired import BEST_BASELINE
    from trace_core.methods.registry import REFERENCE

    if result.paired is None:
        return pd.DataFrame()
    table = result.paired.table(calibrator=calibrator or result.config.scalar_calibrator,
                                versus=(BEST_BASELINE, REFERENCE))
    metrics = [m for m in METRICS if m in table.columns]
    short = {REFERENCE: "reference"}
    out = pd.DataFrame({"metric": [METRICS[m].title for m in metrics]})
    for _, row in table.iterrows():
        out[f"{row['method']} − {short.get(row['versus'], row['versus'])}"] = [row[m] for m in metrics]
    return out


def metric_columns(metrics: Sequence[str]) -> dict[str, Any]:
    """Streamlit column settings for :func:`metrics_frame`: headers and help from the metric registry
    (``"AUROC ↑"`` over ``auroc``, ``"±"`` over ``auroc_std``)."""
    import streamlit as st

    columns: dict[str, Any] = {}
    for name in metrics:
        spec = METRICS[name]
        basis = "each method's raw score" if spec.on == "score" else "calibrated probabilities"
        direction = "higher" if spec.higher_is_better else "lower"
        columns[name] = st.column_config.NumberColumn(spec.title, format="%.3f",
                                                      help=f"{spec.label} on {basis}; {direction} is better.")
        columns[f"{name}_std"] = st.column_config.NumberColumn("±", format="%.3f",
                                                               help=f"{spec.label}: standard deviation over splits.")
    return columns

