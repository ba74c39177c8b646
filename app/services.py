"""Cached services shared by the pages: the model, datasets, recorded traces, evaluations.

Models are loaded once per process (``st.cache_resource``) and used under the LoadedModel's lock, so several
sessions can share one model safely. Everything else is cached per input (``st.cache_data``) so a rerun does not
recompute.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import streamlit as st

from trace_core import (
    EvaluationConfig,
    LabeledDataset,
    LoadedModel,
    Trace,
    evaluate,
    load_model,
    read_dataset,
)
from trace_core.record import check_model_allowed, context_length

ROOT = Path(__file__).resolve().parents[1]
DEMO_MODEL = ROOT / "assets" / "demo-model"
DATASETS = ROOT / "assets" / "datasets"


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def _cached_model(name_or_path: str) -> LoadedModel:
    return load_model(name_or_path)


def get_model(name_or_path: str) -> LoadedModel:
    """Load a model once per process (a local folder or a locally cached Hugging Face id).

    The allow-list is checked on every call, before the cache: a model cached earlier is not a way around it.
    """
    check_model_allowed(name_or_path)
    return _cached_model(name_or_path)


def demo_datasets() -> dict[str, Path]:
    return {p.stem: p for p in sorted(DATASETS.glob("demo_*.csv"))}


def try_prompts() -> list[dict[str, str]]:
    path = DATASETS / "try_prompts.json"
    if not path.exists():
        return []
    return json.loads(path.read_text(encoding="utf-8"))


@st.cache_resource(show_spinner="Reading the dataset…", max_entries=8)
def read_cached(data: bytes, name: str, matcher: str) -> LabeledDataset:
    """Read (and validate) a dataset from bytes; cached by content and shared, so callers must not modify it."""
    import warnings

    from trace_core.data import DatasetWarning

    buffer = io.BytesIO(data)
    buffer.name = name
    with warnings.catch_warnings():  # the page shows the rejected rows itself
        warnings.simplefilter("ignore", DatasetWarning)
        return read_dataset(buffer, matcher=matcher, max_rows=MAX_ROWS)


def file_bytes(path: Path) -> bytes:
    return path.read_bytes()


def env_limit(name: str, default: int) -> int:
    """A positive integer limit from the environment (a shared deployment sets these), else ``default``."""
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


MAX_FILE_BYTES = env_limit("TRACE_MAX_FILE_MB", 200) * 2**20
MAX_ROWS = env_limit("TRACE_MAX_ROWS", 100_000)
MAX_NEW_TOKENS = env_limit("TRACE_MAX_NEW_TOKENS", 512)
MAX_PROMPT_CHARS = env_limit("TRACE_MAX_PROMPT_CHARS", 8_000)


def local_files_allowed() -> bool:
    """Whether the pages may read files by path on the server (on by default for a local dashboard; set
    TRACE_LOCAL_FILES=0 for a shared deployment)."""
    return os.environ.get("TRACE_LOCAL_FILES", "1") != "0"


def read_local_file(path_text: str) -> tuple[bytes, str]:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ValueError(f"No file at '{path_text}'.")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        # exact bytes too: a file just over the limit would otherwise read "200 MB; the limit is 200 MB"
        raise ValueError(f"'{path.name}' is {size:,} bytes ({size / 2**20:,.1f} MB); the limit is "
                         f"{MAX_FILE_BYTES:,} bytes ({MAX_FILE_BYTES / 2**20:,.0f} MB, TRACE_MAX_FILE_MB).")
    return path.read_bytes(), path.name


def digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
    return h.hexdigest()[:16]


@st.cache_resource(show_spinner="Running the evaluation protocol…", max_entries=8)
def evaluate_cached(_traces: Sequence[Trace], labels: np.ndarray, config: EvaluationConfig, methods: tuple[str, ...],
                    key: str, _beams: Sequence[Sequence[float]] | None = None):
    """The protocol on a dataset; ``key`` identifies the traces (they are not hashed by Streamlit).

    Returns the result and the warnings it raised (e.g. skipped splits), for the page to show.
    """
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = evaluate(list(_traces), labels, config=config, methods=list(methods), beam_logprobs=_beams)
    return result, [str(w.message) for w in caught]


@st.cache_resource(show_spinner="Fitting TRACE+…", max_entries=8)
def fit_calibrator_cached(_traces: Sequence[Trace], labels: np.ndarray, key: str):
    """TRACE+ fitted on all the labeled answers of a dataset; ``key`` identifies the traces."""
    from trace_core import TracePlus

    return TracePlus().fit(list(_traces), labels)


def parse_beams(dataset: LabeledDataset, keep: np.ndarray) -> tuple[list[list[float]] | None, str | None]:
    """The ``beam_logprobs`` column for the kept rows, or (None, why not)."""
    from trace_core.data import parse_beam_logprobs

    frame = dataset.frame
    if "beam_logprobs" not in frame.columns:
        return None, None
    try:
        return parse_beam_logprobs(frame["beam_logprobs"].iloc[keep], frame[dataset.row_column].iloc[keep]), None
    except ValueError as exc:
        return None, str(exc)


def rows_over_context(lm: LoadedModel, prompts: Sequence[str], answers: Sequence[str]) -> list[int]:
    """Positions of the (prompt, answer) pairs too long for the model to score; tokenized as ``score_answers``
    does (prompt with special tokens, answer without)."""
    limit = context_length(lm)
    if limit is None or not len(prompts):
        return []
    prompt_ids = lm.tokenizer(list(prompts), add_special_tokens=True)["input_ids"]
    answer_ids = lm.tokenizer(list(answers), add_special_tokens=False)["input_ids"]
    return [i for i, (p, a) in enumerate(zip(prompt_ids, answer_ids)) if len(p) + len(a) > limit]


def alternatives_for(lm: LoadedModel | None):
    """A function giving the text of a trace's top-k alternatives at one position (decoded with the model's
    tokenizer, or the trace's own ``top_tokens``)."""

    def alternatives(trace: Trace, i: int) -> list[str]:
        if trace.top_tokens is not None:
            return list(trace.top_tokens[i])
        if lm is None or (trace.top_ids[i] < 0).any():
            return [f"id {int(t)}" for t in trace.top_ids[i]]
        return [lm.tokenizer.decode([int(t)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
                for t in trace.top_ids[i]]

    return alternatives
