"""The dataset panel the Calibrate and Flag & export pages share: a file picked (a demo dataset, an upload or a path),
read with its labels, its rows' traces (the file's and those recorded in this session with the sidebar's model), and
the Record panel for the missing ones."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from trace_core import LabeledDataset

from . import state
from .batch import answered
from .inputs import DatasetFile, pick_dataset_file, read_labeled
from .recording import DatasetTraces, dataset_traces, record_panel, traces_download
from .text import sentence


@dataclass(frozen=True)
class TracedFile:
    """A dataset file and its rows' traces, every row usable or left out with a reason on the page.

    Attributes
    ----------
    file : DatasetFile
        The file as read: for a prompts file, the dataset of its answers.
    rows : DatasetTraces
        The dataset, its traces and which rows are usable (at least one).
    """

    file: DatasetFile
    rows: DatasetTraces


def dataset_panel(role: str = "calibrate", *, prompts: bool = False, require_label: bool = True,
                  partial_download: bool = False) -> TracedFile | None:
    """Pick a file (:func:`app.inputs.pick_dataset_file`), read it (:func:`app.inputs.read_labeled`), and merge its
    traces with those recorded in this session (:func:`traced_rows`); None, with the reason on the page, until there
    is at least one usable row with its trace.

    ``role`` names the page's widgets: "calibrate" has the plain keys (``matcher``, ``record``), any other role
    prefixes them (``flag_matcher``, ``flag_record``). With ``prompts``, a file of prompts without answers is answered
    by the sidebar's model first (:func:`app.batch.answered`). With ``require_label=False`` unlabeled answers are read
    too. With ``partial_download``, traces recorded so far can be downloaded while others are still missing.
    """
    prefix = "" if role == "calibrate" else f"{role}_"
    picked = pick_dataset_file(role, prompts=prompts)
    if picked is not None and prompts:
        picked = answered(picked)
    read = (read_labeled(picked, require_label=require_label, matcher_key=f"{prefix}matcher")
            if picked is not None else None)
    if picked is None or read is None:
        return None
    dataset, data_key = read
    rows = traced_rows(dataset, data_key, key=f"{prefix}record",
                       download_name=picked.name if partial_download else None)
    if rows is None:  # traces missing: recording them reruns the page
        return None
    problem = rows.usable.nothing_left_message()
    if problem:
        st.error(sentence(problem))
        return None
    return TracedFile(picked, rows)


def traced_rows(dataset: LabeledDataset, data_key: str, *, key: str = "record",
                download_name: str | None = None) -> DatasetTraces | None:
    """The dataset's traces with the sidebar's model (:func:`app.recording.dataset_traces`), with a warning for each
    kind of row left out (empty answers, answers too long for the model); None while traces are missing, after a
    warning and the Record panel (``key``; a note to choose a model when there is none) and, with ``download_name``,
    the download of a partial recording: the page stops until they are recorded (recording reruns it)."""
    lm = state.model()
    rows = dataset_traces(dataset, data_key, lm)
    for note in rows.usable.notes():
        st.warning(sentence(note))
    if not rows.usable.missing:
        return rows
    st.warning(sentence(rows.usable.missing_message() or ""))  # a message whenever rows are missing
    if lm is None:
        st.info("Choose a model in the sidebar to record them.")
    else:
        record_panel(lm, rows, key=key)  # reruns the page when every missing trace is recorded
    if download_name is not None and rows.store:  # a partial recording is kept, and can be saved
        traces_download(rows, download_name)
    return None
