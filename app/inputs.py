"""Input widgets a page can share: choosing a dataset file (demo, upload or path) and reading it with its labels."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from trace_core import DatasetError, LabeledDataset
from trace_core.data import MATCHERS

from .components import md_literal
from .services import (data_folder, demo_datasets, digest, file_bytes, local_files_allowed, read_cached,
                       read_local_file)

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


def pick_dataset_file() -> DatasetFile | None:
    """The "Data" choice (a demo dataset, an upload, or, when TRACE_LOCAL_FILES allows, a path inside the data
    folder); None, with a message on the page, until there is a file to read."""
    demos = demo_datasets()
    options = (["Demo dataset"] if demos else []) + ["Upload a file"] + (["File path"] if local_files_allowed() else [])
    source = st.radio("Data", options, horizontal=True, key="data_source")
    if source == "Demo dataset":
        name = st.selectbox("Demo dataset", list(demos), key="demo_dataset")
        return DatasetFile(file_bytes(demos[name]), demos[name].name)
    if source == "File path":
        try:
            folder = data_folder()
        except ValueError as exc:
            st.error(md_literal(str(exc)))
            return None
        path_text = st.text_input("Path of a dataset file on this machine", key="data_path").strip()
        if not path_text:
            st.info(f"Type the path of a CSV, JSON Lines or Parquet file inside the data folder "
                    f"{md_literal(str(folder))} (TRACE_DATA_DIR), relative to it or absolute.")
            return None
        try:
            return DatasetFile(*read_local_file(path_text), by_path=True)
        except (OSError, ValueError) as exc:
            st.error(md_literal(str(exc)))
            return None
    uploaded = st.file_uploader("CSV, JSON Lines or Parquet", type=FILE_TYPES, key="upload",
                                help="Columns: prompt, answer, and label (0/1) or reference; optionally recorded "
                                     "traces. See the README for the format.")
    if uploaded is None:
        st.info("Upload a file to start, or pick a demo dataset.")
        return None
    return DatasetFile(uploaded.getvalue(), uploaded.name)


def read_labeled(file: DatasetFile) -> tuple[LabeledDataset, str] | None:
    """The file read and validated, with a digest of what was read (bytes, name and matcher) for caches; with a
    `reference` column, the matcher is a widget. Says how many rows were kept and why the others were rejected;
    None (with the error on the page) when there is nothing to use."""
    try:
        dataset, matcher = read_cached(file.data, file.name, "exact"), "exact"
        if dataset.label_source.startswith("reference"):
            matcher = st.selectbox("Label answers against their `reference` with", MATCHERS, key="matcher",
                                   help="exact: normalised exact match; contains: the reference appears in the "
                                        "answer; numeric: the answer's last number equals it; f1: token F1 >= 0.5.")
            dataset = read_cached(file.data, file.name, matcher)
    except DatasetError as exc:
        st.error(md_literal(f"{file.name}: {NOT_A_DATASET if file.by_path else exc}"))
        return None
    if file.by_path and dataset.n_valid == 0:  # nothing read from it: its rejected cells are not shown either
        st.error(md_literal(f"{file.name}: {NOT_A_DATASET}"))
        return None
    if dataset.n_rejected:
        st.warning(f"{dataset.n_read:,} rows read: {dataset.n_valid:,} kept, {dataset.n_rejected:,} rejected.")
        with st.expander("Rejected rows and why"):
            st.dataframe(pd.DataFrame([{"row": e.row, "column": e.field, "problem": e.message}
                                       for e in dataset.errors]), hide_index=True)
    else:
        st.success(f"{dataset.n_read:,} rows read, all kept.")
    if dataset.n_valid == 0:
        return None
    return dataset, digest(file.data, file.name, matcher)
