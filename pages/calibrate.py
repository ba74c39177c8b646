"""Calibrate: a labeled dataset -> TRACE+ vs TRACE vs baselines on held-out splits, and a calibrator to export."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from app.components import md_literal, metrics_table, reliability_figure, risk_coverage_figure, roc_figure
from app.services import (
    context_length,
    demo_datasets,
    digest,
    evaluate_cached,
    file_bytes,
    fit_calibrator_cached,
    local_files_allowed,
    parse_beams,
    read_cached,
    read_local_file,
    rows_over_context,
)
from trace_core import DatasetError, EvaluationConfig, method_names, score_answers
from trace_core.data import MATCHERS

st.title("Calibrate and compare")
st.caption("Upload answers labeled correct or wrong (or with a reference answer). TRACE+ is fitted on a calibration "
           "split and every method is scored on the held-out rest, over repeated random splits.")

lm = st.session_state.get("lm")
demos = demo_datasets()
options = (["Demo dataset"] if demos else []) + ["Upload a file"] + (["File path"] if local_files_allowed() else [])
source = st.radio("Data", options, horizontal=True, key="data_source")
if source == "Demo dataset":
    name = st.selectbox("Demo dataset", list(demos), key="demo_dataset")
    data, filename = file_bytes(demos[name]), demos[name].name
elif source == "File path":
    path_text = st.text_input("Path of a dataset file on this machine", key="data_path").strip()
    if not path_text:
        st.info("Type the path of a CSV, JSON Lines or Parquet file.")
        st.stop()
    try:
        data, filename = read_local_file(path_text)
    except (OSError, ValueError) as exc:
        st.error(md_literal(str(exc)))
        st.stop()
else:
    uploaded = st.file_uploader("CSV, JSON Lines or Parquet", type=["csv", "tsv", "jsonl", "json", "ndjson", "parquet"],
                                key="upload", help="Columns: prompt, answer, and label (0/1) or reference; "
                                                   "optionally recorded traces. See the README for the format.")
    if uploaded is None:
        st.info("Upload a file to start, or pick a demo dataset.")
        st.stop()
    data, filename = uploaded.getvalue(), uploaded.name

try:
    dataset = read_cached(data, filename, "exact")
    if dataset.label_source.startswith("reference"):
        matcher = st.selectbox("Label answers against their `reference` with", MATCHERS, key="matcher",
                               help="exact: normalised exact match; contains: the reference appears in the answer; "
                                    "numeric: the answer's last number equals it; f1: token F1 >= 0.5.")
        dataset = read_cached(data, filename, matcher)
    else:
        matcher = "exact"
except DatasetError as exc:
    st.error(md_literal(f"{filename}: {exc}"))
    st.stop()

if dataset.n_rejected:
    st.warning(f"{dataset.n_read:,} rows read: {dataset.n_valid:,} kept, {dataset.n_rejected:,} rejected.")
    with st.expander("Rejected rows and why"):
        st.dataframe(pd.DataFrame([{"row": e.row, "column": e.field, "problem": e.message} for e in dataset.errors]),
                     hide_index=True)
else:
    st.success(f"{dataset.n_read:,} rows read, all kept.")
if dataset.n_valid == 0:
    st.stop()

data_key = digest(data, filename, matcher)
recorded: dict = st.session_state.setdefault("recorded", {})
model_key = lm.model_id if lm is not None else None
traces = list(dataset.traces)
store = recorded.get((data_key, model_key), {})
for i, t in store.items():
    traces[i] = t
missing = [i for i, t in enumerate(traces) if t is None]
if missing and lm is not None:
    # The model cannot score what does not fit its context: leave those rows out instead of failing the batch.
    frame = dataset.frame
    too_long = {missing[j] for j in rows_over_context(lm, [str(frame["prompt"].iloc[i]) for i in missing],
                                                      [str(frame["answer"].iloc[i]) for i in missing])}
    if too_long:
        long_rows = frame[dataset.row_column].iloc[sorted(too_long)].tolist()
        one = len(long_rows) == 1
        shown = ", ".join(map(str, long_rows[:10])) + (" …" if len(long_rows) > 10 else "")
        st.warning(f"{len(long_rows):,} {'answer does' if one else 'answers do'} not fit the model's context "
                   f"({context_length(lm):,} tokens, prompt and answer together) and {'is' if one else 'are'} left "
                   f"out (row{'' if one else 's'} {shown}).")
        missing = [i for i in missing if i not in too_long]
if missing:
    st.warning(f"{len(missing):,} of {len(traces):,} answers have no recorded trace.")
    if lm is None:
        st.info("Choose a model in the sidebar to record them.")
        st.stop()
    if st.button(f"Record {len(missing):,} traces with the selected model", type="primary", key="record"):
        st.button("Stop", key="stop_recording", help="Stops after the current batch; recorded traces are kept.")
        bar = st.progress(0.0, text="Recording traces…")
        frame = dataset.frame
        batch = 16
        for start in range(0, len(missing), batch):
            rows = missing[start:start + batch]
            new = score_answers(lm, [str(frame["prompt"].iloc[i]) for i in rows],
                                [str(frame["answer"].iloc[i]) for i in rows], batch_size=batch)
            for i, t in zip(rows, new):
                store[i] = t
            recorded[(data_key, model_key)] = store
            done = min(start + batch, len(missing))
            bar.progress(done / len(missing), text=f"Recorded {done:,} of {len(missing):,} traces")
        st.rerun()
    st.stop()

empty = [i for i, t in enumerate(traces) if t is not None and len(t) == 0]
if empty:
    empty_rows = dataset.frame[dataset.row_column].iloc[empty].tolist()
    shown = ", ".join(map(str, empty_rows[:10])) + (" …" if len(empty_rows) > 10 else "")
    st.warning(f"{len(empty):,} answers are empty (no tokens) and are left out of the evaluation "
               f"(row{'s' if len(empty_rows) > 1 else ''} {shown}).")
keep = np.array([i for i, t in enumerate(traces) if t is not None and len(t) > 0], dtype=np.int64)
labels = dataset.labels[keep]
kept_traces = [traces[i] for i in keep]
if len(labels) == 0:
    st.error(f"All {len(traces):,} answers are empty (no tokens): there is nothing to evaluate.")
    st.stop()
if len(np.unique(labels)) < 2:
    which = "correct" if labels[0] == 1 else "wrong"
    who = "The only usable answer is" if len(labels) == 1 else f"All {len(labels):,} usable answers are"
    st.error(f"{who} labeled {which}: calibration and every metric need both correct and wrong answers.")
    st.stop()

with st.form("protocol"):
    cols = st.columns(4)
    n_splits = cols[0].slider("Random splits", 2, 50, 20, key="n_splits")
    fraction = cols[1].slider("Calibration share", 0.1, 0.8, 0.35, 0.05, key="fraction")
    seed = cols[2].number_input("Seed", 0, 10_000, 0, key="eval_seed")
    stratified = cols[3].checkbox("Stratified splits", key="stratified")
    st.form_submit_button("Run", type="primary")

config = EvaluationConfig(n_splits=int(n_splits), calibration_fraction=float(fraction), seed=int(seed),
                          stratified=bool(stratified))
try:
    beams, beam_problem = parse_beams(dataset, keep)
    if beam_problem:
        st.warning(f"Beam baselines skipped: {md_literal(beam_problem)}.")
    result, notes = evaluate_cached(kept_traces, labels, config, tuple(method_names()), f"{data_key}/{model_key}",
                                    beams)
except ValueError as exc:
    st.error(md_literal(str(exc)))
    st.stop()
for note in notes:
    st.warning(note)

st.subheader("Metrics (mean ± std over held-out splits)")
st.caption(f"{len(kept_traces):,} answers, {labels.mean():.1%} correct. AUROC, AUPRC and AURC rank answers by each "
           "method's raw score; Brier and ECE use probabilities after calibration. ↑ higher is better, ↓ lower.")
table = metrics_table(result.summary, config.metrics, result.methods)
st.dataframe(table, hide_index=True, key="metrics_table", column_config={
    "brier": st.column_config.NumberColumn("Brier ↓", format="%.3f"),
    "ece": st.column_config.NumberColumn("ECE ↓", format="%.3f"),
    "auroc": st.column_config.NumberColumn("AUROC ↑", format="%.3f"),
    "auprc": st.column_config.NumberColumn("AUPRC ↑", format="%.3f"),
    "aurc": st.column_config.NumberColumn("AURC ↓", format="%.3f"),
    **{f"{m} ±": st.column_config.NumberColumn("±", format="%.3f") for m in config.metrics}})
if result.skipped:
    st.caption("Not run: " + "; ".join(f"{k} ({v})" for k, v in result.skipped.items()))

available = [m for m in result.methods if m not in ("TRACE+", "TRACE")]
chosen = st.multiselect("Baselines in the plots", available, default=[m for m in ("SeqLogP", "Mean Entropy")
                                                                       if m in available], key="plot_baselines")
shown = ["TRACE+", "TRACE", *chosen]
held = result.held_out
y = held["label"].to_numpy()
tabs = st.tabs(["Reliability", "Risk–coverage", "ROC"])
with tabs[0]:
    cols = st.columns(2)
    strategy = cols[0].radio("Bins", ["uniform", "quantile"], horizontal=True, key="bin_strategy",
                             format_func=lambda s: {"uniform": "equal width", "quantile": "equal mass"}[s])
    n_bins = cols[1].slider("Number of bins", 3, 30, 10, key="n_bins")
    st.plotly_chart(reliability_figure(y, {m: held[m].to_numpy() for m in shown}, n_bins=n_bins, strategy=strategy),
                    width="stretch", key="reliability")
    st.caption("First held-out split. Points: observed accuracy per bin with 95% Wilson intervals; bars: how many "
               "answers fall in each bin.")
with tabs[1]:
    st.plotly_chart(risk_coverage_figure(y, {m: held[f"{m} score"].to_numpy() for m in shown}), width="stretch",
                    key="risk_coverage")
with tabs[2]:
    st.plotly_chart(roc_figure(y, {m: held[f"{m} score"].to_numpy() for m in shown}), width="stretch", key="roc")

st.subheader("Calibrator for production")
model = fit_calibrator_cached(kept_traces, labels, f"{data_key}/{model_key}")
st.session_state["calibrator"] = model
st.session_state["flag_data"] = {"frame": dataset.frame.iloc[keep].reset_index(drop=True), "traces": kept_traces,
                                 "labels": labels, "name": filename, "row_column": dataset.row_column,
                                 "key": data_key}
st.caption(f"TRACE+ fitted on all {len(kept_traces):,} labeled answers; it is now used by the Inspect and Flag pages.")
cols = st.columns(2)
cols[0].download_button("Download calibrator (JSON)", model.to_json(), file_name="trace_plus_calibrator.json",
                        mime="application/json", key="download_calibrator")
cols[1].download_button("Download results table (CSV)", result.summary.to_csv(index=False),
                        file_name="trace_results.csv", mime="text/csv", key="download_results")
