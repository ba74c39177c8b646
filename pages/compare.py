"""Compare: one prompt answered twice (two decodings, or two models), aligned token by token; or a dataset of prompts
answered by both, side by side."""

from __future__ import annotations

import dataclasses
import html

import streamlit as st

from app import state
from app.calibrators import describe_calibrator, provenance_notes
from app.compare_dataset import Side, dataset_comparison
from app.compare_view import Comparison, aligned_heatmap_html, compare_metrics, describe_decoding
from app.explain import probability_title
from app.heatmap import HEATMAP_CSS, legend_html, signal_values
from app.inputs import pick_dataset_file
from app.prompts import prompt_problem
from app.services import get_model
from app.text import md_literal, sentence
from app.tokenizer_text import alternatives_for
from trace_core import DecodingConfig, ModelLoadError, ScoreCalibrator, TracePlus, generate_trace, settings
from trace_core.policy import fit_new_tokens
from trace_core.record import ServerError
from trace_core.traces.align import divergence_summary

SAME_MODEL = "Same model, other decoding"
OTHER_MODEL = "Another model"
ONE_PROMPT, DATASET = "One prompt", "A dataset of prompts"
#: B's temperature when it samples, until the user sets another.
SAMPLED_TEMPERATURE = 0.7

st.title("Compare two answers")
st.caption("The same prompt answered twice — greedy against sampled, two decoding settings, or two models — with the "
           "tokens aligned, each coloured by how unsure its model was, and the point where the answers part marked; "
           "or a whole dataset of prompts answered both ways, side by side.")

lm = state.model()
config_a = state.decoding()

scope = st.radio("Compare on", [ONE_PROMPT, DATASET], horizontal=True, key="compare_scope")
if scope == ONE_PROMPT:
    prompt = st.text_area("Prompt", key="compare_prompt", height=110,
                          placeholder="Q: What is 23 plus 19?\nA:")
else:
    prompt = ""
    picked = pick_dataset_file("compare")
left, right = st.columns(2)
with left:
    st.markdown("**A** — the sidebar's model and decoding")
    st.caption(f"{describe_decoding(config_a)} · at most {config_a.max_new_tokens} new "
               f"token{'' if config_a.max_new_tokens == 1 else 's'}")
with right:
    mode = st.radio("**B** — the other answer", [SAME_MODEL, OTHER_MODEL], key="compare_mode", horizontal=True)
    if mode == SAME_MODEL:
        sample = st.toggle("Sample (instead of greedy)", value=True, key="compare_sample")
        # two inputs a row: in half the page, three would cut their labels mid-word ("Temperatu re") at 800 px
        c1, c2 = st.columns(2)
        # 0.7: a small model sampled much hotter writes gibberish within a few tokens, which compares nothing
        temperature = c1.number_input("Temperature", 0.05, 5.0, SAMPLED_TEMPERATURE, 0.05, key="compare_temperature",
                                      disabled=not sample)
        top_p = c2.number_input("Top-p", 0.05, 1.0, 1.0, 0.05, key="compare_top_p", disabled=not sample)
        top_k = c1.number_input("Top-k (0 = off)", 0, 1000, 0, key="compare_top_k", disabled=not sample)
        seed = c2.number_input("Seed", 0, 2**31 - 1, 0, key="compare_seed", disabled=not sample)
        limit = settings.get("TRACE_MAX_NEW_TOKENS")
        max_new = c1.number_input("Max new tokens", 1, limit, min(config_a.max_new_tokens, limit),
                                  key="compare_max_new_tokens")
        model_b_name = None
    else:
        model_b_name = st.text_input("Folder or model id", key="compare_model",
                                     placeholder="/path/to/model or org/model-name",
                                     help="A folder made by save_pretrained, or a model id already in the local "
                                          "Hugging Face cache. Nothing is downloaded. B decodes like A.").strip()



def side_b() -> tuple[object, DecodingConfig]:
    """B's model and decoding from the widgets above; ValueError (or a model error) when B cannot be set up."""
    if mode == SAME_MODEL:
        return lm, DecodingConfig(max_new_tokens=int(max_new), do_sample=bool(sample), temperature=float(temperature),
                                  top_k=int(top_k), top_p=float(top_p), seed=int(seed) if sample else None,
                                  chat_template=config_a.chat_template)
    if not model_b_name:
        raise ValueError("type the folder or model id of model B")
    model_b = get_model(model_b_name)
    return model_b, dataclasses.replace(config_a, chat_template=config_a.chat_template and model_b.has_chat_template)


