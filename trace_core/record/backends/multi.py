"""The backend of several servers of one model (:class:`~trace_core.record.multi.MultiServer`): every answer is one
request, sent to the server the dispatcher picks (the fewest in flight, at most ``concurrency`` at each), and
recorded by that server's :class:`~.completions.ServerBackend` exactly as with one server."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trace_core.record.backends.base import RecordedAnswer
from trace_core.record.backends.completions import ServerBackend
from trace_core.record.multi import MultiServer
from trace_core.traces.trace import DecodingConfig

__all__ = ["MultiServerBackend"]


class MultiServerBackend(ServerBackend):
    """:class:`~.completions.ServerBackend` over a :class:`MultiServer`: what a server backend reads of its model
    (tokenizer, vocabulary, context, API) is the first server's (all agree); each request goes through one
    server's own backend.

    An answer's seed is the one a single server would send (``config.seed`` plus the answer's position), whichever
    server answers; a streamed answer goes to the server with the fewest requests in flight when it starts, without
    holding a place there.
    """

    def __init__(self, multi: MultiServer) -> None:
        super().__init__(multi.first)
        self.multi = multi
        self.backends = [ServerBackend(sm) for sm in multi.servers]

    def generate(self, prompt_ids: Sequence[list[int]], config: DecodingConfig, options: Mapping[str, Any], *,
                 seed_offset: int, prompts: Sequence[str] | None = None) -> list[RecordedAnswer]:
        if self.applies_chat_template and (prompts is None or len(prompts) != len(prompt_ids)):
            raise ValueError("generating through the chat endpoint needs the prompts' text (`prompts`), one per "
                             "prompt")

        def one(server: int, item: tuple[int, list[int]]) -> RecordedAnswer:
            index, ids = item
            text = {"prompts": [prompts[index]]} if prompts is not None else {}
            return self.backends[server].generate([ids], config, options, seed_offset=seed_offset + index,
                                                  **text)[0]

        return self.multi.map(one, list(enumerate(prompt_ids)))

    def score(self, prompt_ids: Sequence[list[int]], answer_ids: Sequence[list[int]], *, n_alternatives: int,
              max_logits_bytes: int) -> list[RecordedAnswer]:
        def one(server: int, pair: tuple[list[int], list[int]]) -> RecordedAnswer:
            return self.backends[server].score([pair[0]], [pair[1]], n_alternatives=n_alternatives,
                                               max_logits_bytes=max_logits_bytes)[0]

        return self.multi.map(one, list(zip(prompt_ids, answer_ids, strict=True)))

    def stream(self, prompt_ids: list[int], config: DecodingConfig, options: Mapping[str, Any], *,
               stop: threading.Event, min_interval: float = 0.0,
               prompt: str | None = None) -> Iterator[RecordedAnswer]:
        return self.backends[self.multi.least_busy()].stream(prompt_ids, config, options, stop=stop,
                                                             min_interval=min_interval, prompt=prompt)
