"""Answering a file of prompts from the dashboard: a prompts file (a ``.txt`` with one prompt per line, or a table
with a ``prompt`` column and no ``answer``) is answered by the sidebar's model, batch by batch with a progress bar and
a Stop, and the answers with their traces become the dataset the page evaluates.

Every finished batch is kept in the session (by the file, the model and the decoding), so Stop, another page or a
rerun loses nothing already generated; the answered rows are evaluated while the rest wait for "Generate the rest".
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator, Sequence
from pathlib import PurePath
from typing import Any

import streamlit as st

from trace_core import DatasetError, DecodingConfig, Trace, generate_traces, settings, write_dataset
from trace_core.data import read_prompts
from trace_core.data.read import read_table
from trace_core.policy import fit_new_tokens
from trace_core.record import ServerError

from . import state
from .inputs import DatasetFile
from .keys import digest, model_key
from .text import counted, md_literal

#: Prompts per generate call.
BATCH_SIZE = 8
#: Columns that make a table a dataset of answers rather than a prompts file.
ANSWER_COLUMNS = ("answer", "response")


def is_prompts_file(file: DatasetFile) -> bool:
    """Whether ``file`` holds prompts to answer rather than answers: a ``.txt`` file, or a table with a ``prompt``
    column and neither ``answer`` nor ``response`` (judged from its header, or its first record: nothing else is
    read)."""
    if PurePath(file.name).suffix.lower() == ".txt":
        return True
    try:
        buffer = io.BytesIO(file.data)
        buffer.name = file.name
        table, _ = read_table(buffer, format=None, max_rows=None, max_bytes=settings.get("TRACE_MAX_DATA_MB") * 2**20,
                              max_cell_chars=settings.get("TRACE_MAX_CELL_MB") * 2**20)
        next(table.rows, None)  # a JSON Lines file's columns are known once its first record is read
    except (DatasetError, ValueError, OSError):
        return False  # the dataset reader says what is wrong with it
    return "prompt" in table.columns and not set(ANSWER_COLUMNS) & set(table.columns)


@st.cache_data(max_entries=8, show_spinner="Reading the prompts…")
def prompts_cached(data: bytes, name: str) -> Any:
    """:func:`trace_core.data.read_prompts` of a file's bytes, cached by content."""
    return read_prompts(data, name=name, max_bytes=settings.get("TRACE_MAX_DATA_MB") * 2**20,
                        max_cell_chars=settings.get("TRACE_MAX_CELL_MB") * 2**20)


def answer_batches(lm: Any, prompts: Sequence[str], positions: Sequence[int], config: DecodingConfig) -> Iterator[
        tuple[dict[int, Trace], dict[int, str]]]:
    """Answer the prompts at ``positions`` in batches, yielding each batch's traces and the prompts it could not
    answer (the prompt alone fills the model's context) by position. A prompt that leaves less room than
    ``config.max_new_tokens`` is answered alone, cut where the context ends.

    Sampling is seeded per batch with ``config.seed`` plus the position of the batch's first prompt, as
    :func:`trace_core.generate_traces` seeds its batches: a file answered from the start in batches of
    :data:`BATCH_SIZE` gives the answers one ``generate_traces`` call (and ``trace-core generate``) gives, and a run
    stopped and continued gives the same answers as one that was not."""
    positions = list(positions)
    for start in range(0, len(positions), BATCH_SIZE):
        rows = positions[start:start + BATCH_SIZE]
        full, skipped, short = [], {}, {}
        for i in rows:
            try:
                fit = fit_new_tokens(lm, prompts[i], max_new_tokens=config.max_new_tokens,
                                     chat_template=config.chat_template)
            except ValueError as exc:
                skipped[i] = str(exc)
                continue
            if fit.max_new_tokens < config.max_new_tokens:
                short[i] = fit.max_new_tokens
            else:
                full.append(i)
        traces = dict(zip(full, generate_traces(lm, [prompts[i] for i in full], config=_seeded(config, rows[0]),
                                                batch_size=BATCH_SIZE), strict=True)) if full else {}
        for i, limit in short.items():
            traces[i] = generate_traces(lm, [prompts[i]], config=dataclasses.replace(
                _seeded(config, i), max_new_tokens=limit))[0]
        yield traces, skipped


def _seeded(config: DecodingConfig, offset: int) -> DecodingConfig:
    return config if config.seed is None else dataclasses.replace(config, seed=config.seed + offset)


def _answered_file(read: Any, done: dict[int, Trace], name: str) -> DatasetFile:
    """The answered prompts as a dataset file (JSON Lines with their traces): the prompts file's columns, the answer
    after the prompt, and ``prompts_row``, each row's number in the prompts file."""
    positions = sorted(done)
    frame = read.frame.iloc[positions].reset_index(drop=True).copy()
    traces = [done[i] for i in positions]
    frame.insert(frame.columns.get_loc("prompt") + 1, "answer", [t.answer for t in traces])
    frame["prompts_row"] = [read.rows[i] for i in positions]
    buffer = io.BytesIO()
    write_dataset(frame, buffer, traces=traces, format="jsonl")
    return DatasetFile(buffer.getvalue(), f"{PurePath(name).stem}_answers.jsonl")


