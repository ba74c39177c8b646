"""The recorder statistics: entropy, top-k, and the chosen token's log-probability and rank from logits.

One routine, :func:`stats_in_place`, serves generation (through :class:`TraceRecorder`, a logits-processor body
that buffers steps) and teacher forcing (in blocks of ``STATS_BLOCK_BYTES``), so both give the same numbers for the
same logits. Everything here works on torch tensors; torch is imported when a function runs, never at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from trace_core.record.errors import torch_module

if TYPE_CHECKING:  # pragma: no cover
    import torch


def stats_in_place(x: torch.Tensor, k: int, chosen: torch.Tensor | None, *, work: torch.Tensor | None = None,
                   above: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """Entropy (n,), top-k log-probs and ids (n, k), and the chosen tokens' log-probs and 1-based ranks (n,) from
    float32 logits x (n, V), which are overwritten. ``chosen`` None means greedy: the chosen token is the argmax.

    Computed inside x and workspaces of its shape (``work`` float32, ``above`` bool; made here if not given): no
    other vocabulary-sized temporaries, so the allocator has nothing to strand between the long-lived tensors
    generate() keeps growing (at some vocabulary sizes that stranding cost hundreds of MiB over a long answer). No
    host synchronisation, so a GPU is never stalled.
    """
    torch = torch_module()
    work = torch.empty_like(x) if work is None else work
    width = min(max(k, 1), x.shape[-1])
    chunks = _chunk_maxima(x, width)
    x.sub_(x.amax(dim=-1, keepdim=True) if chunks is None else chunks[1])  # z = x - max
    torch.exp(x, out=work)  # e^z
    total = work.sum(dim=-1, keepdim=True)  # Z; log p = z - log Z, taken only where a value is kept
    log_total = total.log()
    top_z, top_ids = torch.topk(x, k=width, dim=-1) if chunks is None else _topk_in_chunks(x, width, chunks[0])
    top_lp = top_z - log_total
    if chosen is None:
        chosen_lp, rank = top_lp[:, 0], torch.ones_like(top_ids[:, 0])
    else:
        chosen_z = x.gather(-1, chosen[:, None])
        chosen_lp = (chosen_z - log_total).squeeze(-1)
        above = torch.empty(x.shape, dtype=torch.bool, device=x.device) if above is None else above
        torch.gt(x, chosen_z, out=above)
        rank = above.sum(dim=-1) + 1  # sum of a bool tensor: twice as fast as count_nonzero
    # H = -sum p log p = log Z - sum(e^z z) / Z: one in-place product and one sum, no normalised copy; the clamp
    # makes masked tokens (z = -inf, e^z = 0) add 0 instead of 0 * -inf = nan.
    weighted = work.mul_(x.clamp_(min=torch.finfo(x.dtype).min)).sum(dim=-1, keepdim=True)
    entropy = (log_total - weighted / total).squeeze(-1)
    return entropy, top_lp[:, :k], top_ids[:, :k], chosen_lp, rank


# Top-k of long rows on a CPU in two stages: the maximum of each run of _CHUNK tokens, then the top k of the tokens
# of the k runs with the largest maxima (and of the tail that fills no run). torch.topk over a 50k vocabulary took
# twice as long as the other passes of stats_in_place together; the run maxima also give the row maximum.
_CHUNK = 128
CHUNKED_FROM = 32 * _CHUNK  # vocabulary size
_CHUNKED_UP_TO_K = 32


def _chunk_maxima(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per row of x (n, V), the maxima of the runs ``x[:, j*_CHUNK:(j+1)*_CHUNK]`` (n, V // _CHUNK) and the row
    maximum (n, 1); None where a plain ``torch.topk`` is used (short rows, large k, not a CPU)."""
    n, width = x.shape
    if width < CHUNKED_FROM or k > _CHUNKED_UP_TO_K or x.device.type != "cpu":
        return None
    runs = width // _CHUNK
    maxima = x[:, :runs * _CHUNK].reshape(n, runs, _CHUNK).amax(dim=-1)
    row_max = maxima.amax(dim=-1, keepdim=True)
    if runs * _CHUNK < width:
        row_max = torch_module().maximum(row_max, x[:, runs * _CHUNK:].amax(dim=-1, keepdim=True))
    return maxima, row_max


