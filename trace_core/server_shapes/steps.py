"""What a response says about each answer token, as typed values: the chosen token, its log-probability and the
alternatives offered beside it (:class:`TokenStep`), and a whole response's steps with where they were found
(:class:`ParsedResponse`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["Offered", "ParsedResponse", "TokenStep"]


class Offered(NamedTuple):
    """One token a step offers as an alternative.

    Attributes
    ----------
    text : str
        The token as the response writes it (a text, or vLLM's ``"token_id:N"``).
    raw : bytes
        Its bytes: the response's own ``bytes`` field when it has one, else read from ``text``.
    logprob : float
        Its log-probability, checked (:func:`~trace_core.traces.logprobs.check_logprob`); -inf or below ``-MAX_NATS``
        means no probability.
    token_id : int or None
        Its id when the response gives one.
    """

    text: str
    raw: bytes
    logprob: float
    token_id: int | None = None


@dataclass(frozen=True, slots=True)
class TokenStep:
    """One answer token as a response gives it.

    Attributes
    ----------
    text : str
        The chosen token as the response writes it.
    raw : bytes
        The chosen token's bytes (the response's ``bytes`` field, else read from ``text``).
    logprob : float
        The chosen token's log-probability: finite and at least ``-MAX_NATS``.
    alternatives : tuple of Offered, or None
        The tokens offered at this step, in the response's order; None when the response lists none for it (the field
        absent or null), () when it lists an empty set.
    token_id : int or None
        The chosen token's id when the response gives it.
    rank : int or None
        The chosen token's 1-based rank when the response gives it.
    special : bool
        The response marks the token special (TGI's ``special``: an end-of-answer token), which the answer text leaves
        out.
    """

    text: str
    raw: bytes
    logprob: float
    alternatives: tuple[Offered, ...] | None = None
    token_id: int | None = None
    rank: int | None = None
    special: bool = False

    @property
    def offered(self) -> tuple[Offered, ...]:
        """The alternatives, () when the response lists none."""
        return self.alternatives or ()


@dataclass(frozen=True)
class ParsedResponse:
    """What a response layout's parser reads out of one response.

    Attributes
    ----------
    steps : tuple of TokenStep
        One per answer token.
    text : object
        The answer text as the response gives it (checked to be a str by its reader); None when the response has none.
    extra : dict
        Details stored in ``TraceMetadata.extra`` besides ``api`` (e.g. ``finish_reason``).
    tokens_at : str
        Where the steps are in the response, for messages (``"choices[0].logprobs.content"``).
    alternatives_at : str
        Where step i's alternatives are, with ``{}`` for i, for messages
        (``"choices[0].logprobs.content[{}].top_logprobs"``).
    step_offset : int
        The position of step 0 in the response's list, for messages (``alternatives_at.format(offset + i)``).
    ranked : bool
        Whether the layout gives the chosen tokens' ranks (:attr:`ranks`).
    text_at : str
        Where the answer text is in the response, for messages (``"choices[0].message.content"``).
    text_within : bool
        The text is only part of what the tokens spell: the message also holds reasoning or tool calls, which the
        tokens spell too.
    """

    steps: tuple[TokenStep, ...]
    text: object
    extra: dict[str, Any] = field(default_factory=dict)
    tokens_at: str = "the response's tokens"
    alternatives_at: str = "step {}'s alternatives"
    step_offset: int = 0
    ranked: bool = False
    text_at: str = "the answer text"
    text_within: bool = False

    @property
    def by_id(self) -> bool:
        """Whether every token and every alternative has an id (then tokens are told apart by id, not by bytes)."""
        return all(step.token_id is not None and all(alt.token_id is not None for alt in step.offered)
                   for step in self.steps)

    @property
    def ranks(self) -> list[int] | None:
        """The chosen tokens' ranks when the layout gives ranks and the response gives every one; None otherwise."""
        if not self.ranked:
            return None
        ranks = [step.rank for step in self.steps]
        return None if None in ranks else ranks  # type: ignore[return-value]
