"""Inspect: one prompt, one answer, every token coloured by how unsure the model was."""

from __future__ import annotations

import dataclasses
import html

import numpy as np
import pandas as pd
import streamlit as st

from app import state
from app.calibrators import describe_calibrator, provenance_notes
from app.explain import explain_probability, explain_risk, probability_title, unfinished_note
from app.figures import trace_figure
from app.heatmap import HEATMAP_CSS, SIGNALS, heatmap_html, legend_html, signal_values
from app.heatmap_cache import heatmap_cached
from app.keys import same_model
from app.panels import active_calibrator_note
from app.prompts import example_label, prompt_problem, try_prompts
from app.spans import boxed_spans, ranked_spans, spans_panel
from app.streaming import stream_answer
from app.text import byte_piece_note, md_literal, sentence, visible_token
from app.tokenizer_text import alternatives_for, alternatives_note, prompt_as_read
from trace_core import ScoreCalibrator, TracePlus, explain_trace
from trace_core.policy import fit_new_tokens
from trace_core.record import ServerError

st.title("Inspect an answer")
st.caption("Type a prompt; the model answers, and every generated token is coloured by its surprisal, entropy or share "
           "of the TRACE risk. Hover a token for its probability, rank and the alternatives the model considered.")

lm = state.model()

examples = try_prompts(lm.model_id if lm is not None else None)
if examples:
    labels = ["(pick an example)"] + [example_label(e) for e in examples]
    state.keep_valid("example", range(len(labels)))  # another model's list may be shorter
    choice = st.selectbox("Try these", range(len(labels)), format_func=lambda i: labels[i], key="example")
    state.use_example(choice, examples[choice - 1]["prompt"] if choice else "")

with st.form("generate"):
    prompt = st.text_area("Prompt", key=state.PROMPT, height=110,
                          placeholder="Q: What is 23 plus 19?\nA:")
    submitted = st.form_submit_button("Generate", type="primary", disabled=lm is None)

if lm is None:
    st.info(state.no_model_message())

# Two places, the same in every run: a new answer's messages and stream, then the answer. Elements of the last run
# stay on the page, faded, until this run draws over them or ends; so Generate first empties the answer's place, and
# the previous answer (its heatmap, its numbers) is gone before the new one streams in above it. Other reruns keep
# that place a container, updated in place (no flicker; expanders stay open).
generating = st.empty()
answer_place = st.empty() if submitted else st.container()

if submitted:
    with generating.container():
        config = state.decoding()
        if problem := prompt_problem(prompt):
            st.warning(problem)
        else:
            try:
                fit = fit_new_tokens(lm, prompt, max_new_tokens=config.max_new_tokens,
                                     chat_template=config.chat_template)
                if fit.note:  # the answer stops at the model's last position instead of failing there
                    config = dataclasses.replace(config, max_new_tokens=fit.max_new_tokens)
                    st.caption(fit.note)
                stream_answer(lm, prompt, config)  # the heatmap fills in as the model writes; Stop keeps it
            except (ValueError, ServerError) as exc:  # a server's failure is one line, like a bad prompt
                state.set_inspect_trace(None)  # the answer below would read as this prompt's
                st.error(md_literal(sentence(str(exc))))

