"""Calibrate: a labeled dataset -> TRACE+ vs TRACE vs baselines on held-out splits, and a calibrator to export."""

from __future__ import annotations

import streamlit as st

from app import state
from app.dataset_panel import dataset_panel
from app.downloads import download_button
from app.evaluation import evaluate_cached, parse_beams
from app.groups import group_panel
from app.panels import calibrator_file_name, production_calibrator, score_choices
from app.recording import traces_download
from app.semantic import relevance_panel
from app.services import embedder
from app.tables import metric_columns, metrics_frame, paired_frame
from app.text import md_literal, sentence
from trace_core import EvaluationConfig
from trace_core.evaluation.results import CALIBRATOR_NAMES
from trace_core.evaluation.run import SCALAR_CALIBRATORS, AnswerValueError
from trace_core.methods.registry import get_method, method_names
from trace_core.policy import METRICS_UNDEFINED, one_class_message
from trace_core.report.figures import legend_stats, reliability_figure, risk_coverage_figure, roc_figure
from trace_core.report.html import figure_baselines, report_html

st.title("Calibrate and compare")
st.caption("Upload answers labeled correct or wrong (or with a reference answer). TRACE+ is fitted on a calibration "
           "split and every method is scored on the held-out rest, over repeated random splits.")

# a prompts file is answered by the sidebar's model first; a partial recording can be downloaded
traced = dataset_panel(prompts=True, partial_download=True)
if traced is None:
    st.stop()
picked, rows = traced.file, traced.rows
dataset, labels, kept = rows.dataset, rows.labels(), rows.kept
problem = one_class_message(labels, METRICS_UNDEFINED)
if problem:
    st.error(sentence(problem))
    st.stop()

prompts = dataset.frame["prompt"].iloc[rows.usable.keep].astype(str)
repeated = bool(prompts.duplicated().any())  # several answers to one prompt: not independent
with st.form("protocol"):
    cols = st.columns(4)
    n_splits = cols[0].slider("Random splits", 2, 50, 20, key="n_splits")
    fraction = cols[1].slider("Calibration share", 0.1, 0.8, 0.35, 0.05, key="fraction")
    seed = cols[2].number_input("Seed", 0, 10_000, 0, key="eval_seed")
    stratified = cols[3].checkbox("Stratified splits", key="stratified")
    by_prompt = repeated and st.checkbox(
        "Keep each prompt's answers together", value=True, key="split_by_prompt",
        help="Some prompts have several answers here; they share the prompt's difficulty, so a split that fits on "
             "some and scores others would flatter every method. Each split keeps a prompt's answers on one side "
             "(as `trace-core evaluate --split-by prompt`); not with stratified splits.")
    semantic = st.toggle("Semantic baselines (TokenSAR, MARS-style)", key="semantic",
                         help="Weigh each token by its relevance to the answer, from a sentence-embedding model "
                              "(all-MiniLM-L6-v2, run locally). Slower: every answer is embedded token by token.")
    st.form_submit_button("Run", type="primary")

if by_prompt and stratified:
    st.caption("Stratified splits are off while each prompt's answers are kept together: one or the other.")
config = EvaluationConfig(n_splits=int(n_splits), calibration_fraction=float(fraction), seed=int(seed),
                          stratified=bool(stratified) and not by_prompt)
split_groups = tuple(prompts) if by_prompt else None
try:
    beams, beam_problem = parse_beams(dataset, rows.usable.keep)
    if beam_problem:
        st.warning(f"Beam baselines skipped: {md_literal(beam_problem)}.")
    model_for_semantic = None
    if semantic:
        model, why = embedder()
        if model is None:
            st.warning(f"Semantic baselines skipped: {md_literal(why)}.")
        else:  # the answers' token relevances, with a progress bar and a Stop (None when stopped)
            model_for_semantic = relevance_panel(kept, rows.key, model)
    result, notes = evaluate_cached(kept, labels, config, tuple(method_names()), rows.key, beams, model_for_semantic,
                                    model_for_semantic is not None, split_groups)
except AnswerValueError as exc:  # the library counts kept answers from 0; the user counts file rows
    st.error(md_literal(f"Row {rows.usable.rows([int(rows.usable.keep[exc.index])])[0]}: {exc.reason}."))
    st.stop()
except ValueError as exc:
    st.error(md_literal(str(exc)))
    st.stop()
for note in dict.fromkeys([*notes, *result.notes]):  # warnings and the result's notes (small sample, ...), once
    st.warning(md_literal(note))

st.subheader("Metrics (mean ± std over held-out splits)")
calibrator = st.radio("Calibrator for TRACE and the baselines", SCALAR_CALIBRATORS, horizontal=True,
                      key="scalar_calibrator", format_func=CALIBRATOR_NAMES.get,
                      help="Both are fitted on every split; TRACE+, the fitted baselines (CES, WEPR, Trace Profile) "
                           "and the reference use their own fitted model.")
st.caption(f"{md_literal(result.data_note)}; {len(kept):,} answers, {labels.mean():.1%} correct. "
           f"{md_literal(result.skill_note(calibrator=calibrator))} "
           f"{md_literal(result.caption(calibrator=calibrator))} ↑ higher is better, ↓ lower.")
columns = metric_columns(config.metrics)  # each metric followed by its ±
st.dataframe(metrics_frame(result, calibrator), hide_index=True, key="metrics_table",
             column_config={"method": st.column_config.TextColumn("method", pinned=True),
                            "family": st.column_config.TextColumn("family", width="small"), **columns},
             column_order=["method", "family", *columns, "note"])
