"""Page parts that several pages draw the same way: the active calibrator's note, loading a saved calibrator, the
choice to use a newly fitted one, and the detail view of one answer."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import streamlit as st

from trace_core import EvaluationResult, Trace, explain_trace
from trace_core.calibration.calibrators import load_calibrator
from trace_core.checks import clip
from trace_core.flagging.flag import FlagScore, best_flag_score, flag_scores
from trace_core.methods.registry import METHODS

from . import state
from .calibrators import describe_calibrator, fit_calibrator_cached, fitted_calibrator, other_model
from .heatmap import HEATMAP_CSS, heatmap_html, legend_html, signal_values
from .keys import digest
from .spans import boxed_spans, ranked_spans
from .text import control_safe, md_literal
from .tokenizer_text import alternatives_for, alternatives_note

#: Where the calibrator is used, for the sentences that say so.
USED_BY = "Inspect, Compare and Flag & export"


def active_calibrator_note(where: Any = st) -> state.ActiveCalibrator | None:
    """A caption (in ``where``: ``st`` or a container drawn earlier) naming the active calibrator (kind, origin, what
    it was fitted on, model, entropy source), or saying there is none; returns it."""
    active = state.active_calibrator()
    if active is None:
        where.caption("No calibrator yet: fit one on the Calibrate page, or load a saved one on Flag & export.")
    else:
        where.caption(f"**Active calibrator:** {md_literal(describe_calibrator(active))}.")
    return active


def load_calibrator_panel() -> None:
    """An uploader for a calibrator JSON; a file that reads makes it the active calibrator (uploading is the user's
    choice), a file that does not leaves the active one in place and says why. Each file is loaded once: a rerun
    with the same file in the uploader does not undo a later choice."""
    with st.expander("Load a saved calibrator"):
        uploaded = st.file_uploader("Calibrator JSON (from the Calibrate page or `trace-core fit`)", type=["json"],
                                    key="calibrator_upload")
        if uploaded is None:
            return
        data = uploaded.getvalue()
        ident = (uploaded.name, digest(data))
        if state.loaded_calibrator_file() == ident:
            st.caption(f"{md_literal(uploaded.name)} was loaded; upload another file to load it.")
            return
        try:
            model = load_calibrator(data)
        except ValueError as exc:
            problems = getattr(exc, "problems", None) or [str(exc)]
            st.error(md_literal(f"{uploaded.name}: not a calibrator this version can read: " + "; ".join(problems)))
            return
        state.set_loaded_calibrator_file(ident)
        state.set_calibrator(fitted_calibrator(model, origin=f"loaded from '{uploaded.name}'", pinned=True))
        st.success(f"Loaded {md_literal(uploaded.name)}: it is now the active calibrator.")


def offer_calibrator(candidate: state.ActiveCalibrator) -> None:
    """The calibrator the Calibrate page fitted: made active when there is none or the active one was not chosen by
    the user (it was this page's earlier fit), and it was fitted on the sidebar model's answers; a loaded or chosen
    one is replaced, and one of another model's answers made active, only with the button."""
    active = state.active_calibrator()
    lm = state.model()
    others = other_model(candidate.model, lm)
    if active is not None and active.key == candidate.key:
        st.caption(f"It is the active calibrator, used by {USED_BY}.")
        return
    if (active is None or not active.pinned) and not others:
        state.set_calibrator(candidate)
        st.caption(f"It is now the active calibrator, used by {USED_BY}.")
        return
    if others:
        names = ", ".join(repr(clip(m, 80)) for m in others[:3]) + (" and others" if len(others) > 3 else "")
        sidebar = clip(lm.model_id, 80) if lm is not None else ""  # others is empty without a model
        still = ("No calibrator is active." if active is None else
                 f"The active calibrator is still {describe_calibrator(active)}.")
        st.info(md_literal(f"This calibrator was fitted on answers of {names}, not of the sidebar's model "
                           f"'{sidebar}', so it was not made active: its probabilities for that model's answers may "
                           f"be miscalibrated. {still}"))
    elif active is not None:
        st.info(f"The active calibrator is another one: {md_literal(describe_calibrator(active))}. It stays in use "
                "until you choose the one fitted here.")
    if st.button("Use the calibrator fitted here", key="use_fitted_calibrator"):
        state.set_calibrator(dataclasses.replace(candidate, pinned=True))
        st.rerun()


def answer_details(trace: Trace, row: pd.Series, *, row_column: str, extra: dict[str, Any] | None = None) -> None:
    """One answer in full: its row, prompt, the answer's heatmap (riskiest spans boxed), reference and label when the
    file has them. ``extra`` values go into Markdown as they are: escape untrusted text first."""
    exp = explain_trace(trace)
    facts = [f"**Row {int(row[row_column])}**", f"TRACE confidence {exp.confidence:.3f}"]
    facts += [f"{k} {v}" for k, v in (extra or {}).items()]
    if "label" in row.index:
        facts.append("labeled **correct**" if int(row["label"]) == 1 else "labeled **wrong**")
    st.markdown(" · ".join(facts))
    st.caption("Prompt")
    st.code(control_safe(str(row.get("prompt", trace.prompt))), language=None, wrap_lines=True)
    lm = state.model()
    note = alternatives_note(lm, trace)
    st.caption("Answer (hover or focus a token for its details)")
    boxed = boxed_spans(*ranked_spans(trace, exp))
    st.html(HEATMAP_CSS + legend_html(signal_values(trace, "surprisal", exp), spans=bool(boxed),
                                      pieces="" in trace.tokens)
            + heatmap_html(trace, signal="surprisal", explanation=exp, alternatives=alternatives_for(lm),
                           alternatives_note=note, spans=boxed))
    if "reference" in row.index and not pd.isna(row["reference"]):
        st.caption("Reference")
        st.code(control_safe(str(row["reference"])), language=None, wrap_lines=True)


def score_choices(result: EvaluationResult, owner: tuple[Any, ...]) -> state.ScoreChoices:
    """The scores ``result``'s answers can be flagged with, and a note naming a fitted baseline or the reference that
    had a lower held-out Brier than all of them (they cannot be saved as calibrators)."""
    options = tuple(flag_scores(result))
    best = best_flag_score(options)
    note = ""
    summary = result.summary
    fitted = summary[(summary["metric"] == "brier") & ~summary["uninformative"]
                     & summary["method"].map(lambda m: METHODS[m].kind in ("fitted_baseline", "reference"))]
    if best is not None and len(fitted) and fitted["mean"].min() < best.brier:
        top = fitted.loc[fitted["mean"].idxmin()]
        note = (f"{top['method']} did better (Brier {top['mean']:.3f}) but is fitted per split and cannot be saved as "
                "a calibrator yet.")
    return state.ScoreChoices(owner=owner, options=options, note=note, small_sample=result.small_sample)


def flag_score_choice(choices: state.ScoreChoices) -> FlagScore:
    """A choice of the score the production calibrator calibrates, each option with its held-out Brier; it starts at
    (and, for another comparison, returns to) the one with the lowest, and says why."""
    best = best_flag_score(choices.options)
    by_name = {o.name: o for o in choices.options}
    state.follow("flag_score", choices.owner, (best or choices.options[0]).name)
    state.keep_valid("flag_score", list(by_name))

    def label(name: str) -> str:
        option = by_name[name]
        if option.brier != option.brier:
            return f"{name} — not in the comparison"
        return f"{name} — held-out Brier {option.brier:.3f}" + (" (lowest)" if option == best else "")

    chosen = by_name[st.selectbox("Score to calibrate", list(by_name), key="flag_score", format_func=label,
                                  help="The calibrator turns this score into P(correct) for Inspect, Compare and "
                                       "Flag & export. The Brier score rewards both ranking the answers well and "
                                       "stating calibrated probabilities, which is what a cut on P(correct) needs.")]
    notes = []
    if best is not None:
        notes.append(f"{best.name} has the lowest mean Brier over the comparison's held-out parts, so it is the "
                     "default" + ("; you chose another." if chosen != best else ".")
                     + (" With this few answers that may be chance: another score may do as well (see the note "
                        "above the table)." if choices.small_sample else ""))
    if choices.note:
        notes.append(choices.note)
    notes.append("The calibrator file records which score it calibrates.")
    st.caption(md_literal(" ".join(notes)))
    return chosen


def production_calibrator(data: state.Answers, choices: state.ScoreChoices) -> tuple[FlagScore, Any]:
    """The score choice and the calibrator of that score fitted on all of ``data`` (the Calibrate page's labeled
    answers), offered as the active calibrator (:func:`offer_calibrator`). Returns the score and the calibrator."""
    score = flag_score_choice(choices)
    if data.labels is None:  # both pages hand over labeled answers only (Flag & export checks, Calibrate needs them)
        raise ValueError("a production calibrator is fitted on labeled answers; these have no labels")
    model = fit_calibrator_cached(data.traces, data.labels, data.key, (score.method, score.calibrator))
    st.caption(f"{md_literal(score.name)} fitted on all {len(data.traces):,} labeled answers of "
               f"{md_literal(data.name)}.")
    offer_calibrator(fitted_calibrator(model, origin="fitted on the Calibrate page",
                                       data=f"{len(data.traces):,} answers of '{data.name}'", fitted_on=data.key))
    return score, model


def calibrator_file_name(score: FlagScore) -> str:
    """``trace_plus_calibrator.json``, ``seqlogp_isotonic_calibrator.json``: the score in the name, in safe
    characters."""
    stem = "".join(ch if ch.isalnum() else "_" for ch in score.method.replace("+", "_plus").lower())
    stem = "_".join(part for part in stem.split("_") if part)
    return f"{stem}{'' if score.calibrator == 'logistic' else '_' + score.calibrator}_calibrator.json"
