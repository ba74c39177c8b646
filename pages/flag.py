"""Flag & export: new or calibrated answers scored by the active calibrator, a confidence cut, the flagged answers
with their spikes, and the download."""

from __future__ import annotations

import io

import streamlit as st

from app import state
from app.calibrators import provenance_notes, scored_out_of_fold, scored_rows
from app.dataset_panel import dataset_panel
from app.downloads import download_button
from app.drift import drift_note, drift_result
from app.guaranteed import guarantee_choice
from app.panels import active_calibrator_note, answer_details, load_calibrator_panel, production_calibrator
from app.spans import SPAN_NOTE, riskiest_span_words
from app.text import control_safe, md_literal, sentence
from trace_core import ScoreCalibrator, TracePlus
from trace_core.data import export_flagged, token_table, with_trace_columns
from trace_core.flagging.flag import OUT_OF_FOLD, flag_every, select_flagged
from trace_core.methods.spans import other_script_warning

st.title("Flag & export")
st.caption("Answers the calibrator finds unlikely to be correct, with the tokens that drove the risk, ready to review "
           "or download. Labels are optional: flag new answers as they come.")

load_calibrator_panel()
note = st.container()  # the active calibrator's note, written once this page has settled which it is
active = state.active_calibrator()

FROM_CALIBRATE, FROM_FILE = "The Calibrate page's answers", "Answers from a file"
handed = state.calibrated_data()
source = st.radio("Answers to flag", [FROM_CALIBRATE, FROM_FILE] if handed is not None else [FROM_FILE],
                  horizontal=True, key="flag_source")
if source == FROM_CALIBRATE:
    data = handed
    st.caption(f"{len(data.traces):,} answers of {md_literal(data.name)}, as evaluated on the Calibrate page.")
else:
    traced = dataset_panel("flag", require_label=False)  # labels optional; missing traces recorded
    if traced is None:
        st.stop()
    data = traced.rows.hand_off(traced.file.name)

choices = state.score_choices()
if (source == FROM_CALIBRATE and choices is not None and choices.owner[0] == data.key and data.labels is not None
        and (active is None or not active.pinned)):
    # the Calibrate page's own calibrator: its score can be chosen here too
    production_calibrator(data, choices)
active = active_calibrator_note(note)
if active is None:
    st.info("Fit a calibrator on the Calibrate page, or load a saved one above, to score these answers.")
    st.stop()
calibrator = active.model
# The answers the calibrator was fitted on: their error rates are measured with out-of-fold probabilities
in_sample = (active.fitted_on is not None and active.fitted_on == data.key and data.labels is not None
             and isinstance(calibrator, (TracePlus, ScoreCalibrator)))
try:
    scored = scored_out_of_fold(data, calibrator) if in_sample else scored_rows(data, calibrator)
except ValueError as exc:  # e.g. a calibrator that needs entropy, on answers whose traces hold none
    st.error(md_literal(f"This calibrator cannot score these answers: {exc}"))
    st.stop()
for note in provenance_notes(calibrator, data.traces):
    st.warning(md_literal(note[0].upper() + note[1:] + "."))
labels = data.labels

MODES = {"threshold": "Probability threshold", "coverage": "Coverage", "risk": "Target risk",
         "guarantee": "Guaranteed error rate"}
mode = st.radio("Flag by", list(MODES), horizontal=True, key="flag_mode", format_func=MODES.get,
                help="Target risk measures the error rate on these answers' own labels; a guaranteed error rate "
                     "is chosen on other labeled answers and holds for new ones with a stated probability.")
BY = {"answer": "The answer's probability of being correct", "span": "Its riskiest span's probability of being right"}
by = st.radio("Judge each answer by", list(BY), horizontal=True, key="flag_by", format_func=BY.get,
              disabled=mode == "guarantee", help=SPAN_NOTE)
by = "answer" if mode == "guarantee" else by  # the guarantee is on the calibrator's probability of the answer
if by == "span" and (other := other_script_warning(scored["answer"])):
    st.warning(md_literal(sentence(other)))
if mode == "threshold":
    value = st.slider("Flag answers whose probability of being correct is below" if by == "answer" else
                      "Flag answers whose riskiest span's probability of being right is below", 0.0, 1.0, 0.5, 0.01,
                      key="flag_threshold")
    flagged = select_flagged(scored, threshold=value, by=by)
elif mode == "coverage":
    value = st.slider("Share of answers to keep (the most confident)", 0.05, 1.0, 0.8, 0.05, key="flag_coverage")
    flagged = select_flagged(scored, coverage=value, by=by)
elif mode == "guarantee":
    guarantee = guarantee_choice(active, data)
    if guarantee is None:
        st.stop()
    # no threshold certified: keeping none is the only choice guaranteed, so every answer is flagged
    flagged = (flag_every(scored) if guarantee.threshold is None
               else select_flagged(scored, threshold=guarantee.threshold))
elif labels is None:
    st.info("Target risk needs labeled answers (a `label` or `reference` column) to measure the error rate; these "
            "answers have none. Flag by probability threshold or coverage instead.")
    st.stop()
else:
    value = st.slider("Largest acceptable error rate among the answers kept", 0.0, 0.5, 0.1, 0.01, key="flag_risk")
    flagged = select_flagged(scored, target_risk=value, labels=labels, by=by)

