"""Which rows of a dataset have a usable trace, and recording the missing ones with the sidebar's model.

Row bookkeeping follows :mod:`trace_core.policy` (the command line follows it too): traces stored in the file, then
the ones recorded in this session; rows that do not fit the model's context are left out instead of failing the batch.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePath

import numpy as np
import streamlit as st

from trace_core import LabeledDataset, LoadedModel, Trace, score_answers, write_dataset
from trace_core.policy import Usable, rows_over_context, usable_rows
from trace_core.record import ServerError, context_length
from trace_core.traces.table import TraceTable, gather

from . import state
from .downloads import download_button
from .keys import model_key
from .text import md_literal

BATCH_SIZE = 16  # answers per teacher-forcing batch; also how often Stop can take effect


@dataclass(frozen=True, eq=False)
class DatasetTraces:
    """A dataset's traces as this session has them, and which rows are usable.

    Attributes
    ----------
    dataset : LabeledDataset
    traces : TraceTable, or tuple of (Trace or None)
        One per row of ``dataset.frame``: the file's table when every row has a trace in the file, else a tuple with
        the session's recorded traces filled in and None where there is none yet.
    usable : Usable
        The policy's sorting of the rows (kept, missing, empty, too long) with its messages.
    key : str
        Identifies these traces, for caches shared by every session: the file's digest and the recording model's
        :func:`app.keys.model_key` (never its name alone).
    store : dict
        This session's recorded traces for the file and model (row number in the file -> Trace), filled by
        :func:`record_panel`.
    """

    dataset: LabeledDataset
    traces: Sequence[Trace | None]
    usable: Usable
    key: str
    store: dict[int, Trace]

    @cached_property
    def kept(self) -> TraceTable:
        """The usable traces, in row order, as one table (made once per dataset and session state)."""
        return TraceTable.from_traces(gather(self.traces, self.usable.keep))

    def present(self) -> np.ndarray:
        """Positions of the rows that have a trace (every row when the traces are the file's table)."""
        if isinstance(self.traces, TraceTable):
            return np.arange(len(self.traces), dtype=np.int64)
        return np.flatnonzero([t is not None for t in self.traces]).astype(np.int64)

    def labels(self) -> np.ndarray | None:
        """The usable rows' labels, in row order; None when the dataset is unlabeled."""
        if self.dataset.label_source == "none":
            return None
        return self.dataset.labels[self.usable.keep]

    def hand_off(self, name: str) -> state.Answers:
        """The usable rows, for the Flag & export page."""
        frame = self.dataset.frame.iloc[self.usable.keep].reset_index(drop=True)
        return state.Answers(frame=frame, traces=self.kept, labels=self.labels(), name=name,
                             row_column=self.dataset.row_column, key=self.key)

    def to_bytes(self, format: str) -> bytes:
        """Every row of the dataset with its trace columns (from the file or recorded in this session; empty where
        there is none), written by :func:`trace_core.write_dataset` (``format``: csv, jsonl, parquet)."""
        buffer = io.BytesIO()
        write_dataset(self.dataset.frame, buffer, traces=self.traces, format=format)
        return buffer.getvalue()


def dataset_traces(dataset: LabeledDataset, data_key: str, lm: LoadedModel | None) -> DatasetTraces:
    """The file's traces merged with those recorded in this session, sorted by :func:`trace_core.policy.usable_rows`.

    With a model, rows still missing a trace are checked against its context (they would be recorded next): once
    per file and model in a session (:func:`app.state.over_context`), not on every rerun.
    """
    key = model_key(lm)
    # Recorded traces are kept by the file (the part of ``data_key`` before its labels) and the row's number in the
    # file, so that labeling the answers another way (another matcher: other rows may be kept) keeps them.
    store = state.recorded_traces(data_key.split(".")[0], key)
    numbers = dataset.frame[dataset.row_column].tolist()
    if isinstance(dataset.traces, TraceTable):  # every row has its trace in the file
        usable = usable_rows(dataset.traces, row_numbers=numbers)
        return DatasetTraces(dataset, dataset.traces, usable, f"{data_key}/{key}", store)
    traces = list(dataset.traces)
    for i, number in enumerate(numbers):
        if traces[i] is None and number in store:
            traces[i] = store[number]
    missing = [i for i, t in enumerate(traces) if t is None]
    too_long: list[int] = []
    limit = None
    if missing and lm is not None:
        over = state.over_context(data_key, key, lambda: _over_context(lm, dataset))
        too_long = [i for i in missing if i in over]
        limit = context_length(lm)
    usable = usable_rows(traces, row_numbers=numbers, too_long=too_long, context_limit=limit)
    return DatasetTraces(dataset, tuple(traces), usable, f"{data_key}/{key}", store)


def _over_context(lm: LoadedModel, dataset: LabeledDataset) -> frozenset[int]:
    """Positions of the rows without a trace in the file that do not fit the model's context (recording fills only
    those rows, so the answer holds whatever this session records)."""
    unrecorded = [i for i, t in enumerate(dataset.traces) if t is None]
    prompts, answers = _texts(dataset, unrecorded)
    return frozenset(unrecorded[j] for j in rows_over_context(lm, prompts, answers))


def _texts(dataset: LabeledDataset, positions: Sequence[int]) -> tuple[list[str], list[str]]:
    frame = dataset.frame.iloc[list(positions)]
    return frame["prompt"].astype(str).tolist(), frame["answer"].astype(str).tolist()


def record_batches(lm: LoadedModel, dataset: LabeledDataset, positions: Sequence[int], *,
                   batch_size: int = BATCH_SIZE) -> Iterator[dict[int, Trace]]:
    """Teacher-force the answers at ``positions`` in batches, yielding each batch's traces by position.

    A generator, so that a caller keeps every finished batch even when it stops early.
    """
    positions = list(positions)
    for start in range(0, len(positions), batch_size):
        rows = positions[start:start + batch_size]
        prompts, answers = _texts(dataset, rows)
        yield dict(zip(rows, score_answers(lm, prompts, answers, batch_size=batch_size), strict=True))


def record_panel(lm: LoadedModel, rows: DatasetTraces, *, key: str = "record") -> None:
    """The "Record" button; once clicked, a Stop button and a progress bar while the missing traces are recorded,
    then a rerun.

    Each batch goes into the session's store at once: Stop interrupts the script at its next Streamlit call (the
    progress update), so what was recorded before is kept.
    """
    missing = rows.usable.missing
    if not st.button(f"Record {len(missing):,} traces with the selected model", type="primary", key=key):
        return
    st.button("Stop", key=f"stop_{key}", help="Stops after the current batch; recorded traces are kept.")
    bar = st.progress(0.0, text="Recording traces…")
    done = 0
    try:
        numbers = rows.dataset.frame[rows.dataset.row_column].tolist()
        for batch in record_batches(lm, rows.dataset, missing):
            rows.store.update({numbers[i]: trace for i, trace in batch.items()})  # by row number in the file
            done += len(batch)
            bar.progress(done / len(missing), text=f"Recorded {done:,} of {len(missing):,} traces")
    except (ServerError, ValueError) as exc:  # one line; what was recorded before stays in the store
        bar.empty()
        st.error(md_literal(f"Recording stopped: {exc}" + (f" ({done:,} traces recorded before it are kept)."
                                                          if done else "")))
        return
    st.rerun()


#: Formats the recorded traces download in: name shown, MIME type.
TRACE_FORMATS = {"csv": ("CSV", "text/csv"), "jsonl": ("JSON Lines", "application/jsonl"),
                 "parquet": ("Parquet", "application/vnd.apache.parquet")}


def traces_download(rows: DatasetTraces, name: str) -> None:
    """One button per format that downloads the whole dataset with its trace columns, written when clicked (seconds
    for tens of thousands of answers: page loads do not pay for it; see :mod:`app.downloads`). The file reads back
    unchanged with ``read_dataset``. A button per format, not a choice and one button: a click right after a change
    of format would have been for the file of the format before."""
    present = rows.present()
    n = len(present)
    cols = st.columns([3, 1, 1, 1], vertical_alignment="center")
    cols[0].markdown(f"Download the dataset with its {n:,} traces:")
    # The traces are the file's and the ones recorded for it with the model (rows.key): which rows have one says
    # which recorded traces are in.
    content = (rows.key, present.tobytes())
    for col, (fmt, (shown, mime)) in zip(cols[1:], TRACE_FORMATS.items(), strict=True):
        download_button(col, shown, functools.partial(rows.to_bytes, fmt), content=(*content, fmt),
                        file_name=f"{PurePath(name).stem}_traces.{fmt}", mime=mime, key=f"download_traces_{fmt}",
                        disabled=n == 0,
                        help="Every row, with the traces stored in the file or recorded in this session; rows "
                             "without a trace have empty trace cells.")
