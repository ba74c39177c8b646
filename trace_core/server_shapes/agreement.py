"""Whether the parts of one answer agree with each other: a token's ``bytes`` with its text, a step's alternatives
with each other and with the chosen token, the tokens with the answer text.

A response says some things twice, and the two must agree: an answer whose text is "London" while its tokens spell
"Paris" would be imported, and labeled, as an answer it is not. Where real servers legitimately write the same thing
two ways (a token that is part of a UTF-8 character, an end-of-answer token missing from the text, an answer stopped
inside a token), the difference is reconciled, the bytes taken as the truth; anything else is refused with a
ValueError naming the field and showing both versions. The checks cost a few comparisons per token when the parts
agree exactly, which is what servers write.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Sequence

from trace_core.checks import show
from trace_core.server_shapes.steps import Offered, ParsedResponse, TokenStep
from trace_core.traces.logprobs import MAX_NATS

__all__ = ["CUT_AT_LENGTH", "SAME_LOGPROB", "STOP_SLACK", "bytes_agree", "checked_offers", "same_logprob",
           "spelling_problem", "unique_offers"]

#: Two log-probabilities a response gives one token at one step must agree within this (relative and absolute, the
#: tolerance the dataset reader holds surprisal to): a server copies one number, only its printing may differ.
SAME_LOGPROB = 1e-6
#: Characters by which the tokens may run past the answer text, or the text past the tokens, at the end of an answer
#: that was not cut at its length limit: the end-of-answer token (``<|endoftext|>``) is listed with the tokens but not
#: written in the text, and an answer stopped by a stop sequence is cut inside the token that holds it.
STOP_SLACK = 64
#: ``finish_reason`` values of an answer cut at its length limit: its text and tokens end together.
CUT_AT_LENGTH = frozenset({"length", "limit", "max_tokens", "max_output_tokens"})
_REPLACEMENT = "\ufffd"
_REPLACEMENT_BYTES = _REPLACEMENT.encode("utf-8")
#: What a server shows for bytes that are not a whole character: U+FFFD, or half a UTF-16 surrogate pair.
_LOSSY = re.compile("[\ufffd\ud800-\udfff]")
_TOKEN_ID = re.compile(r"token_id:\d+")
_BYTE_FORMS = re.compile(r"(?:bytes:|byte: )?((?:\\x[0-9a-fA-F]{2})+)|<0x([0-9a-fA-F]{2})>")


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable bytes stand for themselves, the others (a space is
    ``Ġ``, a newline ``Ċ``) for characters from U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


_BYTE_LEVEL = _byte_level_alphabet()


def _written_bytes(text: str) -> bytes:
    """The bytes a token text names with the servers' byte forms: ``bytes:\\xe6\\x97`` (OpenAI completions),
    ``\\xe6`` (OpenAI chat), ``byte: \\xe6`` (old llama.cpp), ``<0xE6>`` (SentencePiece, whose ``▁`` is a space); the
    rest as UTF-8."""
    out, at = bytearray(), 0
    for match in _BYTE_FORMS.finditer(text):
        out += text[at:match.start()].replace("▁", " ").encode("utf-8", "replace")
        hexes = match.group(1).split("\\x")[1:] if match.group(1) else [match.group(2)]
        out += bytes(int(h, 16) for h in hexes)
        at = match.end()
    return bytes(out + text[at:].replace("▁", " ").encode("utf-8", "replace"))


def bytes_agree(text: str, raw: bytes) -> bool:
    """Whether ``raw``, a token's ``bytes`` field, may be the bytes of its text ``text``.

    They agree when ``raw`` is the text's UTF-8; when the text is a lossy rendering of ``raw`` (bytes that are not a
    whole UTF-8 character shown as U+FFFD, half a surrogate pair, or left out: llama.cpp, Ollama and vLLM write a
    token that is part of a character so); when the text writes the bytes in a byte form (``bytes:\\xe6``,
    ``\\xe6``, ``byte: \\xe6``, ``<0xE6>``, SentencePiece's ``▁``, GPT-2's byte-level alphabet); and when the text is
    a token id (``token_id:N``, vLLM's ``return_tokens_as_token_ids``), which renders nothing.
    """
    if raw == text.encode("utf-8", "replace") or _TOKEN_ID.fullmatch(text):
        return True
    if _LOSSY.sub("", text) == raw.decode("utf-8", "ignore").replace(_REPLACEMENT, ""):
        return True
    if raw == _written_bytes(text):
        return True
    return bool(text) and all(c in _BYTE_LEVEL for c in text) and raw == bytes(_BYTE_LEVEL[c] for c in text)


# --------------------------------------------------------------------------------------------------
# One step's alternatives
# --------------------------------------------------------------------------------------------------

def same_logprob(a: float, b: float) -> bool:
    """Whether two log-probabilities given for one token at one step are the same number: within
    :data:`SAME_LOGPROB`, or both below ``-MAX_NATS`` (``-inf`` and the -9999 servers write both mean none)."""
    if a < -MAX_NATS and b < -MAX_NATS:
        return True
    return math.isclose(a, b, rel_tol=SAME_LOGPROB, abs_tol=SAME_LOGPROB)


def unique_offers(keys: Sequence[Hashable | None], logprobs: Sequence[float], chosen: Hashable | None,
                  chosen_lp: float, *, where: str, name: Callable[[int], str]) -> list[int] | None:
    """The alternatives of one step to keep, after checking that they agree with each other and with the chosen token.

    ``keys[j]`` is what tells alternative j apart (its id, or its bytes; None when it cannot be told apart, e.g. a
    token whose bytes the server left out), ``chosen`` the chosen token's key. A token listed twice with the same
    log-probability (:func:`same_logprob`) is kept once; listed twice with different ones, or listed with another
    log-probability than the step gives the chosen token, the step is refused: one token has one probability at a
    step, so one of the numbers is wrong and which is unknown. ``where`` names the alternatives, ``name(j)`` shows
    alternative j, in the ValueError.

    Returns None when every alternative is kept (the common case), else the positions kept, in order.
    """
    listed = dict(zip(keys, logprobs, strict=True))
    if len(listed) == len(keys):  # no key twice (the common case): only the chosen token's number to compare
        if chosen is not None and chosen in listed and not same_logprob(listed[chosen], chosen_lp):
            _chosen_differs(keys.index(chosen), logprobs, chosen_lp, where=where, name=name)
        return None
    first: dict[Hashable, int] = {}
    dropped: list[int] = []
    for j, key in enumerate(keys):
        if key is None:
            continue
        seen = first.setdefault(key, j)
        if seen == j:
            continue
        if not same_logprob(logprobs[seen], logprobs[j]):
            raise ValueError(f"{where} lists {name(j)} twice ([{seen}] and [{j}]) with the log-probabilities "
                             f"{logprobs[seen]:.6g} and {logprobs[j]:.6g}; expected each token once (a token has one "
                             "probability at a step)")
        dropped.append(j)
    at = first.get(chosen) if chosen is not None else None
    if at is not None and not same_logprob(logprobs[at], chosen_lp):
        _chosen_differs(at, logprobs, chosen_lp, where=where, name=name)
    if not dropped:
        return None
    gone = set(dropped)
    return [j for j in range(len(keys)) if j not in gone]


def _chosen_differs(at: int, logprobs: Sequence[float], chosen_lp: float, *, where: str,
                    name: Callable[[int], str]) -> None:
    raise ValueError(f"{where}[{at}] gives the chosen token, {name(at)}, the log-probability {logprobs[at]:.6g} but "
                     f"the step gives it {chosen_lp:.6g}; expected the same number (a token has one probability at a "
                     "step)")


def checked_offers(parsed: ParsedResponse) -> list[tuple[Offered, ...]]:
    """Each step's alternatives after :func:`unique_offers`: tokens told apart by id when the response gives ids
    (:attr:`~.steps.ParsedResponse.by_id`), else by bytes (a token whose bytes are unknown, :func:`_unknown`, is
    told apart from none). ValueError names the step's alternatives (``alternatives_at``)."""
    by_id = parsed.by_id
    out = []
    for t, step in enumerate(parsed.steps):
        offered = step.offered
        if offered:
            keys = ([alt.token_id for alt in offered] if by_id else
                    [alt.raw if alt.raw and _REPLACEMENT_BYTES not in alt.raw else None for alt in offered])
            kept = unique_offers(keys, [alt.logprob for alt in offered], step.token_id if by_id else _key(step.raw),
                                 step.logprob, where=parsed.alternatives_at.format(t + parsed.step_offset),
                                 name=_namer(offered, by_id))
            offered = offered if kept is None else tuple(offered[j] for j in kept)
        out.append(offered)
    return out


def _key(raw: bytes) -> bytes | None:
    """What tells a token apart by its bytes; None when they are unknown (empty, or holding U+FFFD)."""
    return None if not raw or _REPLACEMENT_BYTES in raw else raw


def _namer(offered: Sequence[Offered], by_id: bool) -> Callable[[int], str]:
    """``name(j)``: alternative j for a message, its text (and id)."""
    def name(j: int) -> str:
        alt = offered[j]
        return f"{show(alt.text)} (id {alt.token_id})" if by_id else show(alt.text)
    return name


# --------------------------------------------------------------------------------------------------
# The tokens and the answer text
# --------------------------------------------------------------------------------------------------

def _glob(text: str, parts: Sequence[str]) -> bool:
    """Whether ``text`` is ``parts`` joined with anything (possibly nothing) between consecutive parts: the first
    part leftmost, each next one at its leftmost place after it (which is right for such patterns), the last at the
    end."""
    if len(parts) == 1:
        return text == parts[0]
    head, last = parts[0], parts[-1]
    if len(text) < len(head) + len(last) or not text.startswith(head) or not text.endswith(last):
        return False
    at, end = len(head), len(text) - len(last)
    for part in parts[1:-1]:
        found = text.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def _cut(parts: list[str]) -> list[str] | None:
    """``parts`` less its last character (and the gaps that then end it); None when nothing is left to cut."""
    parts = list(parts)
    while len(parts) > 1 and not parts[-1]:
        parts.pop()
    if not parts[-1]:
        return None
    parts[-1] = parts[-1][:-1]
    return parts


def _agree(text: str, parts: list[str], *, slack: int) -> bool:
    """:func:`_glob`, allowing the whole text's leading and trailing whitespace, and up to ``slack`` characters more
    at the end of either side."""
    if _glob(text, parts):
        return True
    text = text.strip()
    parts = [parts[0].lstrip(), *parts[1:]] if len(parts) > 1 else [parts[0].strip()]
    parts[-1] = parts[-1].rstrip()
    if _glob(text, parts):
        return True
    if any(_glob(text[:-d], parts) for d in range(1, min(slack, len(text)) + 1)):  # the text runs past the tokens
        return True
    for _ in range(slack):  # the tokens run past the text
        shorter = _cut(parts)
        if shorter is None:
            return False
        parts = shorter
        if _glob(text, parts):
            return True
    return False


def _unknown(step: TokenStep) -> bool:
    """Whether a token's text is unknown: a special token (left out of the text), or one whose bytes the server left
    out or shows as U+FFFD (vLLM writes a token that is part of a character as ``""``, TGI as ``""`` or U+FFFD)."""
    return step.special or not step.raw or _REPLACEMENT_BYTES in step.raw


def spelling_problem(parsed: ParsedResponse, pieces: Sequence[str]) -> str | None:
    """Why the tokens' texts ``pieces`` (one per step of ``parsed``) do not spell its answer text; None when they do,
    or when it has none.

    They spell it when joined they equal it, with these differences real servers make: a token whose text is unknown
    (:func:`_unknown`) stands for any text, possibly none; U+FFFD, which servers write for bytes that are not a whole
    character each in their own way, is left out of both; the whole text's leading and trailing whitespace; and,
    unless the answer was cut at its length limit (``finish_reason``), up to :data:`STOP_SLACK` characters more at
    the end of either (an end-of-answer token listed but not written, an answer stopped by a stop sequence inside a
    token). When the response holds reasoning or tool calls beside the text (``text_within``), the text need only be
    part of what the tokens spell. The message shows both from the first character that differs.
    """
    text = parsed.text
    joined = "".join(pieces)
    if not isinstance(text, str) or text == joined:
        return None
    unknown = [_unknown(step) for step in parsed.steps]
    if parsed.text_within:
        if any(unknown) or text.strip().replace(_REPLACEMENT, "") in joined.replace(_REPLACEMENT, ""):
            return None
    elif _spelled(text, pieces, unknown, slack=0 if parsed.extra.get("finish_reason") in CUT_AT_LENGTH
                  else STOP_SLACK):
        return None
    differ = next((i for i, (a, b) in enumerate(zip(text, joined, strict=False)) if a != b),
                  min(len(text), len(joined)))
    start = max(0, differ - 20)
    where = f" from character {start}" if start else ""
    return (f"{parsed.text_at} is {show(text[start:])}{where} but the tokens ({parsed.tokens_at}) spell "
            f"{show(joined[start:])}; expected the tokens to spell the answer text (are they another answer's?)")


def _spelled(text: str, pieces: Sequence[str], unknown: Sequence[bool], *, slack: int) -> bool:
    """:func:`_agree` of the text and the tokens (an unknown token a gap), then of both without U+FFFD."""
    parts = [""]
    for piece, gap in zip(pieces, unknown, strict=True):
        if gap:
            parts.append("")
        else:
            parts[-1] += piece
    if _agree(text, parts, slack=slack):
        return True
    return (any(_REPLACEMENT in p for p in (text, *parts))
            and _agree(text.replace(_REPLACEMENT, ""), [p.replace(_REPLACEMENT, "") for p in parts], slack=slack))
