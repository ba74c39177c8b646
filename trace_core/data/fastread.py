"""Decoding the trace cells of many rows at once: the reader's fast path.

A chunk of rows is decoded column by column (:mod:`trace_core.data.fastparse`: from CSV text cells, or from the decoded
lists of JSON Lines records and Parquet; :func:`~trace_core.data.read_parquet.from_arrow`: from Parquet's Arrow arrays),
then every check of :func:`~trace_core.traces.columns.trace_from_cells` is made on the whole chunk's arrays at once, the
rarer rules included (alternatives below -MAX_NATS dropped, each row keeping the fewest any step has; the top-k mass
with the chosen token counted when its id shows it is not among them; ``surprisal`` and ``logprobs`` both given and
agreeing). CSV cells that the text front end does not take (numbers with other spacing or in another form, JSON text of
another writer) are decoded cell by cell with the codec's :func:`~trace_core.traces.columns.decode_cell` and then
checked together as decoded lists are; an answer with no token is read on its own (:func:`_empty_answer`). Every valid
row is accepted here: only a row that some check refuses (a cell that does not decode to lists of one shape is refused
too) is left to the per-row path (None), which decodes it with the codec to name its bad cells exactly. Both paths take
each column's dtype and accepted types from the codec's column spec; the bounds checked here are the codec's
(:mod:`trace_core.traces.logprobs`). ``tests/trace_core/data/test_fastread.py`` checks that both paths give the same
traces and the same errors, and that no valid row reaches the per-row decoder; a change to the codec's rules must be
made here too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trace_core.data.fastparse import Parsed, fast_metadata, from_lists, from_text
from trace_core.data.read_parquet import from_arrow
from trace_core.traces.cells import ABSENT, CellError, is_blank
from trace_core.traces.columns import decode_cell, vocab_size_of
from trace_core.traces.logprobs import (
    ENTROPY_TOLERANCE,
    MAX_ENTROPY_NATS,
    MAX_NATS,
    TOP_K_MASS_TOLERANCE,
    entropy_from_top_k,
)
from trace_core.traces.trace import LOGPROB_TOLERANCE, Trace, TraceMetadata

__all__ = ["FastRow", "build_trace", "decode_chunk", "table_row"]

_FAST_COLUMNS = frozenset({"tokens", "token_ids", "surprisal", "logprobs", "entropy", "top_ids", "top_logprobs",
                           "top_tokens", "ranks", "trace_metadata"})


@dataclass
class FastRow:
    """One row's trace parts, decoded and checked by :func:`decode_chunk`: :func:`table_row` makes it a row of a
    :class:`~trace_core.traces.table.TraceTable` (no Trace made), :func:`build_trace` makes the Trace."""

    tokens: tuple[str, ...]
    token_ids: np.ndarray
    surprisal: np.ndarray
    entropy: np.ndarray | None
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    ranks: np.ndarray | None
    metadata: TraceMetadata
    top_tokens: tuple[tuple[str, ...], ...] | None
    prompt: str = ""
    answer: str = ""


def table_row(row: FastRow, *, prompt: str, answer: str) -> FastRow | Trace:
    """The row with its prompt and answer, as a :class:`~trace_core.traces.table.TableBuilder` takes it: the row itself
    when its parts are exactly what a Trace keeps, else the Trace made from them (which normalises them, or raises
    TypeError / ValueError as it would for any other trace)."""
    parts: dict[str, Any] = {
        "token_ids": row.token_ids, "tokens": row.tokens, "surprisal": row.surprisal, "entropy": row.entropy,
        "top_ids": row.top_ids, "top_logprobs": row.top_logprobs, "ranks": row.ranks, "metadata": row.metadata,
        "top_tokens": row.top_tokens}
    if not Trace._plain_parts(prompt=prompt, answer=answer, **parts):
        return Trace(prompt=prompt, answer=answer, **parts)
    row.prompt, row.answer = prompt, answer
    return row


def build_trace(row: FastRow, *, prompt: str, answer: str) -> Trace:
    """The Trace of a row that :func:`decode_chunk` decoded: what :func:`trace_from_cells` returns for its cells."""
    return Trace.from_checked(prompt=prompt, answer=answer, token_ids=row.token_ids, tokens=row.tokens,
                               surprisal=row.surprisal, entropy=row.entropy, top_ids=row.top_ids,
                               top_logprobs=row.top_logprobs, ranks=row.ranks, metadata=row.metadata,
                               top_tokens=row.top_tokens)


def decode_chunk(raws: Sequence[Mapping[str, Any]], columns: Sequence[str],
                 strings: dict[str, str]) -> list[FastRow | None] | None:
    """Decode and check the trace cells of many rows at once.

    Two forms are taken: every trace cell a CSV text cell (JSON text), or every one already decoded (a JSON Lines
    record's lists, a ``trace_metadata`` object; Parquet's lists), column by column. Parquet rows of one record
    batch are decoded from its Arrow arrays when :func:`~trace_core.data.read_parquet.from_arrow` can, as their
    lists would be.

    Parameters
    ----------
    raws : sequence of mappings
        The rows' cells (column name -> str, or -> list / dict).
    columns : sequence of str
        The trace columns the table has.
    strings : dict
        Token text -> the one str object kept for it (shared with the per-row path).

    Returns
    -------
    list of FastRow or None, or None
        Per row, its checked trace parts, or None where the row needs the per-row path (:func:`trace_from_cells`),
        which names any bad cell; None when the chunk has no ``tokens`` or a column the fast path does not know.
    """
    if not raws or "tokens" not in columns or not set(columns) <= _FAST_COLUMNS:
        return None
    with np.errstate(all="ignore"):  # values that overflow here are refused rows: the per-row path reports them
        parsed = from_arrow(raws, columns, strings)  # Arrow rows: from their batch's arrays, when that is sure
        if parsed is None:
            kinds = {type(raw.get("tokens")) for raw in raws}
            if kinds == {str}:
                parsed = from_text(raws, columns)
            elif kinds == {list}:
                parsed = from_lists(raws, columns)
        if parsed is None:  # spaces, JSON text among lists, odd rows...: each cell decoded, then checked
            return _from_decoded(raws, columns, strings)
        return _checked(parsed, strings)


_SPLITS = 64  # halvings of a chunk, at most, to find the rows whose lists the front end does not take


def _taken(rows: list[Mapping[str, Any]], columns: Sequence[str], strings: dict[str, str],
           budget: list[int]) -> list[FastRow | None]:
    """Rows of decoded lists in one form, checked together (:func:`from_lists`, then the checks). When the front
    end does not take them all (a list of another length, a value of another type in some row), the rows are halved
    and each half tried, while ``budget`` lasts, so that a few odd rows leave only themselves to the per-row path."""
    parsed = from_lists(rows, columns)
    if parsed is not None:
        checked = _checked(parsed, strings)
        return checked if checked is not None else [None] * len(rows)
    if len(rows) == 1:
        return [None]
    if budget[0] <= 0:  # the halvings are spent: each row on its own
        return [fast for row in rows for fast in _taken([row], columns, strings, budget)]
    budget[0] -= 1
    half = len(rows) // 2
    return _taken(rows[:half], columns, strings, budget) + _taken(rows[half:], columns, strings, budget)


def _from_decoded(raws: Sequence[Mapping[str, Any]], columns: Sequence[str],
                  strings: dict[str, str]) -> list[FastRow | None]:
    """Cells that no front end takes for the whole chunk (numbers with other spacing or in another form, JSON text
    among lists, answers with no token, a few odd rows): each row's cells decoded by the per-row decoder's own
    :func:`decode_cell`, then the rows that have the same cells checked together as decoded lists are
    (:func:`_taken`), an answer with no token on its own. A row whose cell does not decode to a list is left to the
    per-row path (None), which names its problem."""
    groups: dict[tuple[bool, ...], list[tuple[int, dict[str, Any]]]] = {}
    out: list[FastRow | None] = [None] * len(raws)
    for i, raw in enumerate(raws):
        row = _decoded_row(raw, columns)
        if row is None:
            continue
        if row["tokens"]:
            groups.setdefault(tuple(row[c] is None for c in columns), []).append((i, row))
        else:
            out[i] = _empty_answer(row)
    budget = [_SPLITS]
    for members in groups.values():
        for (i, _), fast in zip(members, _taken([row for _, row in members], columns, strings, budget), strict=True):
            out[i] = fast
    return out


def _decoded_row(raw: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any] | None:
    """The row's trace cells decoded (an empty cell: None; ``trace_metadata`` kept as its text, read once per
    distinct text); None when a cell does not decode to a list or the row has no ``tokens``. As in the per-row
    path, a step column given as ``[]`` holds no alternatives (k = 0)."""
    row: dict[str, Any] = {}
    for name in columns:
        value = raw.get(name)
        if name == "trace_metadata":
            row[name] = None if is_blank(value) else value
            continue
        try:
            decoded = decode_cell(value, name)
        except CellError:
            return None
        if decoded is ABSENT:
            row[name] = None
        elif isinstance(decoded, list):
            row[name] = decoded
        else:
            return None
    tokens = row.get("tokens")
    if tokens is None:
        return None
    for name in _STEP_COLUMNS:
        if row.get(name) == []:
            row[name] = [[] for _ in tokens]
    return row


_STEP_COLUMNS = ("top_logprobs", "top_ids", "top_tokens")


def _empty_answer(row: dict[str, Any]) -> FastRow | None:
    """An answer with no token, read as the per-row path reads it: every trace cell it has an empty list (no
    alternatives, k = 0); None (the per-row path, which names the problem) for anything else."""
    if any(value not in (None, []) for name, value in row.items() if name != "trace_metadata"):
        return None
    if row.get("surprisal") is None and row.get("logprobs") is None:
        return None
    meta = fast_metadata(row.get("trace_metadata") or "")  # a blank cell: the rows' default
    if meta is None:
        return None
    try:
        vocab_size_of(meta)
    except CellError:
        return None
    given = row.get("entropy") is not None  # an empty list: its metadata's source stands, as in the codec
    if not given:
        meta = replace(meta, entropy_source="absent", entropy_k=None)
    return FastRow(tokens=(), token_ids=np.full(0, -1, dtype=np.int64), surprisal=np.zeros(0),
                   entropy=np.zeros(0) if given else None, top_ids=np.full((0, 0), -1, dtype=np.int64),
                   top_logprobs=np.zeros((0, 0)), ranks=np.zeros(0, dtype=np.int64) if row.get("ranks") is not None
                   else None, metadata=meta, top_tokens=() if row.get("top_tokens") is not None else None)


class _Flags:
    """The rows of a chunk that some check refuses, found from their tokens' (or steps') values at once."""

    def __init__(self, lengths: list[int]) -> None:
        self.n_rows = len(lengths)
        self.lengths = lengths
        self.owner = np.repeat(np.arange(self.n_rows), lengths)  # each token's row
        self.bad = np.zeros(self.n_rows, dtype=bool)

    def add(self, wrong: np.ndarray) -> None:
        """Refuse every row that owns at least one token where ``wrong`` holds."""
        flags = np.zeros(self.n_rows, dtype=bool)
        flags[self.owner[wrong]] = True
        self.bad |= flags


def _checked(parsed: Parsed, strings: dict[str, str]) -> list[FastRow | None] | None:
    """The checks of :func:`trace_from_cells`, on every row's values at once: a row that any would refuse is left to
    the per-row path (None); the others become FastRows."""
    lengths = [len(t) for t in parsed.token_lists]
    flags = _Flags(lengths)
    surprisal = _check_values(parsed.vectors, flags)
    if surprisal is None:
        return None
    steps = _check_steps(parsed, surprisal, flags) if parsed.top_logprobs is not None else None
    given = parsed.metadatas is not None  # else each row gets TraceMetadata(source="imported"), made once
    metadatas = list(parsed.metadatas) if parsed.metadatas is not None else []
    _check_vocabulary(parsed, metadatas, lengths, flags, None if steps is None else steps.kept)
    return _fast_rows(parsed, metadatas if given else None, surprisal, steps, flags.bad, lengths, strings)


def _check_values(vectors: dict[str, np.ndarray], flags: _Flags) -> np.ndarray | None:
    """Flag the rows whose per-token values are not finite or out of bounds; the surprisal (given, or from the
    log-probabilities), None when neither is given."""
    for name, arr in vectors.items():
        if name != "token_ids":
            flags.add(~np.isfinite(arr))
    surprisal = vectors.get("surprisal")
    if surprisal is not None:
        flags.add((surprisal < -LOGPROB_TOLERANCE) | (surprisal > MAX_NATS))
    if "logprobs" in vectors:
        logprobs = vectors["logprobs"]
        flags.add((logprobs > LOGPROB_TOLERANCE) | (logprobs < -MAX_NATS))
        if surprisal is None:
            surprisal = 0.0 - logprobs  # +0.0 for a log-prob of 0 (as codec)
        else:  # both given: they must agree (the codec's test)
            flags.add(~np.isclose(surprisal, -logprobs, rtol=0.0, atol=1e-6))
    if surprisal is None:
        return None
    if "entropy" in vectors:
        entropy = vectors["entropy"]
        flags.add((entropy < -LOGPROB_TOLERANCE) | (entropy > MAX_ENTROPY_NATS))
    if "ranks" in vectors:
        flags.add(vectors["ranks"] < 1)
    return surprisal


@dataclass
class _Steps:
    """What the alternatives' checks found: each row's number of alternatives kept (``kept``: those at or above
    -MAX_NATS at its every step, as the codec keeps them) and the entropy estimated from the top k when no entropy is
    given (None otherwise; NaN-free only for the rows that keep all k)."""

    kept: np.ndarray
    estimated: np.ndarray | None


def _check_steps(parsed: Parsed, surprisal: np.ndarray, flags: _Flags) -> _Steps:
    """Flag the rows with a step whose alternatives are NaN or above 0, unsorted, or hold too much probability (the
    codec's rule, with the same arithmetic: the chosen token counts when its id shows it is not among them).
    Alternatives below -MAX_NATS, -inf included, have no probability: each row keeps the fewest that any of its steps
    has above it, as the codec does."""
    top_logprobs, top_ids = parsed.top_logprobs, parsed.top_ids
    assert top_logprobs is not None
    step_bad = np.isnan(top_logprobs).any(axis=1) | (top_logprobs > LOGPROB_TOLERANCE).any(axis=1)
    step_bad |= (np.diff(top_logprobs, axis=1) > 1e-12).any(axis=1)
    alternatives = np.exp(top_logprobs).sum(axis=1)  # -inf and -9999 add 0
    chosen = np.exp(-surprisal)
    doubtful = alternatives + chosen > 1.0 + TOP_K_MASS_TOLERANCE
    if doubtful.any():
        token_ids = parsed.vectors.get("token_ids")
        among = np.ones(len(surprisal), dtype=bool)
        if token_ids is not None and top_ids is not None:
            ids_known = (token_ids >= 0) & (top_ids >= 0).all(axis=1)
            among = ~ids_known | (top_ids == token_ids[:, None]).any(axis=1)
        step_bad |= doubtful & (alternatives + np.where(among, 0.0, chosen) > 1.0 + TOP_K_MASS_TOLERANCE)
    flags.add(step_bad)
    above = (top_logprobs >= -MAX_NATS).sum(axis=1)
    starts = np.cumsum([0, *flags.lengths[:-1]])
    kept = np.minimum.reduceat(above, starts) if above.size else np.zeros(flags.n_rows, dtype=np.int64)
    estimated = None
    if "entropy" not in parsed.vectors and parsed.k > 0:
        clean = step_bad | (above < parsed.k)  # a row that drops alternatives is estimated on its own
        estimated = entropy_from_top_k(np.where(clean[:, None], -1.0, top_logprobs))
    return _Steps(kept=kept, estimated=estimated)


def _check_vocabulary(parsed: Parsed, metadatas: list[TraceMetadata | None], lengths: list[int],
                      flags: _Flags, kept: np.ndarray | None) -> None:
    """Flag the rows whose ids, ranks or given entropy pass the bounds of their vocabulary size (when their metadata
    gives it; only the ``kept`` alternatives' ids count, as in the codec); a metadata whose vocabulary size the codec
    refuses becomes None (its row: the per-row path)."""
    n_rows, vectors, top_ids = len(lengths), parsed.vectors, parsed.top_ids
    limits: np.ndarray = np.full(n_rows, np.inf)  # a given entropy's bound where the vocabulary size is known
    vocab = np.full(n_rows, np.iinfo(np.int64).max)  # ids must be below it, ranks at most it
    for i, meta in enumerate(metadatas):
        try:
            vocab_size = None if meta is None else vocab_size_of(meta)
        except CellError:
            metadatas[i] = None
            continue
        if vocab_size is not None:
            limits[i] = math.log(vocab_size) + ENTROPY_TOLERANCE
            vocab[i] = vocab_size
    if "entropy" in vectors:
        flags.add(vectors["entropy"] > np.repeat(limits, lengths))
    per_token = np.repeat(vocab, lengths)
    if "token_ids" in vectors:
        flags.add(vectors["token_ids"] >= per_token)
    if top_ids is not None and parsed.k > 0:
        beyond = top_ids >= per_token[:, None]
        if kept is not None and bool((kept < parsed.k).any()):
            beyond &= np.arange(parsed.k) < np.repeat(kept, lengths)[:, None]
        flags.add(np.asarray(beyond.any(axis=1)))
    if "ranks" in vectors:
        flags.add(vectors["ranks"] > per_token)


def _fast_rows(parsed: Parsed, metadatas: list[TraceMetadata | None] | None, surprisal: np.ndarray,
               steps: _Steps | None, bad: np.ndarray, lengths: list[int],
               strings: dict[str, str]) -> list[FastRow | None]:
    """The FastRow of each row no check refused (None for the others), its arrays views of the chunk's.
    ``metadatas``: each row's, None where the per-row path must read it; None when the chunk has none."""
    vectors, k = parsed.vectors, parsed.k
    top_logprobs, top_ids, top_strings = parsed.top_logprobs, parsed.top_ids, parsed.top_strings
    given = metadatas is not None
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    # Every trace of the chunk has the same entropy source: given, estimated from its top k, or absent.
    entropies = vectors.get("entropy", None if steps is None else steps.estimated)
    source: dict[str, Any] = {}
    if entropies is None:
        source = {"entropy_source": "absent", "entropy_k": None}
    elif "entropy" not in vectors:
        source = {"entropy_source": "top_k", "entropy_k": k}
    default_meta = TraceMetadata(source="imported", **source)  # for the rows without metadata (frozen: shared)
    total = bounds[-1]
    if "token_ids" not in vectors:  # views of one chunk-wide array, as a row's own would hold
        vectors = {**vectors, "token_ids": np.full(total, -1, dtype=np.int64)}
    if top_ids is None:
        top_ids = np.full((total, k), -1, dtype=np.int64)
    if top_logprobs is None:
        top_logprobs = np.zeros((total, 0))
    kept = [k] * len(lengths) if steps is None else steps.kept.tolist()
    texts = _shared(parsed.token_lists, None if parsed.shared else strings)
    top_steps = None
    if top_strings is not None:  # every step's k texts, the chunk's steps end to end
        top_texts = _shared(top_strings, None if parsed.shared else strings)
        top_steps = list(zip(*[iter(top_texts)] * k, strict=True)) if k else [()] * total
    out: list[FastRow | None] = []
    for i in range(len(lengths)):
        row_meta = metadatas[i] if metadatas is not None else None
        if bad[i] or (given and row_meta is None):
            out.append(None)
            continue
        a, b = bounds[i], bounds[i + 1]
        meta = (replace(row_meta, **source) if source else row_meta) if row_meta is not None else default_meta
        row = FastRow(
            tokens=tuple(texts[a:b]),
            token_ids=vectors["token_ids"][a:b],
            surprisal=surprisal[a:b],
            entropy=None if entropies is None else entropies[a:b],
            top_ids=top_ids[a:b],
            top_logprobs=top_logprobs[a:b],
            ranks=vectors["ranks"][a:b] if "ranks" in vectors else None,
            metadata=meta,
            top_tokens=None if top_steps is None else tuple(top_steps[a:b]))
        out.append(row if kept[i] == k else _dropped(row, kept[i], estimate="entropy" not in vectors))
    return out


def _shared(lists: list[list[str]], strings: dict[str, str] | None) -> list[str]:
    """The texts of every row's list, end to end, each replaced by the one object kept for it in ``strings`` (a
    tokenizer's texts repeat: each is stored once); as they are when ``strings`` is None (they are those objects)."""
    flat = list(itertools.chain.from_iterable(lists))
    return flat if strings is None else list(map(strings.setdefault, flat, flat))


def _dropped(row: FastRow, k: int, *, estimate: bool) -> FastRow:
    """The row keeping its first ``k`` alternatives at every step (those after them have no probability), its
    entropy estimated from them when none was given, and its metadata saying so: what the codec makes of it."""
    top = None if row.top_tokens is None else tuple(r[:k] for r in row.top_tokens)
    row = replace(row, top_ids=row.top_ids[:, :k], top_logprobs=row.top_logprobs[:, :k], top_tokens=top)
    if not estimate:
        return row
    if k == 0:
        return replace(row, entropy=None, metadata=replace(row.metadata, entropy_source="absent", entropy_k=None))
    return replace(row, entropy=entropy_from_top_k(row.top_logprobs),
                   metadata=replace(row.metadata, entropy_source="top_k", entropy_k=k))
