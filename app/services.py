"""Cached work shared by the pages: the model, datasets, evaluations, the calibrator and the Flag page's scores.

Everything is cached with ``st.cache_resource``: one object per input for the whole process, shared by every session
and never copied (``st.cache_data`` would pickle and copy large tables and traces on every rerun). Callers must not
modify what these functions return. Models are used under the LoadedModel's lock, so sessions can share one.
Limits come from :mod:`trace_core.settings`, read when used (a test or a deployment sets the environment).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import threading
import uuid
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pandas as pd
import streamlit as st

from trace_core import (
    EvaluationConfig,
    EvaluationResult,
    LabeledDataset,
    LoadedModel,
    ScoreCalibrator,
    Trace,
    TracePlus,
    evaluate,
    load_model,
    read_dataset,
    settings,
)
from trace_core._checks import clip  # noqa: PLC2701 (the library's argument checks have no public home yet)
from trace_core.flag import FlagScore
from trace_core.record import alternative_pieces, check_model_allowed

from . import state

if TYPE_CHECKING:
    from trace_core.record import ServerModel

_preload_lock = threading.Lock()
_preloading: threading.Thread | None = None


def preload_in_background() -> threading.Thread:
    """Start importing the evaluation's numeric libraries on a daemon thread, once per process (the first page run
    starts it; a user's first evaluation then finds them loaded instead of waiting for the import)."""
    global _preloading
    with _preload_lock:
        if _preloading is None:
            from trace_core.calibrate import preload

            _preloading = threading.Thread(target=preload, name="trace-preload", daemon=True)
            _preloading.start()
        return _preloading


ROOT = Path(__file__).resolve().parents[1]
DEMO_MODEL = ROOT / "assets" / "demo-model"
DATASETS = ROOT / "assets" / "datasets"
#: The bundled model's id in trace metadata, as the bundled datasets were recorded: the same wherever the app runs
#: (never this server's absolute path), so a calibrator fitted on them matches the Inspect page's traces.
DEMO_MODEL_ID = "assets/demo-model"


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def _cached_model(name_or_path: str) -> LoadedModel:
    lm = load_model(name_or_path)
    if Path(name_or_path).resolve() == DEMO_MODEL.resolve():
        lm = dataclasses.replace(lm, model_id=DEMO_MODEL_ID)  # the lock and the weights are shared, not copied
    return lm


def get_model(name_or_path: str) -> LoadedModel:
    """Load a model once per process (a local folder or a locally cached Hugging Face id).

    The allow-list is checked on every call, before the cache: a model cached earlier is not a way around it.
    """
    check_model_allowed(name_or_path)
    from trace_core.record.gguf import gguf_file_of, is_converted

    gguf = gguf_file_of(name_or_path)
    if gguf is not None and not is_converted(gguf):  # the first load of a GGUF file converts it: say so
        with st.spinner(f"Converting {gguf.name} once into a safetensors folder (a minute or two; later loads take "
                        "seconds)…"):
            return _cached_model(name_or_path)
    return _cached_model(name_or_path)


@st.cache_resource(show_spinner="Connecting to the model server…", max_entries=4)
def _cached_server(base_url: str, model: str, tokenizer: str | None, full_distribution: bool, api: str,
                   api_key_env: str | None) -> Any:
    from trace_core.record import connect_server

    return connect_server(base_url, model, tokenizer=tokenizer, full_distribution=full_distribution, api=api,
                          api_key_env=api_key_env)


def get_server(base_url: str, model: str, tokenizer: str | None = None, *, full_distribution: bool = False,
               api: str = "completions", recheck: bool = False) -> Any:
    """A model server as a model (:func:`trace_core.record.server.connect_server`), once per process; ``recheck``
    connects again. The server must be allowed (:func:`check_server_allowed`), and the tokenizer's source (the
    tokenizer typed, else the served name, which may be a local folder) on the model allow-list. An API key is sent
    only where the deployment ties one to this server (``TRACE_SERVER_KEYS``); none is sent otherwise."""
    from trace_core.record.addresses import base_url_of, key_variable_for

    check_server_allowed(base_url)
    check_model_allowed(tokenizer or model)  # a served name that is a folder loads its tokenizer from there
    if recheck:
        _cached_server.clear()
    url = base_url_of(base_url)  # the normal form: one cache entry per server, whatever the spelling
    return _cached_server(url, model, tokenizer or None, full_distribution, api, key_variable_for(url))