def answered(file: DatasetFile) -> DatasetFile | None:
    """``file`` itself when it holds answers; for a prompts file, the panel that answers it with the sidebar's model
    and, once some prompts are answered, their dataset file (labeled later against ``reference`` like any dataset);
    None (with the reason on the page) until there is something to evaluate."""
    if not state.remembered("prompts_file", (file.data, file.name), lambda: is_prompts_file(file)):
        return file
    try:
        read = prompts_cached(file.data, file.name)
    except DatasetError as exc:
        st.error(md_literal(f"{file.name}: {exc}"))
        return None
    n = len(read.rows)
    them = "it" if n == 1 else "them"
    st.info(f"{md_literal(file.name)} holds {counted(n, 'prompt')} and no answers: answer {them} with the sidebar's "
            "model, then evaluate the answers." + ("" if read.references is not None else
                                       " Give the file a `reference` column (the gold answers) to label them: "
                                       "without labels there is nothing to calibrate. `trace-core generate` answers "
                                       "a prompts file without references."))
    if read.skipped:  # no prompt, or one the reader refused (a cell over TRACE_MAX_CELL_MB): each says why
        count = len({e.row for e in read.skipped})
        st.warning(f"{counted(count, 'row is', 'rows are')} left out: "
                   + md_literal("; ".join(str(e) for e in read.skipped[:3]))
                   + (f"; and {len(read.skipped) - 3:,} more." if len(read.skipped) > 3 else "."))
    if read.dropped:
        st.caption(f"Left out: {md_literal(', '.join(read.dropped[:8]))}, which describe(s) other answers; the new "
                   "answers are labeled against `reference`.")
    if read.references is None:
        return None
    lm = state.model()
    if lm is None:
        st.info(state.no_model_message())
        return None
    config = state.decoding()
    key = (digest(file.data, file.name), model_key(lm), repr(config))
    store, failed = state.generated_answers(key)
    prompts = read.frame["prompt"].astype(str).tolist()
    waiting = [i for i in range(n) if i not in store and i not in failed]
    if failed and not waiting and not store:  # nothing to evaluate: the reason is the error, not an empty file
        st.error(f"No prompt of {md_literal(file.name)} can be answered: " + _unanswered(read.rows, failed) + ".")
        return None
    if failed:
        st.warning(f"{counted(len(failed), 'prompt fills', 'prompts fill')} the model's context and "
                   f"{'gets' if len(failed) == 1 else 'get'} no answer: " + _unanswered(read.rows, failed) + ".")
    if waiting:
        label = (f"Generate {counted(len(waiting), 'answer')} with the sidebar's model" if not store
                 else "Generate the last answer" if len(waiting) == 1
                 else f"Generate the other {len(waiting):,} answers")
        st.caption(f"Decoding: the sidebar's ({'sampled' if config.do_sample else 'greedy'}, at most "
                   f"{config.max_new_tokens} new tokens). Answers are kept as they are generated: Stop keeps them.")
        if st.button(label, type="primary", key="generate_answers"):
            generate_with_progress(prompts, [("", lm, config, waiting, store, failed)],
                                   stop_key="stop_generate_answers")
        if not store:
            return None
        st.warning(f"{len(store):,} of {n:,} prompts {'is' if len(store) == 1 else 'are'} answered; the results below "
                   f"are of {'that one' if len(store) == 1 else 'those'}.")
    return state.generated_file((*key, len(store)), lambda: _answered_file(read, dict(store), file.name))


def _unanswered(rows: Sequence[int], failed: dict[int, str], shown: int = 3) -> str:
    """The prompts that got no answer, each with its row in the file and why (at most ``shown``; the rest counted),
    as Markdown-safe text."""
    listed = "; ".join(f"row {rows[i]:,}: {why[:1].lower()}{why[1:].rstrip('.')}"
                       for i, why in list(failed.items())[:shown])
    return md_literal(listed) + (f"; and {len(failed) - shown:,} more" if len(failed) > shown else "")


#: One generation job: (label shown on the bar, "" for none; model; decoding; positions waiting; its answers store;
#: its unanswerable prompts).
Job = tuple[str, Any, DecodingConfig, Sequence[int], dict[int, Trace], dict[int, str]]


def generate_with_progress(prompts: Sequence[str], jobs: Sequence[Job], *, stop_key: str) -> None:
    """Answer each job's waiting prompts with one progress bar and a Stop; each batch goes into its job's store at once
    (Stop interrupts the script at its next Streamlit call, the progress update), then the page reruns. An error
    ends it with one line; the answers before it are kept."""
    total = sum(len(job[3]) for job in jobs)
    st.button("Stop", key=stop_key, help="Stops after the current batch; the answers are kept.")
    bar = st.progress(0.0, text="Generating answers…")
    done = 0
    try:
        for label, lm, config, waiting, store, failed in jobs:
            for traces, skipped in answer_batches(lm, prompts, waiting, config):
                store.update(traces)
                failed.update(skipped)
                done += len(traces) + len(skipped)
                bar.progress(done / total, text=f"{label + ': ' if label else ''}answered {done:,} of {total:,} "
                                                "prompts")
    except (ServerError, ValueError, RuntimeError) as exc:  # one line; the answers before it are kept
        bar.empty()
        kept = sum(len(job[4]) for job in jobs)
        st.error(md_literal(f"Generation stopped: {exc}" + (f" ({counted(kept, 'answer')} before it "
                                                            f"{'is' if kept == 1 else 'are'} kept)." if kept
                                                            else "")))
        return
    st.rerun()