if result.skipped:
    reasons = {k: "switch on Semantic baselines above" if get_method(k).needs == "embedding" and not semantic else v
               for k, v in result.skipped.items()}
    st.caption("Not run: " + md_literal("; ".join(f"{k} ({v})" for k, v in reasons.items())))
st.subheader("Paired differences")
st.caption("Per split, TRACE+ and TRACE minus the best baseline (chosen on that split's calibration part, then "
           "measured on its evaluation part) and minus the supervised likelihood reference (Likelihood LR): "
           "mean ± std "
           f"(wins/splits). Best baseline chosen: {md_literal(result.paired.chosen_note(calibrator=calibrator))}."
           if result.paired is not None else "")
st.dataframe(paired_frame(result, calibrator), hide_index=True, key="paired_table",
             column_config={"metric": st.column_config.TextColumn("metric", pinned=True)})
verdict = result.verdict(calibrator=calibrator)  # TRACE+ against the best baseline and the reference
if verdict is not None:
    st.info(md_literal(verdict.paragraph(), limit=5_000))
    st.caption(md_literal(verdict.rule()))
no_skill = result.no_skill_sentence()
if no_skill:
    st.warning(md_literal(no_skill))

available = [m for m in result.methods if not get_method(m).is_trace]
state.keep_valid("plot_baselines", available)
defaults = [m for m in figure_baselines(result, calibrator) if m in available]
state.follow("plot_baselines", tuple(defaults), defaults)  # other best baselines: a choice made for others is reset
chosen = st.multiselect("Baselines in the plots", available, key="plot_baselines",
                        help="By default the best baselines that the verdict names first (chosen most often on the "
                             "calibration parts, for Brier and for AUROC), then SeqLogP and Mean Entropy.")
shown = [*(m for m in result.methods if get_method(m).is_trace), *chosen]  # surprisal-only variants too
held = result.held_out
y = held.labels
tabs = st.tabs(["Reliability", "Risk–coverage", "ROC"])
split = "First held-out split"  # the curves are one split's; the legends quote the table's mean ± std
with tabs[0]:
    cols = st.columns(2)
    strategy = cols[0].radio("Bins", ["uniform", "quantile"], horizontal=True, key="bin_strategy",
                             format_func=lambda s: {"uniform": "equal width", "quantile": "equal mass"}[s])
    n_bins = cols[1].slider("Number of bins", 3, 30, 10, key="n_bins")
    st.plotly_chart(reliability_figure(y, held.probabilities(calibrator, shown), n_bins=n_bins, strategy=strategy,
                                       legend_stats=legend_stats(result, "ece", calibrator), subtitle=split),
                    width="stretch", key="reliability")
    st.caption(f"Curves and bars: the first held-out split; TRACE and the baselines after "
               f"{CALIBRATOR_NAMES[calibrator]}. Points: observed accuracy per bin with 95% Wilson intervals; bars: "
               "how many answers fall in each bin (equal-mass bins hold about as many each; their widths show where "
               "the answers crowd). Legend: ECE as in the table, mean ± std over the splits.")
with tabs[1]:
    st.plotly_chart(risk_coverage_figure(y, held.scores(shown),
                                         legend_stats=legend_stats(result, "aurc", calibrator), subtitle=split),
                    width="stretch", key="risk_coverage")
    st.caption("Curves: the first held-out split. Legend: AURC as in the table, mean ± std over the splits.")
with tabs[2]:
    st.plotly_chart(roc_figure(y, held.scores(shown),
                               legend_stats=legend_stats(result, "auroc", calibrator), subtitle=split),
                    width="stretch", key="roc")
    st.caption("Curves: the first held-out split. Legend: AUROC as in the table, mean ± std over the splits.")

group_panel(dataset.frame.iloc[rows.usable.keep].reset_index(drop=True), kept, labels, config,
            tuple(method_names()), rows.key, beams, model_for_semantic, calibrator, split_groups)

st.subheader("Calibrator for production")
handed = rows.hand_off(picked.name)
state.set_calibrated_data(handed)
choices = score_choices(result, (rows.key, repr(config), bool(semantic), bool(by_prompt)))
state.set_score_choices(choices)
score, model = production_calibrator(handed, choices)
cols = st.columns(2)
calibrator_json = model.to_json()
download_button(cols[0], "Download calibrator (JSON)", lambda: calibrator_json.encode("utf-8"),
                content=(rows.key, calibrator_json), file_name=calibrator_file_name(score),
                mime="application/json", key="download_calibrator")
download_button(cols[1], "Download results table (CSV)", lambda: result.summary.to_csv(index=False).encode("utf-8"),
                content=(rows.key, repr(config), bool(semantic)), file_name="trace_results.csv", mime="text/csv",
                key="download_results")


def report_file() -> bytes:
    return report_html({"": result}, title=f"TRACE evaluation of {picked.name}", calibrator=calibrator,
                       data={"file": picked.name, "answers": f"{len(kept):,}", "labels": dataset.label_source},
                       provenance={"score": score.name, **(getattr(model, "provenance_", None) or {})}).encode("utf-8")


# The report (its figures above all) is built when clicked, not with every run of the page.
download_button(st, "Download the report (HTML)", report_file,
                content=(rows.key, repr(config), bool(semantic), calibrator, score.name),
                file_name="trace_report.html", mime="text/html", key="download_report",
                help="One self-contained file: the tables, the verdict, interactive figures, settings and versions.")
traces_download(rows, picked.name)