def check_server_allowed(base_url: str) -> None:
    """ValueError unless the dashboard may send requests to ``base_url``: a server on this machine (a loopback
    address), or one listed in TRACE_MODEL_SERVERS (``*`` allows any). A shared deployment must not become a way to
    reach other hosts. Addresses are compared as the server back end will use them (``base_url_of``)."""
    import ipaddress
    from urllib.parse import urlsplit

    from trace_core.record.addresses import base_url_of, served_under

    try:
        credentials = urlsplit(str(base_url).strip()).username is not None
    except ValueError:
        credentials = False
    if credentials:
        raise ValueError("put no credentials in the server address; a server's API key is set by the deployment "
                         "(TRACE_SERVER_KEYS)")
    try:
        url = base_url_of(base_url)
    except ValueError as exc:  # its messages never echo credentials
        raise ValueError(f"not a server address: {exc} (for example http://127.0.0.1:8000)") from None
    host = urlsplit(url).hostname or ""
    allowed = settings.get("TRACE_MODEL_SERVERS")
    if allowed is None:
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if loopback:
            return
        raise ValueError(f"this dashboard connects only to model servers on its own machine; '{clip(url)}' is "
                         "not one (set TRACE_MODEL_SERVERS to allow it)")
    if "*" in allowed:
        return
    if any(served_under(url, entry) for entry in allowed):  # a malformed entry allows nothing
        return
    raise ValueError(f"'{clip(url)}' is not among the model servers this dashboard may use (TRACE_MODEL_SERVERS)")


def demo_datasets() -> dict[str, Path]:
    """The bundled labeled datasets, by name: the demo model's, then SmolLM2-135M-Instruct's greedy answers."""
    real = [DATASETS / f"real_{split}.csv" for split in ("validation", "test")]
    return {p.stem: p for p in [*sorted(DATASETS.glob("demo_*.csv")), *real] if p.exists()}


def prompt_problem(prompt: str) -> str | None:
    """Why ``prompt`` cannot be answered, in one sentence, or None: empty, or longer than TRACE_MAX_PROMPT_CHARS.
    The box itself takes a paste of any length (a box with a character cap drops a longer paste silently, and the
    page then said the prompt was empty), so the limit is said here."""
    limit = settings.get("TRACE_MAX_PROMPT_CHARS")
    if not prompt.strip():
        return "The prompt is empty: type a question first."
    if len(prompt) > limit:
        return (f"The prompt is {len(prompt):,} characters; the limit is {limit:,} (TRACE_MAX_PROMPT_CHARS): shorten "
                "it.")
    return None


def _examples(name: str) -> Any:
    path = DATASETS / name
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def try_prompts(model_id: str | None = None) -> list[dict[str, Any]]:
    """The Inspect page's example prompts for the loaded model (``family``, ``prompt``, ``reference``, and the
    ``label`` of that model's own answer when the examples were recorded with it; real-model entries also carry
    their ``kind``: right, one token away or confidently wrong).

    The bundled demo model gets its own examples (its "Q: ... A:" format); any other model gets the real model's
    (``real_try_prompts.json``, from SmolLM2-135M-Instruct's validation answers), labelled only when it is that
    model, since another model's answers may differ."""
    if model_id is not None and Path(model_id) == DEMO_MODEL:
        return _examples("try_prompts.json") or []
    real = _examples("real_try_prompts.json")
    if not real:
        return []
    if model_id == real.get("model"):
        return real["examples"]
    return [{k: v for k, v in e.items() if k not in ("label", "kind")} for e in real["examples"]]


