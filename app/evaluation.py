"""The evaluation protocol on a dataset's answers, cached by content for every session, and the beam baselines'
input."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import streamlit as st

from trace_core import EvaluationConfig, EvaluationResult, LabeledDataset, Trace, TraceTable, evaluate


@st.cache_data(show_spinner="Running the evaluation protocol…", max_entries=8)
def evaluate_cached(_traces: Sequence[Trace], labels: np.ndarray, config: EvaluationConfig, methods: tuple[str, ...],
                    key: str, _beams: Sequence[Sequence[float]] | None = None, _semantic: Any = None,
                    semantic: bool = False,
                    split_groups: tuple[str, ...] | None = None) -> tuple[EvaluationResult, list[str]]:
    """The protocol on a dataset; ``key`` identifies the traces (they are not hashed by Streamlit): the file's digest
    and the recording model's :func:`app.keys.model_key` (``DatasetTraces.key``), never the model's name alone, since
    the cache is shared by every session; ``semantic`` says whether ``_semantic`` is given (the semantic baselines
    run): the answers' token relevances (a list, one array per answer, :mod:`app.semantic`) or an embedder;
    ``split_groups`` (one value per answer, e.g. its prompt): every split keeps a group's answers on one side.

    Returns the result and the warnings it raised (e.g. skipped splits), for the page to show; each caller gets its
    own copy (``st.cache_data``), so no session sees another's changes.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        relevance = _semantic if semantic and isinstance(_semantic, list) else None
        embedder = _semantic if semantic and relevance is None else None
        result = evaluate(TraceTable.from_traces(_traces), labels, config=config, methods=list(methods),
                          beam_logprobs=_beams, embedder=embedder, relevance=relevance,  # no contexts: as the CLI
                          split_groups=None if split_groups is None else list(split_groups))
    return result, [str(w.message) for w in caught]


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
