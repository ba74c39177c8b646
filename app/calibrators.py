"""Calibrators on the pages: fitted on a dataset's answers (cached by content for every session), made the active
calibrator, described in a sentence, checked against the answers they score, and the answers they score (kept for
the session)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from trace_core import ScoreCalibrator, Trace, TracePlus, TraceTable
from trace_core.checks import clip
from trace_core.flagging.flag import FlagScore

from . import state
from .keys import digest


@st.cache_data(show_spinner="Fitting the calibrator…", max_entries=8)
def fit_calibrator_cached(_traces: Sequence[Trace], labels: np.ndarray, key: str,
                          score: tuple[str, str] = ("TRACE+", "logistic")) -> TracePlus | ScoreCalibrator:
    """The calibrator of ``score`` (a :class:`trace_core.flagging.flag.FlagScore`'s method and calibrator: TRACE+ on a
    feature set, or TRACE or a baseline with Platt scaling or isotonic regression) fitted on all the labeled answers of
    a dataset; ``key`` identifies the traces, as for :func:`app.evaluation.evaluate_cached` (file digest and
    :func:`app.keys.model_key`). Each caller gets its own copy (``st.cache_data``)."""
    return FlagScore(*score).calibrator_model().fit(TraceTable.from_traces(_traces), labels)


def fitted_calibrator(model: Any, *, origin: str, data: str | None = None, pinned: bool = False,
                      fitted_on: str | None = None) -> state.ActiveCalibrator:
    """``model`` as an :class:`app.state.ActiveCalibrator`, keyed by its parameters (and what it was fitted on, but
    not when: a refit of the same data is the same calibrator); ``fitted_on``: the key of the answers it was fitted
    on."""
    fields = json.loads(model.to_json())
    if isinstance(fields.get("provenance"), dict):
        fields["provenance"].pop("date", None)
    return state.ActiveCalibrator(model=model, origin=origin, data=data,
                                  key=digest(json.dumps(fields, sort_keys=True)), pinned=pinned, fitted_on=fitted_on)


def describe_calibrator(active: state.ActiveCalibrator) -> str:
    """One plain sentence on a calibrator: its kind, where it came from, what it was fitted on (answers, models,
    entropy source, feature set) as far as it records it."""
    model = active.model
    kind = {"TracePlus": "TRACE+", "PlattCalibrator": "Platt scaling of TRACE confidence",
            "IsotonicCalibrator": "isotonic regression of TRACE confidence"}
    name = kind.get(type(model).__name__, type(model).__name__)
    if isinstance(model, ScoreCalibrator):
        name = model.score_name
    feature_set = getattr(model, "feature_set", None)
    if feature_set:
        name += f" ({feature_set} features)"
    parts = [f"{name}, {active.origin}"]
    if active.data:
        parts.append(f"fitted on {active.data}")
    provenance = getattr(model, "provenance_", None) or {}
    if provenance.get("n_rows") and not active.data:
        parts.append(f"fitted on {provenance['n_rows']:,} answers")
    models = [str(m) for m in provenance.get("model_id", []) if m]
    if models:
        parts.append("traces of " + ", ".join(repr(clip(m, 80)) for m in models[:3])
                     + (f" and {len(models) - 3} more" if len(models) > 3 else ""))
    sources = [str(s) for s in provenance.get("entropy_source", []) if s]
    if sources:
        parts.append("entropy " + " and ".join(sources))
    elif provenance:
        parts.append("no recorded entropy source")
    else:
        parts.append("no record of its training data (a file from an earlier version)")
    return "; ".join(parts)


def other_model(model: Any, lm: Any) -> list[str]:
    """The models a calibrator was fitted on, when the sidebar's model ``lm`` is none of them (by content digest where
    both record one, else by id); empty when it is one, or when either is unknown (no model loaded, a calibrator
    without provenance)."""
    provenance = getattr(model, "provenance_", None) or {}
    fitted = [str(m) for m in provenance.get("model_id", []) if m]
    if lm is None or not fitted:
        return []
    digests = [str(d) for d in provenance.get("model_digest", []) if d]
    digest_of = getattr(lm, "model_digest", "")
    if digests and digest_of:
        return [] if digest_of in digests else fitted
    return [] if getattr(lm, "model_id", None) in fitted else fitted


def scored_out_of_fold(data: state.Answers, calibrator: Any) -> pd.DataFrame:
    """:func:`scored_rows` with ``probability_correct`` from :func:`trace_core.flagging.flag.out_of_fold_probabilities`:
    for the answers ``calibrator`` was fitted on, whose error rates its own probabilities would flatter."""
    from trace_core.flagging.flag import out_of_fold_probabilities, score_rows, unscored

    def compute() -> pd.DataFrame:
        scored = score_rows(unscored(data.frame), data.traces, calibrator)
        scored["probability_correct"] = out_of_fold_probabilities(data.traces, data.labels, calibrator)
        return scored

    return state.scored(digest(data.key, calibrator.to_json(), "out of fold"), compute)


def scored_rows(data: state.Answers, calibrator: Any) -> pd.DataFrame:
    """The answers scored by ``calibrator`` (:func:`trace_core.flagging.flag.score_rows`), once per data and calibrator
    in a session: moving the Flag page's sliders does not score again. ``data.key`` holds the recording model's
    :func:`app.keys.model_key`, so traces recorded with another model (another server serving the same name) score
    afresh."""
    from trace_core.flagging.flag import score_rows, unscored

    def compute() -> pd.DataFrame:
        return score_rows(unscored(data.frame), data.traces, calibrator)

    return state.scored(digest(data.key, calibrator.to_json()), compute)


def provenance_notes(calibrator: Any, traces: Sequence[Trace]) -> list[str]:
    """Why ``calibrator`` may be miscalibrated on ``traces`` (another model or entropy source than its fit's), as
    sentences for the page; empty for calibrators that record no provenance."""
    mismatch = getattr(calibrator, "provenance_mismatch", None)
    return mismatch(traces) if callable(mismatch) else []
