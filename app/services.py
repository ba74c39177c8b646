"""What the pages load, cached: models and model servers (each checked against its allow-list first), the
sentence-embedding model, and datasets from the bundled files, an upload's bytes or a path inside the data folder.

Models, servers and the embedder are resources (``st.cache_resource``): one object per input for the whole process,
shared by every session; a model is used under the LoadedModel's lock, so sessions can share one. Datasets are data
(``st.cache_data``): cached by content and copied for each caller. Limits come from :mod:`trace_core.settings`, read
when used (a test or a deployment sets the environment).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from trace_core import LabeledDataset, LoadedModel, load_model, read_dataset, settings
from trace_core.checks import clip
from trace_core.record import check_model_allowed

from .keys import digest

_preload_lock = threading.Lock()
_preloading: threading.Thread | None = None


def preload_in_background() -> threading.Thread:
    """Start importing the evaluation's numeric libraries on a daemon thread, once per process (the first page run
    starts it; a user's first evaluation then finds them loaded instead of waiting for the import)."""
    global _preloading
    with _preload_lock:
        if _preloading is None:
            from trace_core.evaluation.protocol import preload

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
    """A model server as a model (:func:`trace_core.record.remote.connect_server`), once per process; ``recheck``
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


@functools.cache
def real_model_id() -> str | None:
    """The model id that SmolLM2-135M-Instruct's bundled answers record (its GGUF file's name), or None without
    them."""
    path = DATASETS / "real_summary.json"
    return json.loads(path.read_text(encoding="utf-8")).get("model") if path.exists() else None


def bundled_answers_of(model_id: str | None) -> str | None:
    """Which bundled answers (and "Try these" examples) are the model's own: ``"demo"`` for the bundled demo model,
    ``"real"`` for SmolLM2-135M-Instruct (the packaged GGUF file), None for any other model or none."""
    if model_id is None:
        return None
    if model_id == DEMO_MODEL_ID or Path(model_id).resolve() == DEMO_MODEL.resolve():
        return "demo"
    return "real" if model_id == real_model_id() else None


def demo_datasets(model_id: str | None = None) -> dict[str, Path]:
    """The bundled labeled datasets, by name: the answers of the model ``model_id`` first (the demo model's
    ``demo_*``, SmolLM2-135M-Instruct's ``real_*``), so that a page starts on the answers of the model being looked at;
    for another model (or none) SmolLM2's, the default model's, first."""
    demo = sorted(DATASETS.glob("demo_*.csv"))
    real = [DATASETS / f"real_{split}.csv" for split in ("validation", "test")]
    ordered = [*demo, *real] if bundled_answers_of(model_id) == "demo" else [*real, *demo]
    return {p.stem: p for p in ordered if p.exists()}


#: How many datasets the process keeps read, for every session together; they also hold at most TRACE_MAX_DATA_MB
#: (their pickled size).
DATASETS_KEPT = 8


def read_cached(data: bytes, name: str, matcher: str, *, require_label: bool = True) -> LabeledDataset:
    """Read (and validate) a dataset from bytes, at most TRACE_MAX_ROWS rows; with ``require_label=False`` a file
    without `label` and `reference` columns is read unlabeled.

    Cached by content for the process (``st.cache_data``, keyed by a digest of the bytes, the name, the matcher and
    the limits, so a new limit is never hidden): at most :data:`DATASETS_KEPT` datasets, and at most
    TRACE_MAX_DATA_MB of them in all, the least recently used dropped first. Every call gets its own copy, so no
    session sees another's changes. A file that holds more than TRACE_MAX_DATA_MB of data, or a Parquet file that
    would decompress to more, is refused by the reader before it is decompressed.
    """
    max_rows, budget, cell = dataset_limits()
    return _dataset_cache(budget)(digest(data), data, name, matcher, max_rows, require_label, budget, cell)


def dataset_limits() -> tuple[int, int, int]:
    """What :func:`read_cached` reads a dataset under: at most TRACE_MAX_ROWS rows, TRACE_MAX_DATA_MB of data (in
    bytes, also the cache's byte bound) and TRACE_MAX_CELL_MB per cell (in bytes)."""
    return (settings.get("TRACE_MAX_ROWS"), settings.get("TRACE_MAX_DATA_MB") * 2**20,
            settings.get("TRACE_MAX_CELL_MB") * 2**20)


@functools.lru_cache(maxsize=4)
def _dataset_cache(budget: int) -> Callable[..., LabeledDataset]:
    """The cached reader under a byte bound of ``budget`` (one Streamlit cache: a new bound replaces it)."""
    return st.cache_data(max_entries=DATASETS_KEPT, max_size=budget, show_spinner="Reading the dataset…")(_read)


def _read(content: str, _data: bytes, name: str, matcher: str, max_rows: int, require_label: bool, max_bytes: int,
          max_cell: int) -> LabeledDataset:
    """The dataset in ``_data`` (``content``: its digest, the cache's key for it)."""
    from trace_core.data import DatasetWarning

    buffer = io.BytesIO(_data)
    buffer.name = name
    with warnings.catch_warnings():  # the page shows the rejected rows itself
        warnings.simplefilter("ignore", DatasetWarning)
        return read_dataset(buffer, matcher=matcher, max_rows=max_rows, require_label=require_label,
                            max_bytes=max_bytes, max_cell_chars=max_cell)


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


@st.cache_resource(show_spinner="Loading the sentence-embedding model…", max_entries=1)
def _embedder() -> Any:
    from trace_core.methods.semantic import load_embedder

    return load_embedder()


def embedder() -> tuple[Any, str | None]:
    """The packaged sentence-embedding model of the semantic baselines, or (None, why not): once per process."""
    from trace_core.methods.semantic import EmbedderUnavailable

    try:
        return _embedder(), None
    except EmbedderUnavailable as exc:
        return None, str(exc)
