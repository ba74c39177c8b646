"""Every ``st.session_state`` key the app uses, and typed accessors for them.

Pages and the other ``app`` modules read and write session state only through this module, so a key is spelled
once and each value has one type. Widget keys that code reads or sets (besides the widget itself) are named here too;
the other widget keys stay literal on their widgets.

The Calibrate page hands its kept rows to Flag & export as :class:`Answers` (frozen), never as a dict; the active
calibrator is an :class:`ActiveCalibrator` that says where it came from. Streamlit forgets a widget's value when a page
that does not draw it runs: :func:`keep_widgets` (called by the router before every page) keeps the settings listed in
:data:`KEPT_WIDGETS`, and uploads are kept as bytes (:func:`keep_upload`), so moving between pages loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import streamlit as st

if TYPE_CHECKING:
    from trace_core import (
        DecodingConfig,
        IsotonicCalibrator,
        LoadedModel,
        PlattCalibrator,
        ScoreCalibrator,
        Trace,
        TracePlus,
    )
    from trace_core.traces.table import TraceTable

    Calibrator = TracePlus | ScoreCalibrator | PlattCalibrator | IsotonicCalibrator

# Values the app stores (written by code).
MODEL = "lm"  # LoadedModel | None: the sidebar's model
MODEL_ERROR = "lm_error"  # str | None: why it could not be loaded
DECODING = "decoding"  # DecodingConfig from the sidebar
CALIBRATOR = "calibrator"  # ActiveCalibrator: fitted on Calibrate or loaded from a file, used by every page
CALIBRATED_DATA = "flag_data"  # Answers: the Calibrate page's rows for Flag & export
# ScoreChoices: the scores those rows can be flagged with (Calibrate and Flag offer them)
SCORE_CHOICES = "score_choices"
UPLOADS = "uploads"  # {role: (bytes, name)}: each page's last uploaded file, kept across pages
LOADED_CALIBRATOR_FILE = "loaded_calibrator_file"  # (name, size, digest) of the calibrator file last loaded
RECORDED = "recorded"  # {(file key, model key): {row number in the file: Trace}}: traces recorded in this session
GENERATED = "generated"  # {(file key, model key, decoding): ({position: Trace}, {position: why not})}: answers
RELEVANCE = "relevance"  # (data key, [token relevances per answer], stopped): the semantic baselines' input so far
GENERATED_FILE = "generated_file"  # (key, answered count, the answered prompts as a dataset file): the last one built
OVER_CONTEXT = "over_context"  # {(data key, model key): frozenset of row positions}: rows too long for the model
SCORED = "scored"  # {key: DataFrame}: the Flag page's scored rows (one entry)
RISK_SCORED = "risk_scored"  # (key, probabilities): the guarantee's labeled answers scored by the calibrator
SESSION_COPY = "session_copy__"  # + a slot: (key, value): this session's copy of a dataset shared by the sessions
INSPECT_TRACE = "inspect_trace"  # Trace | None: the Inspect page's last answer
COMPARISON = "compare_result"  # Comparison | None: the Compare page's last two answers
EXAMPLE_USED = "example_used"  # int: the example prompt last copied into the prompt box
SESSION_FILES = "session_files"  # app.downloads.SessionFiles: what each download button was last drawn for
LABEL_FLIPS = "label_flips"  # {data key: frozenset of row positions}: labels corrected by hand on the review panel

# Widget keys that code also sets.
PROMPT = "prompt"  # the Inspect page's prompt box (an example fills it)

#: Widgets whose values survive a visit to another page (Streamlit drops a widget's value when a run does not draw
#: it). Buttons, file uploaders and table selections cannot be set, so they are not here; uploads are kept as bytes.
KEPT_WIDGETS = (
    # Calibrate (and the dataset choice it shares with Flag & export)
    "data_source", "demo_dataset", "data_path", "matcher", "n_splits", "fraction", "eval_seed", "stratified",
    "semantic", "scalar_calibrator", "plot_baselines", "bin_strategy", "n_bins", "flag_score",
    # Inspect
    PROMPT, "example", "signal", "colour_scale", "token_index",
    # Flag & export
    "flag_source", "flag_data_source", "flag_data_path", "flag_matcher", "flag_mode", "flag_by", "flag_threshold",
    "flag_risk",
    "flag_coverage", "flag_max_risk", "flag_delta", "risk_data_source", "risk_demo_dataset", "risk_data_path",
    "risk_matcher",
    # Compare
    "compare_scope", "compare_data_source", "compare_demo_dataset", "compare_data_path", "compare_n_prompts",
    "compare_matcher", "compare_prompt", "compare_mode", "compare_model", "compare_sample", "compare_temperature",
    "compare_top_p", "compare_top_k", "compare_seed", "compare_max_new_tokens", "compare_signal",
)


@dataclass(frozen=True, eq=False)
class Answers:
    """Answers with usable traces: the rows the Calibrate page evaluated (handed to Flag & export), or the answers
    read on Flag & export.

    Attributes
    ----------
    frame : DataFrame
        The kept rows (index 0..n-1), with the file's row numbers in ``row_column``.
    traces : TraceTable, length n
        One non-empty trace per row, as one table (a sequence given is made one), so that every evaluation and
        score of these answers reads its columns.
    labels : ndarray of int, shape (n,), or None
        0/1 labels (read-only); None for unlabeled answers.
    name : str
        The dataset's file name.
    row_column : str
        Column of ``frame`` holding the file's row numbers.
    key : str
        Identifies the data and the traces (file digest and recording model): the Flag page's cache key.
    """

    frame: pd.DataFrame
    traces: TraceTable
    labels: np.ndarray | None
    name: str
    row_column: str
    key: str

    def __post_init__(self) -> None:
        n_labels = len(self.traces) if self.labels is None else len(self.labels)
        if not (len(self.frame) == len(self.traces) == n_labels):
            raise ValueError(f"got {len(self.frame)} rows, {len(self.traces)} traces and {n_labels} labels")
        if self.labels is not None:
            labels = np.array(self.labels, dtype=np.int64)  # a copy: the page's array stays the page's
            labels.setflags(write=False)
            object.__setattr__(self, "labels", labels)
        from trace_core.traces.table import TraceTable

        object.__setattr__(self, "traces", TraceTable.from_traces(self.traces))


@dataclass(frozen=True, eq=False)
class ActiveCalibrator:
    """The calibrator every page uses, and where it came from.

    Attributes
    ----------
    model : TracePlus, ScoreCalibrator, PlattCalibrator or IsotonicCalibrator
    origin : str
        How it became active, as a phrase: "fitted on the Calibrate page", "loaded from 'c.json'".
    data : str or None
        What it was fitted on, when this session fitted it (the dataset's name and size).
    key : str
        Identifies the fitted parameters (a digest of its JSON): equal keys, the same calibrator.
    pinned : bool
        Chosen by the user (loaded from a file, or picked with a button): only the user replaces it. One the
        Calibrate page made active by itself (there was none, or only another such one) follows that page's data.
    fitted_on : str or None
        The key of the answers it was fitted on (:attr:`Answers.key`), when this session fitted it: Flag then
        measures error rates on those answers with out-of-fold probabilities, not with the fit's own.
    """

    model: Any
    origin: str
    data: str | None
    key: str
    pinned: bool = False
    fitted_on: str | None = None


@dataclass(frozen=True)
class ScoreChoices:
    """The scores the Calibrate page's answers can be flagged with, from its comparison.

    Attributes
    ----------
    owner : tuple
        What the comparison was of (the answers' key, the protocol's settings): the choice returns to the default
        when it changes.
    options : tuple of trace_core.flagging.flag.FlagScore
        Each with its held-out Brier (:func:`trace_core.flagging.flag.flag_scores`).
    note : str
        A sentence naming a fitted baseline that did better but cannot be saved as a calibrator, or "".
    small_sample : bool
        Too few answers to tell the best (:attr:`trace_core.EvaluationResult.small_sample`): the lowest Brier is then
        only a default.
    """

    owner: tuple[Any, ...]
    options: tuple[Any, ...]
    note: str = ""
    small_sample: bool = False


def _get(key: str, default: Any = None) -> Any:
    return st.session_state.get(key, default)


def _set(key: str, value: Any) -> None:
    st.session_state[key] = value


def model() -> LoadedModel | None:
    """The model chosen in the sidebar (None when there is none or it failed to load)."""
    return _get(MODEL)


#: What a page says when the sidebar's model could not be loaded: the sidebar shows why, once.
NO_MODEL_ERROR = ("The model in the sidebar could not be loaded (the sidebar says why): choose another to generate "
                  "answers.")
NO_MODEL = "Choose a model in the sidebar to generate answers."


def no_model_message() -> str:
    """The page's line when there is no model: a pointer to the sidebar's error, never the error again."""
    return NO_MODEL_ERROR if model_error() else NO_MODEL


def model_error() -> str | None:
    """Why the sidebar's model could not be loaded, if it could not."""
    return _get(MODEL_ERROR)


def set_model(lm: LoadedModel | None, error: str | None = None) -> None:
    _set(MODEL, lm)
    _set(MODEL_ERROR, error)


def decoding() -> DecodingConfig:
    """The sidebar's decoding settings (the sidebar runs before every page)."""
    return st.session_state[DECODING]


def set_decoding(config: DecodingConfig) -> None:
    _set(DECODING, config)


def active_calibrator() -> ActiveCalibrator | None:
    """The calibrator the pages use, with its origin; None until one is fitted or loaded."""
    return _get(CALIBRATOR)


def calibrator() -> Calibrator | None:
    """The active calibrator's model (None when there is none)."""
    active = active_calibrator()
    return active.model if active is not None else None


def set_calibrator(active: ActiveCalibrator) -> None:
    """Make ``active`` the calibrator of every page: only on a user's action (a button, a loaded file), or when
    there is none yet."""
    _set(CALIBRATOR, active)


def calibrated_data() -> Answers | None:
    """What the Calibrate page handed to Flag & export, if it has run."""
    return _get(CALIBRATED_DATA)


def set_calibrated_data(data: Answers) -> None:
    _set(CALIBRATED_DATA, data)


#: Prompt files whose generated answers a session keeps (the most recent ones).
MAX_GENERATED = 4


def generated_answers(key: tuple[str, str, str]) -> tuple[dict[int, Any], dict[int, str]]:
    """The answers generated in this session for a prompts file with a model and a decoding (``key``): the traces by
    the prompt's position, and why the others could not be answered. Stored as they are generated; the answers of
    the :data:`MAX_GENERATED` most recently used files are kept."""
    store: dict[tuple[str, str, str], tuple[dict[int, Any], dict[int, str]]] = st.session_state.setdefault(
        GENERATED, {})
    entry = store.pop(key, None) or ({}, {})
    store[key] = entry  # most recently used last
    while len(store) > MAX_GENERATED:
        del store[next(iter(store))]
    return entry


def generated_file(key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    """``build()``, the dataset file of a prompts file's answers, made again only when ``key`` (the file, model,
    decoding and how many are answered) changes: one is kept."""
    return _last(GENERATED_FILE, key, build)


def _last(slot: str, key: Any, compute: Callable[[], Any],
          same: Callable[[Any, Any], bool] = lambda a, b: a == b) -> Any:
    """``compute()``, kept in the session under ``slot`` (one value) while ``same(kept key, key)`` holds."""
    last = _get(slot)
    if last is None or not same(last[0], key):
        last = (key, compute())
        _set(slot, last)
    return last[1]


def relevances(key: str) -> dict[str, Any]:
    """The token relevances computed so far for the answers ``key`` names (``"done"``: a list, one array per answer
    in order; ``"stopped"``: whether the user stopped the computation). One dataset's are kept."""
    entry = _get(RELEVANCE)
    if entry is None or entry["key"] != key:
        entry = {"key": key, "done": [], "stopped": False}
        _set(RELEVANCE, entry)
    return entry


def score_choices() -> ScoreChoices | None:
    """The scores the Calibrate page's answers can be flagged with (None before it has run)."""
    return _get(SCORE_CHOICES)


def set_score_choices(choices: ScoreChoices) -> None:
    _set(SCORE_CHOICES, choices)


def keep_widgets() -> None:
    """Keep the values of :data:`KEPT_WIDGETS` through runs of pages that do not draw them.

    Writing a widget's value back to the session state takes it out of Streamlit's clean-up of undrawn widgets; the
    router calls this before every page. Only values already there are kept (nothing is invented for a widget that
    has never been drawn)."""
    for key in KEPT_WIDGETS:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def keep_valid(key: str, options: Sequence[Any]) -> None:
    """Drop a kept multiselect value's items that are not among ``options`` (another dataset can offer fewer), or a
    kept single choice that is not among them (it falls back to the widget's default), so the widget never receives
    a value it cannot show."""
    value = _get(key)
    if isinstance(value, list):
        valid = [v for v in value if v in options]
        if valid != value:
            _set(key, valid)
    elif value is not None and value not in options:
        del st.session_state[key]


def follow(key: str, owner: Any, value: Any) -> None:
    """Give widget ``key`` the value ``value`` whenever ``owner`` (what the widget is about, e.g. an answer's identity)
    differs from the last run's, so that it never keeps a choice made about something else."""
    marker = f"{key}__owner"
    if st.session_state.get(marker) != owner:
        _set(key, value)
        st.session_state[marker] = owner


def preset(key: str, value: Any) -> None:
    """Give widget ``key`` a value before it is drawn, unless it has one."""
    if key not in st.session_state:
        _set(key, value)


def loaded_calibrator_file() -> tuple[str, str] | None:
    """(name, digest) of the calibrator file last loaded, so a rerun with it still uploaded does not load it again."""
    return _get(LOADED_CALIBRATOR_FILE)


def set_loaded_calibrator_file(ident: tuple[str, str]) -> None:
    _set(LOADED_CALIBRATOR_FILE, ident)


def keep_upload(role: str, data: bytes, name: str) -> None:
    """Keep the file a page's uploader received, under ``role``: an uploader forgets its file when the user visits
    another page, this does not."""
    uploads: dict[str, tuple[bytes, str]] = st.session_state.setdefault(UPLOADS, {})
    uploads[role] = (data, name)


def kept_upload(role: str) -> tuple[bytes, str] | None:
    """The file last uploaded under ``role`` in this session (bytes and name), if any."""
    return st.session_state.get(UPLOADS, {}).get(role)


def label_flips(data_key: str) -> frozenset[int]:
    """The row positions (0..n_valid-1) whose labels were flipped by hand for the dataset read as ``data_key``."""
    return _get(LABEL_FLIPS, {}).get(data_key, frozenset())


def set_label_flips(data_key: str, flips: frozenset[int]) -> None:
    _set(LABEL_FLIPS, {**_get(LABEL_FLIPS, {}), data_key: flips})


def forget_upload(role: str) -> None:
    st.session_state.get(UPLOADS, {}).pop(role, None)


CHAT_TEMPLATE = "chat_template"  # bool: the sidebar's "Chat template" toggle
CHAT_TEMPLATE_MODEL = "chat_template_model"  # str | None: the model the toggle was last set for


def chat_template_default(model_id: str | None, has_template: bool) -> None:
    """An instruct model (one with a chat template) is prompted through its template by default: the sidebar's
    toggle is set to ``has_template`` whenever its model changes; the user's choice stands while the model stays.
    Call before the toggle is drawn."""
    if st.session_state.get(CHAT_TEMPLATE_MODEL) != model_id:
        st.session_state[CHAT_TEMPLATE_MODEL] = model_id
        st.session_state[CHAT_TEMPLATE] = has_template


def recorded_traces(data_key: str, model_key: str | None) -> dict[int, Trace]:
    """The traces this session recorded for a file with a model, by the row's number in the file; the live dict, to
    fill.

    ``model_key`` is :func:`app.keys.model_key` (not the model's name: two servers may serve different models
    under one name), so another model starts empty and switching back finds its traces again."""
    recorded: dict[tuple[str, str | None], dict[int, Trace]] = st.session_state.setdefault(RECORDED, {})
    return recorded.setdefault((data_key, model_key), {})


#: How many (dataset, model) pairs :func:`over_context` keeps per session.
OVER_CONTEXT_KEPT = 4


def over_context(data_key: str, model_key: str | None, compute: Callable[[], frozenset[int]]) -> frozenset[int]:
    """``compute()`` (the row positions too long for the model's context), once per dataset and model in a session:
    tokenizing a large file on every rerun would make every interaction wait. The last :data:`OVER_CONTEXT_KEPT`
    pairs are kept."""
    cache: dict[tuple[str, str | None], frozenset[int]] = st.session_state.setdefault(OVER_CONTEXT, {})
    key = (data_key, model_key)
    if key not in cache:
        value = compute()
        while len(cache) >= OVER_CONTEXT_KEPT:
            cache.pop(next(iter(cache)))  # the oldest first (dicts keep insertion order)
        cache[key] = value
    return cache[key]


def scored(key: str, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """``compute()``'s result, kept for the session until ``key`` changes (one entry: tables can be large)."""
    cache: dict[str, pd.DataFrame] = st.session_state.setdefault(SCORED, {})
    if key not in cache:
        cache.clear()
        cache[key] = compute()
    return cache[key]


def session_files(create: Callable[[], Any]) -> Any:
    """The session's :class:`app.downloads.SessionFiles`, made by ``create()`` on first use."""
    files = _get(SESSION_FILES)
    if files is None:
        files = create()
        _set(SESSION_FILES, files)
    return files


def remembered(slot: str, of: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    """``compute()``, kept in the session under ``slot`` while ``of`` holds the same objects (compared by identity,
    text by value: a kept upload's bytes are one object across reruns, so nothing large is hashed again)."""
    return _last(f"remembered__{slot}", of, compute, lambda kept, new: len(kept) == len(new) and all(
        a is b or (isinstance(a, str) and a == b) for a, b in zip(kept, new, strict=True)))


def session_copy(slot: str, key: Hashable, read: Callable[[], Any]) -> Any:
    """``read()``, this session's own copy of data the sessions share (a dataset out of ``st.cache_data``, which copies
    it on every read), kept under ``slot`` while ``key`` (its content and everything it was read with) stays equal: a
    rerun reuses the session's copy instead of copying the data again. One value per slot."""
    return _last(SESSION_COPY + slot, key, read)


def risk_scored(key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """``compute()``, the P(correct) of the labeled answers that choose a guaranteed threshold, kept until ``key``
    (the answers and the calibrator) changes."""
    return _last(RISK_SCORED, key, compute)


def heatmap_choice() -> tuple[str, str]:
    """Inspect's "Colour by" and "Colour scale" choices as last set (the defaults before the page draws them): the
    streamed heatmap is drawn above those widgets, with their values."""
    return _get("signal", "surprisal"), _get("colour_scale", "fixed")


def inspect_trace() -> Trace | None:
    return _get(INSPECT_TRACE)


def set_inspect_trace(trace: Trace | None) -> None:
    _set(INSPECT_TRACE, trace)


def comparison() -> Any:
    """The Compare page's last comparison (an ``app.compare_view.Comparison``), if any."""
    return _get(COMPARISON)


def set_comparison(value: Any) -> None:
    _set(COMPARISON, value)


def use_example(index: int, prompt: str) -> None:
    """Copy example ``index`` into the prompt box once (it must run before the box is drawn); later edits stay."""
    if index and _get(EXAMPLE_USED) != index:
        _set(PROMPT, prompt)
        _set(EXAMPLE_USED, index)