def example_label(example: dict[str, Any]) -> str:
    """One "Try these" entry: the family, how the model answered it (when known) and the question's start."""
    question = example["prompt"].splitlines()[0].removeprefix("Q: ")
    question = question if len(question) <= 90 else question[:89] + "…"
    verdict = {0: "answered wrong", 1: "answered right"}.get(example.get("label", -1), "")
    kind = example.get("kind")
    if verdict and kind in ("one token away", "confidently wrong"):
        verdict += f", {kind}"
    return f"{example['family'].replace('_', ' ')}{f' ({verdict})' if verdict else ''}: {question}"


_DATASETS: OrderedDict[str, tuple[LabeledDataset, int]] = OrderedDict()  # least recently used first
_DATASETS_LOCK = threading.Lock()
_DATASETS_KEPT = 8


def _read(data: bytes, name: str, matcher: str, max_rows: int, require_label: bool = True) -> LabeledDataset:
    """The dataset in ``data``, kept for the process in a small least-recently-used store shared by every session:
    at most 8 datasets, and at most TRACE_MAX_DATA_MB of them in all (their estimated size in memory). A dataset
    larger than that is returned but not kept; one that holds more than TRACE_MAX_DATA_MB of data, or a Parquet file
    that would decompress to more, is refused by the reader before it is decompressed, so nothing oversize is ever
    cached."""
    from trace_core.data import DatasetWarning

    budget, cell = settings.get("TRACE_MAX_DATA_MB") * 2**20, settings.get("TRACE_MAX_CELL_MB") * 2**20
    key = digest(data, name, matcher, max_rows, require_label, budget, cell)  # a new limit is never hidden
    with _DATASETS_LOCK:
        held = _DATASETS.get(key)
        if held is not None:
            _DATASETS.move_to_end(key)
            return held[0]
    buffer = io.BytesIO(data)
    buffer.name = name
    with st.spinner("Reading the dataset…"), warnings.catch_warnings():  # the page shows the rejected rows itself
        warnings.simplefilter("ignore", DatasetWarning)
        dataset = read_dataset(buffer, matcher=matcher, max_rows=max_rows, require_label=require_label,
                               max_bytes=budget, max_cell_chars=cell)
    size = dataset_size(dataset)
    with _DATASETS_LOCK:
        _DATASETS[key] = (dataset, size)
        _DATASETS.move_to_end(key)
        while _DATASETS and (len(_DATASETS) > _DATASETS_KEPT or sum(n for _, n in _DATASETS.values()) > budget):
            _DATASETS.popitem(last=False)  # the oldest first; the one just read too, when it alone is over
    return dataset


def dataset_size(dataset: LabeledDataset) -> int:
    """About how many bytes ``dataset`` holds in memory: its frame (strings included) and its traces' arrays and
    token tuples (token texts are shared between traces, so they are not counted per trace)."""
    size = int(dataset.frame.memory_usage(deep=True, index=True).sum())
    for trace in dataset.traces:
        if trace is None:
            continue
        size += sum(a.nbytes for a in (trace.token_ids, trace.surprisal, trace.entropy, trace.top_ids,
                                       trace.top_logprobs, trace.ranks) if a is not None)
        size += 8 * len(trace.tokens) + (8 * trace.top_logprobs.size if trace.top_tokens is not None else 0)
    return size


def read_cached(data: bytes, name: str, matcher: str, *, require_label: bool = True) -> LabeledDataset:
    """Read (and validate) a dataset from bytes, at most TRACE_MAX_ROWS rows; cached by content and shared. With
    ``require_label=False`` a file without `label` and `reference` columns is read unlabeled."""
    return _read(data, name, matcher, settings.get("TRACE_MAX_ROWS"), require_label)


def file_bytes(path: Path) -> bytes:
    return path.read_bytes()


def local_files_allowed() -> bool:
    """Whether the pages may read files by path on the server: TRACE_LOCAL_FILES (off unless the deployment turns it
    on with 1/true/yes/on), and then only inside :func:`data_folder`."""
    return bool(settings.get("TRACE_LOCAL_FILES"))


