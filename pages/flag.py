"""Flag & export: pick a confidence cut, review the flagged answers with their spikes, download them."""

from __future__ import annotations

import io

import streamlit as st

from app import state
from app.components import HEATMAP_CSS, control_safe, heatmap_html, legend_html, md_literal, signal_values
from app.services import alternatives_for, provenance_notes, scored_rows
from trace_core import explain_trace
from trace_core.calibrate import load_calibrator
from trace_core.data import export_flagged
from trace_core.flag import select_flagged

st.title("Flag & export")
st.caption("Answers the calibrator finds unlikely to be correct, with the tokens that drove the risk, ready to review "
           "or download.")

with st.expander("Use a saved calibrator instead"):
    uploaded = st.file_uploader("Calibrator JSON (from the Calibrate page or `trace-core fit`)", type=["json"],
                                key="calibrator_upload")
    if uploaded is not None:
        # Checked in full before it replaces anything: a file that fails leaves the previous calibrator in place.
        try:
            loaded = load_calibrator(uploaded.getvalue())
        except ValueError as exc:
            problems = getattr(exc, "problems", None) or [str(exc)]
            st.error(md_literal(f"{uploaded.name}: not a calibrator this version can read: "
                                + "; ".join(problems)))
        else:
            state.set_calibrator(loaded)
            st.success("Calibrator loaded.")

data, calibrator = state.calibrated_data(), state.calibrator()
if data is None or calibrator is None:
    st.info("Choose a dataset on the Calibrate page first: it fits the calibrator and brings the answers here.")
    st.stop()
try:
    scored = scored_rows(data, calibrator)
except ValueError as exc:  # e.g. a calibrator that needs entropy, on answers whose traces hold none
    st.error(md_literal(f"This calibrator cannot score these answers: {exc}"))
    st.stop()
for note in provenance_notes(calibrator, data.traces):
    st.warning(md_literal(note[0].upper() + note[1:] + "."))
labels = data.labels

mode = st.radio("Flag by", ["threshold", "risk", "coverage"], horizontal=True, key="flag_mode",
                format_func=lambda m: {"threshold": "Probability threshold", "risk": "Target risk",
                                       "coverage": "Coverage"}[m])
if mode == "threshold":
    value = st.slider("Flag answers whose probability of being correct is below", 0.0, 1.0, 0.5, 0.01,
                      key="flag_threshold")
    flagged = select_flagged(scored, threshold=value)
elif mode == "risk":
    value = st.slider("Largest acceptable error rate among the answers kept", 0.0, 0.5, 0.1, 0.01, key="flag_risk")
    flagged = select_flagged(scored, target_risk=value, labels=labels)
else:
    value = st.slider("Share of answers to keep (the most confident)", 0.05, 1.0, 0.8, 0.05, key="flag_coverage")
    flagged = select_flagged(scored, coverage=value)

kept = ~scored.index.isin(flagged.index)
cols = st.columns(3)
cols[0].metric("Flagged", f"{len(flagged):,} of {len(scored):,}")
if kept.any():
    cols[1].metric("Error rate among kept", f"{1 - labels[kept].mean():.1%}")
if len(flagged):
    cols[2].metric("Error rate among flagged", f"{1 - labels[~kept].mean():.1%}")

row_column = data.row_column
view = flagged[[row_column, "prompt", "answer", "probability_correct", "spike_context"]
               + (["label"] if "label" in flagged.columns else [])]
# Bidi overrides would reorder the table's text (and control characters hide it): show them as \uXXXX.
view = view.assign(**{c: view[c].map(lambda v: control_safe(v) if isinstance(v, str) else v)
                      for c in ("prompt", "answer", "spike_context")})
event = st.dataframe(view, hide_index=True, on_select="rerun", selection_mode="single-row", key="flag_table",
                     column_config={
                         row_column: st.column_config.NumberColumn("row"),
                         "probability_correct": st.column_config.ProgressColumn(
                             "P(correct)", min_value=0.0, max_value=1.0, format="percent"),
                         "spike_context": st.column_config.TextColumn("spikes in context", width="large")})
selected = event.selection.rows if event is not None else []
if selected:
    position = flagged.index[selected[0]]
    trace = data.traces[position]
    exp = explain_trace(trace)
    st.markdown(f"**Row {int(flagged.loc[position, row_column])}** — TRACE confidence {exp.confidence:.3f}, "
                f"P(correct) {flagged.loc[position, 'probability_correct']:.0%}")
    st.html(HEATMAP_CSS + legend_html(signal_values(trace, "surprisal", exp))
            + heatmap_html(trace, signal="surprisal", explanation=exp,
                           alternatives=alternatives_for(state.model())))
else:
    st.caption("Select a row to see its answer's heatmap.")

export = flagged.drop(columns=["spike_context"])
csv_buffer, jsonl_buffer = io.BytesIO(), io.BytesIO()
export_flagged(export, csv_buffer, format="csv")
export_flagged(export, jsonl_buffer, format="jsonl")
cols = st.columns(2)
cols[0].download_button("Download flagged (CSV)", csv_buffer.getvalue(), file_name="flagged_answers.csv",
                        mime="text/csv", key="download_csv", disabled=not len(flagged))
cols[1].download_button("Download flagged (JSONL)", jsonl_buffer.getvalue(), file_name="flagged_answers.jsonl",
                        mime="application/json", key="download_jsonl", disabled=not len(flagged))
st.caption("Spreadsheet-safe: cells that would run as a formula are prefixed with an apostrophe.")