if scope == DATASET:
    if lm is None:
        st.info(state.no_model_message())
        st.stop()
    if picked is None:
        st.stop()
    try:
        model_b, config_b = side_b()
    except (ModelLoadError, OSError, ValueError, ServerError) as exc:
        st.error(md_literal(sentence(str(exc))))
        st.stop()
    dataset_comparison(picked, [Side("A", lm, config_a), Side("B", model_b, config_b)])
    st.stop()

run = st.button("Compare", type="primary", key="compare_run", disabled=lm is None)
if lm is None:
    st.info(state.no_model_message())


def _generate(model, config: DecodingConfig):
    """One traced answer to the prompt, its length cut to what the model's context leaves (the note is shown)."""
    fit = fit_new_tokens(model, prompt, max_new_tokens=config.max_new_tokens, chat_template=config.chat_template)
    if fit.note:
        config = dataclasses.replace(config, max_new_tokens=fit.max_new_tokens)
        st.caption(fit.note)
    return generate_trace(model, prompt, config=config)


if run:
    if problem := prompt_problem(prompt):
        st.warning(problem)
    else:
        state.set_comparison(None)  # a failed run never leaves the previous comparison looking current
        try:
            model_b, config_b = side_b()
            with st.spinner("Generating both answers…"):
                trace_a = _generate(lm, config_a)
                trace_b = _generate(model_b, config_b)
            state.set_comparison(Comparison(prompt, trace_a, trace_b, model_b_name))
        except (ModelLoadError, OSError, ValueError, ServerError) as exc:
            st.error(md_literal(sentence(str(exc))))

result: Comparison | None = state.comparison()
if result is not None:
    if result.prompt != prompt:
        st.info("This comparison is for an earlier prompt: press Compare to answer the one in the box.")
    if lm is not None and result.a.metadata.model_id != lm.model_id:
        st.info("Answer A of this comparison came from another model than the sidebar's: press Compare to update it.")
    a, b, alignment = result.a, result.b, result.alignment
    st.subheader("Where the answers part")
    st.html(f"<p>{html.escape(divergence_summary(alignment))}</p>")  # tokens are quoted with repr: escapes shown

    calibrator = state.calibrator()
    table = compare_metrics(a, b, calibrator)
    title = probability_title(calibrator)
    st.dataframe(table, width="stretch", column_config={
        "TRACE confidence": st.column_config.NumberColumn(format="%.3f", help="exp(-R): ranks answers, higher = "
                                                          "more likely correct; not a probability."),
        f"{title} probability": st.column_config.NumberColumn(format="percent"),
        "mean surprisal": st.column_config.NumberColumn(format="%.2f"),
        "max surprisal": st.column_config.NumberColumn(format="%.2f")})

    active = state.active_calibrator()
    if isinstance(calibrator, (TracePlus, ScoreCalibrator)):
        cols = st.columns(2)
        for col, label in zip(cols, ("A", "B"), strict=True):
            value = table.loc[label, f"{title} probability"]
            col.metric(f"{label}: {title} probability correct", "—" if value != value else f"{value:.0%}")
        st.caption(f"From the active calibrator: {md_literal(describe_calibrator(active))}.")
        for note in dict.fromkeys(provenance_notes(calibrator, [t for t in (a, b) if len(t)])):
            st.warning(md_literal(sentence(note)))
    elif active is not None:
        st.caption(f"The active calibrator calibrates TRACE confidence alone ({md_literal(describe_calibrator(active))}"
                   "). Fit or load a TRACE+ calibrator, or one of a named score, on Calibrate or Flag & export to "
                   "see a probability here.")
    else:
        st.caption("Fit or load a calibrator on Calibrate or Flag & export to see TRACE+.")

    if len(a) == 0 and len(b) == 0:
        st.warning("Both answers are empty: there is no token to show.")
    else:
        both_entropy = a.has_entropy and b.has_entropy
        signal = st.radio("Colour by", ["surprisal", "entropy"] if both_entropy else ["surprisal"],
                          horizontal=True, key="compare_signal", format_func=str.capitalize)
        model_b = lm
        if result.model_b is not None:
            try:
                model_b = get_model(result.model_b)
            except (ModelLoadError, OSError, ValueError):
                model_b = None  # its alternatives then show as token ids
        st.html(HEATMAP_CSS + legend_html(signal_values(a if len(a) else b, signal),
                                          pieces="" in a.tokens or "" in b.tokens)
                + aligned_heatmap_html(a, b, alignment, signal=signal,
                                       alternatives=(alternatives_for(lm), alternatives_for(model_b))))
        st.caption("Top row A, bottom row B; a hatched cell is a gap where the other answer has a token. A dotted line "
                   "above a column marks tokens that differ between the answers; the red rule and the word "
                   "\"diverge\" mark where they first part. Hover a token for its probability and the alternatives "
                   "the model considered.")