def _topk_in_chunks(x: torch.Tensor, k: int, maxima: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(x, k, dim=-1)`` from the run maxima of x taken before a shift of each row by a constant (any
    non-decreasing map of each row keeps the argument): every one of a row's top k lies in one of the k runs with the
    largest maxima, or in the tail. The same values in the same order; among exactly tied values the ids chosen may
    differ from torch.topk's, whose choice among ties is unspecified too."""
    torch = torch_module()
    n, width = x.shape
    runs = maxima.shape[1]
    best = torch.topk(maxima, k=min(k, runs), dim=-1).indices  # (n, k)
    ids = (best[:, :, None] * _CHUNK + torch.arange(_CHUNK, device=x.device)).reshape(n, -1)
    if runs * _CHUNK < width:
        tail = torch.arange(runs * _CHUNK, width, device=x.device).expand(n, -1)
        ids = torch.cat([ids, tail], dim=1)
    values, where = torch.topk(x.gather(-1, ids), k=k, dim=-1)
    return values, ids.gather(-1, where)


# Teacher forcing computes statistics in blocks of about this many bytes of float32 logits rows: the half-dozen
# passes over the vocabulary then stay in cache instead of streaming a (tokens x V) tensor from memory each time.
STATS_BLOCK_BYTES = 4 * 2**20


class TraceRecorder:
    """LogitsProcessor body that records per-step entropy, top-k, and the chosen token's log-prob and rank.

    Each step's scores are copied into a preallocated buffer of at most ``buffer_bytes`` (and 64 steps); when it is
    full, the statistics of all buffered steps are computed in one vectorised call (inside the buffer, see
    :func:`stats_in_place`) and the rows are dropped. Memory is
    therefore bounded by the buffer, never T x V, and the per-step cost is one copy: on small models the fixed cost
    of a dozen tensor operations per step would otherwise rival the model itself.

    Chosen tokens: under greedy decoding nothing runs after the recorder, so the chosen token is the argmax of the
    row it saw (log-prob = top-1 value, rank 1, ties included). Under sampling the token chosen at step t is read from
    ``input_ids`` at a later step, or from the final sequences.
    """

    max_steps = 64

    def __init__(self, k: int, *, greedy: bool, buffer_bytes: int = 2 * 2**20) -> None:
        self.k = k
        self.greedy = greedy
        self.buffer_bytes = buffer_bytes
        self.prompt_width: int | None = None
        self._buffer: Any = None  # (limit, B, V) float32: steps _flushed .. _flushed + _n - 1 are buffered
        self._work: Any = None  # workspaces of the buffer's shape (float32, bool), made on first use
        self._above: Any = None
        self._n = 0
        self._flushed = 0
        self._limit = 1
        self._parts: dict[str, list] = {"entropy": [], "top_lp": [], "top_ids": [], "chosen_lp": [], "rank": []}

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prompt_width is None:
            self.prompt_width = input_ids.shape[1]
            row_bytes = 4 * scores.shape[0] * scores.shape[1]
            self._limit = max(1, min(self.max_steps, self.buffer_bytes // row_bytes))
            torch = torch_module()
            self._buffer = torch.empty((self._limit,) + tuple(scores.shape), dtype=torch.float32,
                                       device=scores.device)
        if self._n >= self._limit:
            # Every buffered step is before this one, so its chosen token is already in input_ids.
            self._flush(input_ids[:, self.prompt_width:])
        self._buffer[self._n].copy_(scores)  # one copy into preallocated memory (and to float32)
        self._n += 1
        return scores

    def _flush(self, generated: torch.Tensor, n_rows: int | None = None) -> None:
        torch = torch_module()
        n_steps = self._n if n_rows is None else min(n_rows, self._n)
        if n_steps == 0:
            return
        batch = self._buffer.shape[1]
        # Rows in step-major order (step, sequence): a view of the buffer, no copy.
        chosen = None
        if not self.greedy:
            chosen = generated[:, self._flushed:self._flushed + n_steps].T.reshape(-1).to(self._buffer.device)
        width = self._buffer.shape[-1]
        if self._work is None:
            self._work = torch.empty_like(self._buffer)
            self._above = None if self.greedy else torch.empty(self._buffer.shape, dtype=torch.bool,
                                                                device=self._buffer.device)
        n = n_steps * batch
        entropy, top_lp, top_ids, chosen_lp, rank = stats_in_place(
            self._buffer.view(-1, width)[:n], self.k, chosen, work=self._work.view(-1, width)[:n],
            above=None if self._above is None else self._above.view(-1, width)[:n])
        for name, value in (("entropy", entropy), ("top_lp", top_lp), ("top_ids", top_ids),
                            ("chosen_lp", chosen_lp), ("rank", rank)):
            value = value.reshape((n_steps, batch) + tuple(value.shape[1:])).transpose(0, 1)
            self._parts[name].append(value)
        self._flushed += n_steps
        self._n = 0

    def step_stats(self, step: int, chosen: int) -> tuple[float, np.ndarray, np.ndarray, float, int]:
        """(entropy, top-k log-probs (k,), top-k ids (k,), chosen log-prob, rank) of generated step ``step`` of the
        first sequence, whose chosen token is ``chosen``: what a streamed answer shows before the trace is finished.

        Computed on a copy of the step's row, so the buffer, its later flush and therefore the recorded trace are
        exactly what they are without it. Call it from the thread that runs ``generate`` (a streamer's ``put``),
        between steps.
        """
        torch = torch_module()
        at = step - self._flushed
        if self._buffer is not None and 0 <= at < self._n:
            row = self._buffer[at, :1].clone()
            picked = None if self.greedy else torch.tensor([chosen], device=row.device)
            entropy, top_lp, top_ids, chosen_lp, rank = stats_in_place(row, self.k, picked)
            values = [entropy[0], top_lp[0], top_ids[0], chosen_lp[0], rank[0]]
        elif 0 <= step < self._flushed:  # already flushed (a stop check that streams a step late)
            values = [torch.cat(self._parts[name], dim=1)[0, step]
                      for name in ("entropy", "top_lp", "top_ids", "chosen_lp", "rank")]
        else:  # pragma: no cover - a streamer called out of step with the processor
            raise RuntimeError(f"the trace recorder holds no step {step}")
        h, lp, ids, c, r = (v.cpu().numpy() for v in values)
        return float(h), lp, ids, float(c), int(r)

    def finish(self, sequences: torch.Tensor) -> dict[str, np.ndarray]:
        """Per-step arrays of shape (B, T[, k]) for the T generated steps in ``sequences`` (B, T)."""
        torch = torch_module()
        n_steps = sequences.shape[1]
        if n_steps > self._flushed + self._n:  # pragma: no cover - generate() skipped the processor
            raise RuntimeError("the trace recorder saw fewer steps than were generated; is this a custom generate()?")
        # Steps beyond n_steps were undone by generate() (deferred stop checks): they are never scored.
        self._flush(sequences, n_rows=max(0, n_steps - self._flushed))
        self._n = 0
        self._buffer = self._work = self._above = None
        return {name: torch.cat(parts, dim=1)[:, :n_steps].cpu().numpy() for name, parts in self._parts.items()}
