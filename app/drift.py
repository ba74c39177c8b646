"""The drift check on Flag & export: a warning when the answers being flagged look drawn differently from the
calibration answers (or from the labeled answers a guarantee rests on), a small caption when they do not
(:mod:`trace_core.calibration.drift`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

from trace_core import Trace
from trace_core.calibration.calibrators import check_drift
from trace_core.calibration.drift import DriftResult

from . import state
from .text import md_literal


def drift_result(calibrator: Any, traces: Sequence[Trace], *, key: tuple[str, ...],
                 reference: Sequence[Trace] | None = None) -> DriftResult:
    """The drift check of ``traces`` (against the calibrator's summary, or against ``reference``), kept for the
    session while ``key`` (the answers' and the calibrator's keys) stays the same."""
    slot = "drift_reference" if reference is not None else "drift"

    def compute() -> DriftResult:
        try:
            return check_drift(calibrator, traces, reference=reference)
        except ValueError as exc:  # a feature the reference answers cannot give (e.g. entropy)
            return DriftResult.unavailable(str(exc), n_new=len(traces))

    return state.remembered(slot, key, compute)


def drift_note(result: DriftResult, where: Any = st) -> None:
    """The result on the page: ``st.warning`` with the sentence when a shift was found, else a caption."""
    if result.detected:
        where.warning(md_literal(result.sentence()))
    else:
        where.caption(md_literal(result.sentence()))