def data_folder() -> Path:
    """The folder dataset files are read from by path: TRACE_DATA_DIR, or the working directory when it is unset;
    resolved (symlinks and ``..``). ValueError when it is not a folder."""
    raw = settings.get("TRACE_DATA_DIR")
    folder = Path(raw).expanduser().resolve() if raw else Path.cwd().resolve()
    if not folder.is_dir():
        raise ValueError(f"TRACE_DATA_DIR='{clip(raw)}' is not a folder; the File path option needs one.")
    return folder


def read_local_file(path_text: str) -> tuple[bytes, str]:
    """The bytes and name of a dataset file given by path, relative to :func:`data_folder` or absolute.

    Only a regular file inside the data folder is read, after resolving symlinks and ``..``; anything else (missing,
    outside, a folder, unreadable) gets the same ValueError, so the message never tells whether a file exists
    outside the folder. ValueError too when it is over TRACE_MAX_FILE_MB (read at most that many bytes, whatever its
    size claims).
    """
    folder, limit = data_folder(), settings.get("TRACE_MAX_FILE_MB") * 2**20
    refused = ValueError(f"No file at '{clip(path_text)}' inside the data folder (TRACE_DATA_DIR); File path reads "
                         f"only files inside it.")
    try:
        path = (folder / path_text).resolve(strict=True)
        if not path.is_relative_to(folder) or not path.is_file():
            raise refused
        with open(path, "rb") as stream:  # a MiB at a time: never a buffer of the limit's size up front
            chunks, size = [], 0
            while size <= limit:
                chunk = stream.read(min(2**20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        data = b"".join(chunks)
    except (OSError, ValueError, RuntimeError):  # missing, a symlink loop, a NUL byte, no permission, too long
        raise refused from None
    if len(data) > limit:
        size = path.stat().st_size
        # exact bytes too: a file just over the limit would otherwise read "200 MB; the limit is 200 MB"
        what = f"{size:,} bytes ({size / 2**20:,.1f} MB)" if size > limit else f"more than {limit:,} bytes"
        raise ValueError(f"'{clip(path.name)}' is {what}; the limit is {limit:,} bytes ({limit / 2**20:,.0f} MB, "
                         f"TRACE_MAX_FILE_MB).")
    return data, path.name


def digest(*parts: Any) -> str:
    """A short content hash of ``parts`` (bytes as they are, anything else by its repr), for cache keys."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
    return h.hexdigest()[:16]


_MODEL_KEYS: weakref.WeakKeyDictionary[LoadedModel, str] = weakref.WeakKeyDictionary()  # kept while the model is
_MODEL_KEYS_LOCK = threading.Lock()


@overload
def model_key(lm: None) -> None: ...


@overload
def model_key(lm: LoadedModel | ServerModel) -> str: ...


def model_key(lm: Any) -> str | None:
    """What identifies the traces a model records, for every cache of traces, evaluations and calibrators (None
    without a model); the model id alone does not (two servers may serve different models under one name).

    * A model server (:class:`trace_core.record.server.ServerModel`): its address, served name and model id, and the
      options that change a trace: the full distribution or the top-k asked (the entropy mode), the endpoint, V, the
      context length and the local tokenizer.
    * A local model: a content digest of the files in its folder (weights, config, tokenizer), with its id, dtype and
      device. Computed once per loaded model (about a second per 700 MB, the first time a page needs it) and kept
      while the model is; a model whose folder cannot be found gets a key of its own.

    The same model always gets the same key, so switching back to it finds what was recorded with it. The sidebar's
    decoding settings are not part of it: recording teacher-forces the given answers, which they do not change.
    """
    if lm is None:
        return None
    from trace_core.record import ServerModel

    if isinstance(lm, ServerModel):
        tokenizer = lm.tokenizer
        return "server-" + digest("server", lm.base_url, lm.model, lm.model_id, lm.full_distribution,
                                  lm.top_logprobs, lm.api, lm.vocab_size, lm.context_length,
                                  str(getattr(tokenizer, "name_or_path", "")), type(tokenizer).__name__)
    with _MODEL_KEYS_LOCK:
        known = _MODEL_KEYS.get(lm)
    if known is None:
        known = "local-" + _local_model_digest(lm)  # outside the lock: hashing a large model takes seconds
        with _MODEL_KEYS_LOCK:
            known = _MODEL_KEYS.setdefault(lm, known)
    return known


def _local_model_digest(lm: LoadedModel) -> str:
    """A digest of the model's folder files and its id, dtype and device (see :func:`model_key`)."""
    from trace_core.record.folders import cached_snapshot, model_folder

    h = hashlib.sha256()
    parameter = next(lm.model.parameters(), None)
    h.update(repr(("local", lm.model_id, type(lm.model).__name__, str(getattr(parameter, "dtype", None)),
                   str(getattr(parameter, "device", None)))).encode())
    source = str(getattr(lm.model, "name_or_path", "") or lm.model_id)
    folder = model_folder(source)
    path = folder.path if folder is not None else cached_snapshot(source)
    if path is None:
        h.update(uuid.uuid4().bytes)  # nothing on disk to read: this loaded model is a model of its own
        return h.hexdigest()[:16]
    for file in sorted(p for p in path.iterdir() if p.is_file()):  # hub snapshots' links followed to their blobs
        h.update(repr((file.name, file.stat().st_size)).encode())
        with open(file, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


@st.cache_resource(show_spinner="Running the evaluation protocol…", max_entries=8)
def evaluate_cached(_traces: Sequence[Trace], labels: np.ndarray, config: EvaluationConfig, methods: tuple[str, ...],
                    key: str, _beams: Sequence[Sequence[float]] | None = None, _semantic: Any = None,
                    semantic: bool = False) -> tuple[EvaluationResult, list[str]]:
    """The protocol on a dataset; ``key`` identifies the traces (they are not hashed by Streamlit): the file's digest
    and the recording model's :func:`model_key` (``DatasetTraces.key``), never the model's name alone, since the cache
    is shared by every session; ``semantic`` says whether ``_semantic`` is given (the semantic baselines run): the
    answers' token relevances (a list, one array per answer, :mod:`app.semantic`) or an embedder.

    Returns the result and the warnings it raised (e.g. skipped splits), for the page to show.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        relevance = _semantic if semantic and isinstance(_semantic, list) else None
        embedder = _semantic if semantic and relevance is None else None
        result = evaluate(list(_traces), labels, config=config, methods=list(methods), beam_logprobs=_beams,
                          embedder=embedder, relevance=relevance)  # no contexts: as the command line
    return result, [str(w.message) for w in caught]


@st.cache_resource(show_spinner="Fitting the calibrator…", max_entries=8)
def fit_calibrator_cached(_traces: Sequence[Trace], labels: np.ndarray, key: str,
                          score: tuple[str, str] = ("TRACE+", "logistic")) -> TracePlus | ScoreCalibrator:
    """The calibrator of ``score`` (a :class:`trace_core.flag.FlagScore`'s method and calibrator: TRACE+ on a feature
    set, or TRACE or a baseline with Platt scaling or isotonic regression) fitted on all the labeled answers of a
    dataset; ``key`` identifies the traces, as for :func:`evaluate_cached` (file digest and :func:`model_key`)."""
    return FlagScore(*score).calibrator_model().fit(list(_traces), labels)


def fitted_calibrator(model: Any, *, origin: str, data: str | None = None, pinned: bool = False,
                      fitted_on: str | None = None) -> state.ActiveCalibrator:
    """``model`` as an :class:`app.state.ActiveCalibrator`, keyed by its parameters (and what it was fitted on, but
    not when: a refit of the same data is the same calibrator); ``fitted_on``: the key of the answers it was fitted
    on."""
    fields = json.loads(model.to_json())
    if isinstance(fields.get("provenance"), dict):
        fields["provenance"].pop("date", None)
    return state.ActiveCalibrator(model=model, origin=origin, data=data,
                                  key=digest(json.dumps(fields, sort_keys=True)), pinned=pinned, fitted_on=fitted_on)


def describe_calibrator(active: state.ActiveCalibrator) -> str:
    """One plain sentence on a calibrator: its kind, where it came from, what it was fitted on (answers, models,
    entropy source, feature set) as far as it records it."""
    model = active.model
    kind = {"TracePlus": "TRACE+", "PlattCalibrator": "Platt scaling of TRACE confidence",
            "IsotonicCalibrator": "isotonic regression of TRACE confidence"}
    name = kind.get(type(model).__name__, type(model).__name__)
    if isinstance(model, ScoreCalibrator):
        name = model.score_name
    feature_set = getattr(model, "feature_set", None)
    if feature_set:
        name += f" ({feature_set} features)"
    parts = [f"{name}, {active.origin}"]
    if active.data:
        parts.append(f"fitted on {active.data}")
    provenance = getattr(model, "provenance_", None) or {}
    if provenance.get("n_rows") and not active.data:
        parts.append(f"fitted on {provenance['n_rows']:,} answers")
    models = [str(m) for m in provenance.get("model_id", []) if m]
    if models:
        parts.append("traces of " + ", ".join(repr(clip(m, 80)) for m in models[:3])
                     + (f" and {len(models) - 3} more" if len(models) > 3 else ""))
    sources = [str(s) for s in provenance.get("entropy_source", []) if s]
    if sources:
        parts.append("entropy " + " and ".join(sources))
    elif provenance:
        parts.append("no recorded entropy source")
    else:
        parts.append("no record of its training data (a file from an earlier version)")
    return "; ".join(parts)


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


def scored_out_of_fold(data: state.Answers, calibrator: Any) -> pd.DataFrame:
    """:func:`scored_rows` with ``probability_correct`` from :func:`trace_core.flag.out_of_fold_probabilities`: for
    the answers ``calibrator`` was fitted on, whose error rates its own probabilities would flatter."""
    from trace_core.flag import out_of_fold_probabilities, score_rows, unscored

    def compute() -> pd.DataFrame:
        scored = score_rows(unscored(data.frame), data.traces, calibrator)
        scored["probability_correct"] = out_of_fold_probabilities(data.traces, data.labels, calibrator)
        return scored

    return state.scored(digest(data.key, calibrator.to_json(), "out of fold"), compute)


def scored_rows(data: state.Answers, calibrator: Any) -> pd.DataFrame:
    """The answers scored by ``calibrator`` (:func:`trace_core.flag.score_rows`), once per data and calibrator in a
    session: moving the Flag page's sliders does not score again. ``data.key`` holds the recording model's
    :func:`model_key`, so traces recorded with another model (another server serving the same name) score afresh."""
    from trace_core.flag import score_rows, unscored

    def compute() -> pd.DataFrame:
        return score_rows(unscored(data.frame), data.traces, calibrator)

    return state.scored(digest(data.key, calibrator.to_json()), compute)



#: Shown with a trace's alternatives when only their ids are known (see :func:`alternatives_for`).
IDS_ONLY_NOTE = ("alternatives shown as token ids: the trace stores no text for them and was recorded with another "
                 "model than the one loaded")


def alternatives_for(lm: LoadedModel | None) -> Callable[[Trace, int], list[str]]:
    """A function giving the text of a trace's top-k alternatives at one position: the trace's own ``top_tokens``
    (stored when it was recorded), else the loaded model's tokenizer only when the trace was recorded with that
    model, else the ids (another tokenizer's text for them would be wrong; :func:`alternatives_note` says so)."""

    def alternatives(trace: Trace, i: int) -> list[str]:
        if trace.top_tokens is not None:
            return list(trace.top_tokens[i])
        if lm is None or not same_model(lm, trace) or (trace.top_ids[i] < 0).any():
            return [f"id {int(t)}" for t in trace.top_ids[i]]
        rows = trace.top_ids[[i]] if i == 0 else trace.top_ids[[0, i]]  # the first row is read alone, later ones not
        return list(alternative_pieces(lm.tokenizer, rows)[-1])  # as the recorder reads them

    return alternatives


def prompt_as_read(lm: Any, trace: Trace) -> tuple[str, str] | None:
    """The text the model read before ``trace``'s answer (the prompt wrapped in the chat template when the trace
    used it, special tokens included) and a sentence on it; None when ``lm`` did not record ``trace``."""
    if lm is None or not same_model(lm, trace):
        return None
    from trace_core.record import encode_prompt

    chat = bool(trace.metadata.chat_template)
    try:
        ids = encode_prompt(lm.tokenizer, trace.prompt, chat_template=chat and lm.has_chat_template)
    except (TypeError, ValueError):
        return None
    text = lm.tokenizer.decode(ids, skip_special_tokens=False)
    if chat and trace.metadata.extra.get("api") == "chat":
        note = ("The server applied its own chat template; this is the local tokenizer's rendering of it, "
                f"{len(ids):,} tokens (the server counted {trace.metadata.extra.get('prompt_tokens', '?')}).")
    elif chat:
        note = f"The prompt through the model's chat template: {len(ids):,} tokens, exactly as the model read them."
    else:
        note = f"The prompt as typed, without a chat template: {len(ids):,} tokens."
    return text, note


def same_model(lm: LoadedModel | None, trace: Trace) -> bool:
    """Whether ``trace`` was recorded with the loaded model, so its ids are this tokenizer's: by content digest when
    both know it (the same model under two paths), else by model id."""
    if lm is None:
        return False
    ours, theirs = getattr(lm, "model_digest", ""), trace.metadata.model_digest
    if ours and theirs:
        return ours == theirs
    return bool(trace.metadata.model_id) and trace.metadata.model_id == lm.model_id


def alternatives_note(lm: LoadedModel | None, trace: Trace) -> str | None:
    """Why a trace's alternatives show as ids (None when they show as text)."""
    if not trace.n_alternatives or trace.top_tokens is not None or same_model(lm, trace):
        return None
    return IDS_ONLY_NOTE


def provenance_notes(calibrator: Any, traces: Sequence[Trace]) -> list[str]:
    """Why ``calibrator`` may be miscalibrated on ``traces`` (another model or entropy source than its fit's), as
    sentences for the page; empty for calibrators that record no provenance."""
    mismatch = getattr(calibrator, "provenance_mismatch", None)
    return mismatch(traces) if callable(mismatch) else []


@st.cache_resource(show_spinner="Loading the sentence-embedding model…", max_entries=1)
def _embedder() -> Any:
    from trace_core.semantic import load_embedder

    return load_embedder()


def embedder() -> tuple[Any, str | None]:
    """The packaged sentence-embedding model of the semantic baselines, or (None, why not): once per process."""
    from trace_core.semantic import EmbedderUnavailable

    try:
        return _embedder(), None
    except EmbedderUnavailable as exc:
        return None, str(exc)



_HEATMAPS: OrderedDict[tuple[Any, ...], tuple[Trace, Any, str]] = OrderedDict()  # least recently used first
_HEATMAPS_LOCK = threading.Lock()
_HEATMAPS_KEPT = 16  # about 0.5 MB each for a 500-token answer


def heatmap_cached(trace: Trace, lm: LoadedModel | None, key: tuple[Any, ...], render: Callable[[], str]) -> str:
    """``render()`` (the Inspect page's heatmap HTML of ``trace``), kept while the answer and the model stay the same
    objects: a rerun that changes another widget (the token details, the colour scale and back) reuses the HTML
    instead of building a card for every token again. ``key`` holds everything else the HTML depends on (the signal,
    the scale, the alternatives note). Traces are immutable, so one object always renders the same HTML; a new
    answer or another model renders afresh. A small least-recently-used store for the process (the entries hold
    their trace and model, so an ``id`` is never reused while its entry is kept); callers must not modify
    ``trace``."""
    full = (id(trace), id(lm), *key)
    with _HEATMAPS_LOCK:
        held = _HEATMAPS.get(full)
        if held is not None and held[0] is trace and held[1] is lm:
            _HEATMAPS.move_to_end(full)
            return held[2]
    rendered = render()
    with _HEATMAPS_LOCK:
        _HEATMAPS[full] = (trace, lm, rendered)
        _HEATMAPS.move_to_end(full)
        while len(_HEATMAPS) > _HEATMAPS_KEPT:
            _HEATMAPS.popitem(last=False)
    return rendered
