"""Input widgets a page can share: choosing a dataset file (demo, upload or path) and reading it with its labels."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from trace_core import DatasetError, LabeledDataset
from trace_core.data import MATCHERS

from . import state
from .keys import digest
from .review import review_panel
from .services import (
    bundled_answers_of,
    data_folder,
    dataset_limits,
    demo_datasets,
    file_bytes,
    local_files_allowed,
    read_cached,
    read_local_file,
)
from .text import counted, md_literal

FILE_TYPES = ["csv", "tsv", "jsonl", "json", "ndjson", "parquet"]


#: What a file read by path that is not a usable dataset gets instead of the reader's message, which could quote
#: its content (the first line of a file with secrets as "found columns [...]", cell values of rejected rows).
NOT_A_DATASET = ("not a dataset the app can read: expected a CSV, JSON Lines or Parquet table with columns `prompt`, "
                 "`answer`, and `label` or `reference`, and at least one valid row. A file read by path gets no "
                 "details; upload it to see what is wrong.")


@dataclass(frozen=True)
class DatasetFile:
    """A dataset file's bytes and name, as the user gave it; ``by_path`` when read from the server's disk."""

    data: bytes
    name: str
    by_path: bool = False


def pick_dataset_file(role: str = "calibrate", *, prompts: bool = False,
                      prefer: str | None = None) -> DatasetFile | None:
    """The "Data" choice (a demo dataset, an upload, or, when TRACE_LOCAL_FILES allows, a path inside the data
    folder); None, with a message on the page, until there is a file to read.

    ``role`` names the page's choice ("calibrate", "flag"): each has its own widgets and its own kept upload, so an
    upload survives visits to other pages (it is used until the user uploads another or forgets it). With
    ``prompts``, the help says that a table of prompts without answers is answered first (:mod:`app.batch`).

    The bundled datasets are offered with the sidebar model's own answers first, and the choice starts on them (or
    on the bundled dataset ``prefer`` names) and returns to them whenever the sidebar's model changes: a page never
    starts on another model's answers.
    """
    prefix = "" if role == "calibrate" else f"{role}_"
    lm = state.model()
    model_id = lm.model_id if lm is not None else None
    demos = demo_datasets(model_id)  # the sidebar model's own answers first
    if demos:  # the choice starts on them (or on ``prefer``) again whenever the sidebar's model is another model's
        first = prefer if prefer in demos else next(iter(demos))
        state.follow(f"{prefix}demo_dataset", (bundled_answers_of(model_id), prefer), first)
    options = (["Demo dataset"] if demos else []) + ["Upload a file"] + (["File path"] if local_files_allowed() else [])
    if state.kept_upload(role) is not None:
        state.preset(f"{prefix}data_source", "Upload a file")  # back on the page: show what was uploaded
    source = st.radio("Data", options, horizontal=True, key=f"{prefix}data_source")
    if source == "Demo dataset":
        # streamlit's selectbox stub uses typing.Never, which Python 3.10 lacks: mypy then takes the empty-options
        # overload
        name: str = st.selectbox("Demo dataset", list(demos), key=f"{prefix}demo_dataset")  # type: ignore[assignment]
        return DatasetFile(file_bytes(demos[name]), demos[name].name)
    if source == "File path":
        try:
            folder = data_folder()
        except ValueError as exc:
            st.error(md_literal(str(exc)))
            return None
        path_text = st.text_input("Path of a dataset file on this machine", key=f"{prefix}data_path").strip()
        if not path_text:
            st.info(f"Type the path of a CSV, JSON Lines or Parquet file inside the data folder "
                    f"{md_literal(str(folder))} (TRACE_DATA_DIR), relative to it or absolute.")
            return None
        try:
            return DatasetFile(*read_local_file(path_text), by_path=True)
        except (OSError, ValueError) as exc:
            st.error(md_literal(str(exc)))
            return None
    uploaded = st.file_uploader("CSV, JSON Lines or Parquet", type=FILE_TYPES, key=f"{prefix}upload",
                                help="Columns: prompt, answer, and label (0/1) or reference; optionally recorded "
                                     "traces. See docs/datasets.md for the format."
                                     + (" A file of prompts without answers (columns prompt and reference) is "
                                        "answered by the sidebar's model first." if prompts else ""))
    if uploaded is not None:
        state.keep_upload(role, uploaded.getvalue(), uploaded.name)
        return DatasetFile(uploaded.getvalue(), uploaded.name)
    kept = state.kept_upload(role)
    if kept is not None:
        data, name = kept
        cols = st.columns([5, 1], vertical_alignment="center")
        cols[0].caption(f"Using {md_literal(name)} ({len(data):,} bytes), uploaded earlier in this session. Upload "
                        "another file to replace it.")
        if cols[1].button("Forget it", key=f"{prefix}forget_upload"):
            state.forget_upload(role)
            st.rerun()
        return DatasetFile(data, name)
    st.info("Upload a file to start, or pick a demo dataset.")
    return None


def read_labeled(file: DatasetFile, *, require_label: bool = True,
                 matcher_key: str = "matcher") -> tuple[LabeledDataset, str] | None:
    """The file read and validated, with a key of what was read (``"<bytes and name>.<matcher>"``) for caches; with a
    `reference` column, the matcher is a widget (``matcher_key``). With ``require_label=False`` a file without labels
    is read unlabeled. Says how many rows were kept and why the others were rejected; None (with the error on the
    page) when there is nothing to use."""
    try:
        dataset, matcher = _read(file, "exact", require_label, f"{matcher_key}.exact"), "exact"
        if dataset.label_source.startswith("reference"):
            # streamlit's selectbox stub uses typing.Never (absent in Python 3.10): mypy takes the empty overload
            matcher = st.selectbox("Label answers against their `reference` with", MATCHERS,  # type: ignore[assignment]
                                   key=matcher_key,
                                   help="exact: normalised exact match; contains: the reference appears in the "
                                        "answer; claim: it appears in the answer's claim (its 'Answer:' line or "
                                        "first sentence, without asides such as ', which ...'); numeric: the "
                                        "answer's last number equals it; f1: token F1 >= 0.5.")
            dataset = _read(file, matcher, require_label, f"{matcher_key}.matched")
    except DatasetError as exc:
        st.error(md_literal(f"{file.name}: {NOT_A_DATASET if file.by_path else exc}"))
        return None
    if file.by_path and dataset.n_valid == 0:  # nothing read from it: its rejected cells are not shown either
        st.error(md_literal(f"{file.name}: {NOT_A_DATASET}"))
        return None
    if dataset.n_rejected:
        st.warning(f"{counted(dataset.n_read, 'row')} read: {dataset.n_valid:,} kept, {dataset.n_rejected:,} rejected.")
        with st.expander("Rejected rows and why"):
            st.dataframe(pd.DataFrame([{"row": e.row, "column": e.field, "problem": e.message}
                                       for e in dataset.errors]), hide_index=True)
    else:
        st.success(f"{counted(dataset.n_read, 'row')} read, " + ("kept." if dataset.n_read == 1 else "all kept."))
    for note in dataset.notes:  # e.g. rows with both trace cells and a `response`
        st.caption(md_literal(note[:1].upper() + note[1:] + "."))
    if dataset.label_note:  # labels that are likely wrong: every figure below would be too
        st.warning(md_literal(dataset.label_note[:1].upper() + dataset.label_note[1:] + "."))
    if dataset.n_valid == 0:
        return None
    # "<file>.<labels>": the traces recorded for the file's rows are kept under the file part alone (a trace does not
    # depend on how its answer is labeled), results under both (app.recording.dataset_traces)
    key = f"{digest(file.data, file.name)}.{digest(matcher)}"
    if dataset.label_source.startswith("reference"):  # labels a matcher made: reviewed, flipped by hand
        return review_panel(dataset, key, matcher, matcher_key)
    return dataset, key


def _read(file: DatasetFile, matcher: str, require_label: bool, slot: str) -> LabeledDataset:
    """``file`` read with ``matcher`` (:func:`app.services.read_cached`: cached for every session, a copy for each
    reader); this session's copy is kept under ``slot`` while the file, the matcher and the limits stay the same, so
    a rerun does not copy the dataset again."""
    key = (digest(file.data), file.name, matcher, require_label, dataset_limits())
    return state.session_copy(slot, key, lambda: read_cached(file.data, file.name, matcher,
                                                             require_label=require_label))
