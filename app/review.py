"""Label review: answers labeled from a reference, each with what the matcher found in it and a one-click flip; the
corrected labels are the ones every table, figure and export after it uses."""

from __future__ import annotations

import html
import io

import numpy as np
import pandas as pd
import streamlit as st

from trace_core import LabeledDataset
from trace_core.data import FLIPPED_COLUMN, export_flagged, flip_labels, matched_span

from . import state
from .downloads import download_button
from .keys import digest
from .text import md_literal, shortened

PAGE_ROWS = 10
FILTERS = ("all", "labeled right", "labeled wrong", "corrected")
SHOWN_CHARACTERS = 600  # an answer longer than this is shown around what matched
MARK_STYLE = "background:#fde68a;padding:0 2px;border-radius:3px"


def marked_answer(answer: str, span: tuple[int, int] | None, limit: int = SHOWN_CHARACTERS) -> str:
    """``answer`` as escaped HTML with ``span`` marked; a long answer is cut to ``limit`` characters around it.

    Examples
    --------
    >>> marked_answer("It is <b>Paris</b>.", (9, 14))
    'It is &lt;b&gt;<mark style="background:#fde68a;padding:0 2px;border-radius:3px">Paris</mark>&lt;/b&gt;.'
    """
    start, end = span if span is not None else (0, 0)
    first = max(0, min(start - limit // 3, len(answer) - limit)) if len(answer) > limit else 0
    last = min(len(answer), first + limit)
    before, inside, after = answer[first:start] if span else answer[first:last], answer[start:end], answer[end:last]
    text = html.escape(before) + (f'<mark style="{MARK_STYLE}">{html.escape(inside)}</mark>'
                                  + html.escape(after) if span else "")
    return ("… " if first else "") + text + (" …" if last < len(answer) else "")


def _flip(data_key: str, position: int) -> None:
    state.set_label_flips(data_key, state.label_flips(data_key) ^ {position})


def _shown_rows(dataset: LabeledDataset, flips: frozenset[int], choice: str) -> list[int]:
    labels = dataset.labels
    if choice == "corrected":
        return sorted(flips)
    if choice == "all":
        return list(range(len(labels)))
    return np.flatnonzero(labels == (1 if choice == "labeled right" else 0)).tolist()


def _row(dataset: LabeledDataset, position: int, matcher: str, data_key: str, flipped: bool) -> None:
    frame = dataset.frame
    answer, reference = str(frame["answer"].iat[position]), frame["reference"].iat[position]
    label = int(frame["label"].iat[position])
    cols = st.columns([0.9, 1.3, 7, 2.5, 1.1], vertical_alignment="center")
    cols[0].caption(f"row {int(frame[dataset.row_column].iat[position]):,}")
    cols[1].markdown((":green[**right**]" if label else ":red[**wrong**]") + (" *(corrected)*" if flipped else ""))
    try:
        span = matched_span(answer, reference, matcher)
    except (TypeError, ValueError):
        span = None
    cols[2].html(f"<div style='font-size:0.9em'>{marked_answer(answer, span)}</div>")
    cols[3].caption(md_literal(shortened(str(reference), 120)))
    cols[4].button("Flip", key=f"flip.{data_key}.{position}", on_click=_flip, args=(data_key, position),
                   width="stretch",
                   help="Mark this answer " + ("wrong" if label else "right") + " (click again to undo)")


def review_panel(dataset: LabeledDataset, data_key: str, matcher: str, key: str) -> tuple[LabeledDataset, str]:
    """The review expander for ``dataset`` (labeled from references with ``matcher``, read as ``data_key``): the
    dataset with this session's corrections applied, and a key that changes with them (so results are not reused
    across different labels)."""
    flips = frozenset(p for p in state.label_flips(data_key) if p < dataset.n_valid)
    reviewed = flip_labels(dataset, flips)
    title = (f"Review labels ({dataset.n_valid:,} answers labeled by the {matcher} matcher"
             + (f"; {len(flips):,} corrected by hand)" if flips else ")"))
    with st.expander(title):
        st.caption("What the label rests on is marked in each answer (the first reference found, or the last number). "
                   "Flip a label that is wrong: the corrected labels are used by every table, figure, calibrator and "
                   "export below, and they are kept for this file and matcher until the session ends.")
        cols = st.columns([3, 1, 2], vertical_alignment="bottom")
        choice = str(cols[0].radio("Show", FILTERS, horizontal=True, key=f"{key}.review_filter"))
        shown = _shown_rows(reviewed, flips, choice)
        pages = max(1, -(-len(shown) // PAGE_ROWS))
        page = int(cols[1].number_input("Page", 1, pages, 1, key=f"{key}.review_page.{choice}"))
        cols[2].caption(f"{len(shown):,} answers, page {page} of {pages}")
        for position in shown[(page - 1) * PAGE_ROWS:page * PAGE_ROWS]:
            _row(reviewed, position, matcher, data_key, position in flips)
        if flips:
            columns = [c for c in (reviewed.row_column, "prompt", "answer", "reference", "label", FLIPPED_COLUMN)
                       if c in reviewed.frame.columns]
            download_button(st, "Download the reviewed labels (CSV)", lambda: _csv(reviewed.frame[columns]),
                            content=(data_key, tuple(sorted(flips))), key=f"{key}.review_download",
                            file_name="reviewed_labels.csv", mime="text/csv")
    return reviewed, (f"{data_key}.{digest(tuple(sorted(flips)))}" if flips else data_key)


def _csv(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    export_flagged(frame, buffer, format="csv")
    return buffer.getvalue()