kept = ~scored.index.isin(flagged.index)
if in_sample:
    st.caption(f"The calibrator was fitted on these answers, so here each answer's P(correct) is out of fold: from "
               f"{md_literal(calibrator.score_name)} fitted on the other {OUT_OF_FOLD - 1} of {OUT_OF_FOLD} parts, "
               "and the error rates below estimate what new answers would see. Exports carry the same "
               "probabilities.")
if not in_sample:  # the answers the calibrator was fitted on are its calibration answers: nothing to compare
    drift_note(drift_result(calibrator, data.traces, key=(data.key, active.key)))
cols = st.columns(3)
cols[0].metric("Flagged", f"{len(flagged):,} of {len(scored):,}")
if labels is not None:
    if kept.any():
        cols[1].metric("Error rate among kept", f"{1 - labels[kept].mean():.1%}")
    if len(flagged):
        cols[2].metric("Error rate among flagged", f"{1 - labels[~kept].mean():.1%}")
else:
    cols[1].metric("Mean P(correct) of kept", f"{scored.loc[kept, 'probability_correct'].mean():.1%}"
                   if kept.any() else "—")

row_column = data.row_column
columns = [row_column, "prompt", "answer", "probability_correct", "riskiest_span_text", "riskiest_span_probability",
           "spike_context"]
columns += [c for c in ("reference", "label") if c in flagged.columns]
view = flagged[columns]
# Bidi overrides would reorder the table's text (and control characters hide it): show them as \uXXXX.
view = view.assign(**{c: view[c].map(lambda v: control_safe(v) if isinstance(v, str) else v)
                      for c in ("prompt", "answer", "riskiest_span_text", "spike_context", "reference")
                      if c in view.columns})
event = st.dataframe(
    view, hide_index=True, on_select="rerun", selection_mode="single-row", key="flag_table",
    column_config={
        row_column: st.column_config.NumberColumn("row", width="small", pinned=True),
        "prompt": st.column_config.TextColumn("prompt", width="medium", help="Select a row to read it in full."),
        "answer": st.column_config.TextColumn("answer", width="medium"),
        "probability_correct": st.column_config.ProgressColumn(
            "P(correct)", min_value=0.0, max_value=1.0, format="percent", width="small"),
        "riskiest_span_text": st.column_config.TextColumn(
            "riskiest span", width="small", help="The answer's riskiest name, number or date (else sentence)."),
        "riskiest_span_probability": st.column_config.ProgressColumn(
            "P(span right)", min_value=0.0, max_value=1.0, format="percent", width="small", help=SPAN_NOTE),
        "spike_context": st.column_config.TextColumn(
            "spikes in context", width="medium",
            help="The outlined tokens [[in brackets]] with their neighbours; empty when no token stands out."),
        "reference": st.column_config.TextColumn("reference", width="small"),
        "label": st.column_config.NumberColumn("label", width="small", help="1 = correct, 0 = wrong")})
selected = event.selection.rows if event is not None else []
if selected:
    position = flagged.index[selected[0]]
    answer_details(data.traces[position], flagged.loc[position], row_column=row_column,
                   extra={"P(correct)": f"{flagged.loc[position, 'probability_correct']:.1%}",
                          "riskiest span": riskiest_span_words(flagged.loc[position])})
else:
    st.caption("Long texts are cut in the table: select a row to read its prompt and reference in full, with the "
               "answer's heatmap and label.")

# What the files hold: these answers scored by this calibrator, the rows flagged (in order) and their probabilities
content = (data.key, calibrator.to_json(), flagged.index.to_numpy().tobytes(),
           flagged["probability_correct"].to_numpy().tobytes())


def exported(fmt: str) -> bytes:
    """The flagged rows with each answer's trace columns (those of `trace-core flag`'s output): the file reads back
    as a dataset and can be flagged again."""
    buffer = io.BytesIO()
    export_flagged(with_trace_columns(flagged, [data.traces[i] for i in flagged.index]), buffer, format=fmt)
    return buffer.getvalue()


# Each file is made when clicked, for the settings the page shows once it has run with the user's last change
# (app.downloads): a click right after a change never gets the previous setting's rows.
cols = st.columns(2)
download_button(cols[0], "Download flagged (CSV)", lambda: exported("csv"), content=content,
                file_name="flagged_answers.csv", mime="text/csv", key="download_csv", disabled=not len(flagged))
download_button(cols[1], "Download flagged (JSONL)", lambda: exported("jsonl"), content=content,
                file_name="flagged_answers.jsonl", mime="application/jsonl", key="download_jsonl",
                disabled=not len(flagged))


def tokens_csv() -> bytes:
    buffer = io.BytesIO()
    export_flagged(token_table([data.traces[i] for i in flagged.index], flagged[row_column].tolist()), buffer,
                   format="csv")
    return buffer.getvalue()


download_button(st, "Download the flagged answers' tokens (CSV)", tokens_csv, content=content,
                file_name="flagged_tokens.csv", mime="text/csv", key="download_tokens", disabled=not len(flagged),
                help="One row per token: its probability, entropy, rank and the alternatives the model considered.")
st.caption("Spreadsheet-safe: cells that would run as a formula are prefixed with an apostrophe. The flagged files "
           "keep every column and each answer's trace, so they can be opened here or with `trace-core flag` again.")