with answer_place.container() if submitted else answer_place:
    trace = state.inspect_trace()
    if trace is not None and not same_model(lm, trace):  # another model's answer must not read as this one's
        st.info(f"The answer below came from another model ({md_literal(trace.metadata.model_id[:80] or 'unknown')})"
                + ("; press Generate to answer with the sidebar's." if lm is not None else "."))
    elif trace is not None and trace.prompt != prompt:  # the box was edited (or the example changed) since
        st.info("The answer below is for an earlier prompt; press Generate to answer the one above.")
    if trace is not None:
        if len(trace) == 0:
            st.warning("The model ended the answer at once (an empty answer): there is no token to show.")
        else:
            exp = explain_trace(trace)
            active = active_calibrator_note()
            calibrator = active.model if active is not None else None
            cols = st.columns(4)
            confidence = f"{exp.confidence:.3f}" if exp.confidence >= 1e-3 else f"{exp.confidence:.1e}"
            cols[0].metric("TRACE confidence", confidence,
                           help="exp(-R): ranks answers, higher = more likely correct; not a probability.")
            if isinstance(calibrator, (TracePlus, ScoreCalibrator)):
                probability = float(calibrator.predict_proba([trace])[0])
                for note in provenance_notes(calibrator, [trace]):
                    st.warning(md_literal(note[0].upper() + note[1:] + "."))
                cols[1].metric(f"{probability_title(calibrator)} probability correct", f"{probability:.0%}",
                               help=f"From the active calibrator: {describe_calibrator(active)}.")
            else:
                probability = None
                cols[1].metric("TRACE+ probability correct", "—",
                               help="Fit a TRACE+ calibrator on the Calibrate page (or load one on Flag & export) to "
                                    "see a probability.")
            cols[2].metric("Tokens", f"{len(trace)}")
            cols[3].metric("Stopped by", {"eos": "end of answer", "length": "token limit", "stopped": "Stop"}.get(
                trace.metadata.extra.get("finish_reason", ""), "—"))
            if trace.metadata.extra.get("finish_reason") == "stopped":
                st.info(f"Stopped after {len(trace):,} token{'' if len(trace) == 1 else 's'}: this is the answer as "
                        "far as the model had written it.")
            if unfinished := unfinished_note(trace):
                st.warning(unfinished)

            cols = st.columns([3, 2])
            signal = cols[0].radio("Colour by", [s for s in SIGNALS if s != "entropy" or trace.has_entropy],
                                   horizontal=True, key="signal",
                                   format_func=lambda s: {"surprisal": "Surprisal", "entropy": "Entropy",
                                                          "risk": "TRACE risk per token"}[s])
            scale = cols[1].radio("Colour scale", ["fixed", "answer"], horizontal=True, key="colour_scale",
                                  format_func=lambda s: {"fixed": "Fixed", "answer": "This answer's range"}[s],
                                  help="Fixed: the same colours for every answer (comparable across answers). This "
                                       "answer's range: the darkest colour is this answer's largest value (small "
                                       "differences show, but a confident answer looks as dark as an unsure one).",
                                  disabled=signal == "risk")
            alternatives = alternatives_for(lm)
            note = alternatives_note(lm, trace)
            fine, sentences = ranked_spans(trace, exp)
            boxed = boxed_spans(fine, sentences)
            heatmap = heatmap_cached(trace, lm, (signal, scale, note), lambda: (
                HEATMAP_CSS + legend_html(signal_values(trace, signal, exp, scale=scale), spans=bool(boxed),
                                         pieces="" in trace.tokens)
                + heatmap_html(trace, signal=signal, explanation=exp, alternatives=alternatives, scale=scale,
                               alternatives_note=note, spans=boxed)))
            st.html(heatmap)
            if note:
                st.caption(md_literal(note[0].upper() + note[1:] + "."))
            if trace.metadata.entropy_source == "top_k":  # a server's top-k: surprisal exact, entropy estimated
                bounds = trace.metadata.extra.get("entropy_lower") is not None
                st.caption(f"Surprisal is exact; entropy is estimated from the top {trace.metadata.entropy_k} "
                           "log-probabilities the server returned (the rest of the mass as one outcome, a lower bound)"
                           + ("; the hover card gives each token's lower and upper bound." if bounds else "."))
            st.html(explain_risk(trace, exp)
                    + (explain_probability(calibrator, trace, probability) if probability is not None else ""))

            spans_panel(fine, sentences, trace.answer)

            st.plotly_chart(trace_figure(trace, exp), width="stretch", key="trace_chart")

            with st.expander("Token details"):
                first = int(exp.spikes[0]) + 1 if len(exp.spikes) else 1
                # a new answer starts at its own first spike, not at the previous answer's token number
                state.follow("token_index", (trace.prompt, trace.answer, trace.token_ids.tobytes()), first)
                index = st.number_input("Token", 1, len(trace), key="token_index") - 1
                alts = alternatives(trace, index)
                piece = byte_piece_note(trace.tokens, index)
                st.html(f"<p>Token {index + 1}: <code>'{html.escape(visible_token(trace.tokens[index]))}'</code>"
                        + (f" ({html.escape(piece)})" if piece else "") + " — "
                        f'probability {np.exp(-trace.surprisal[index]):.1%}'
                        + (f", entropy {trace.entropy[index]:.2f} nats" if trace.has_entropy else "")
                        + (f", rank {int(trace.ranks[index])}" if trace.ranks is not None else "") + "</p>")
                if trace.n_alternatives:
                    st.dataframe(pd.DataFrame({"alternative": [f"'{visible_token(a)}'" for a in alts],
                                               "probability": np.exp(trace.top_logprobs[index])}),
                                 hide_index=True, column_config={"probability": st.column_config.ProgressColumn(
                                     "probability", min_value=0.0, max_value=1.0, format="percent")})

            read = prompt_as_read(lm, trace)
            if read is not None:
                with st.expander("The prompt as the model read it"):
                    st.code(read[0], language=None, wrap_lines=True)  # shown as text, never as Markdown or HTML
                    st.caption(read[1])
