"""Beam search log-probabilities: the inputs of the beam baselines."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trace_core.checks import check_bool, check_int
from trace_core.record.backends import backend_of
from trace_core.record.load import LoadedModel
from trace_core.record.tokens import check_prompts, encode_prompt

__all__ = ["beam_logprobs"]


def beam_logprobs(lm: LoadedModel, prompts: Sequence[str], *, num_beams: int = 5, max_new_tokens: int = 64,
                  chat_template: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> list[list[float]]:
    """Log-probabilities of the ``num_beams`` beams of one beam-search call per prompt, most likely first.

    This is the one extra (near-single-pass) call the beam baselines need; it never changes the traced answer. A
    beam's log-probability is the sum of its tokens' log-probabilities (no length penalty),
    ``log P(b) = sum_t log p(b_t | x, b_<t)``, EOS included when a beam ends.

    Parameters
    ----------
    lm : LoadedModel
        From :func:`~trace_core.record.load_model`.
    prompts : sequence of str
    num_beams : int, default 5
        Beams per prompt, at least 2.
    max_new_tokens : int, default 64
        Longest beam.
    chat_template : bool, default False
        Encode each prompt with the chat template.
    progress : callable(done, total), optional
        Called after each prompt; raise from it to cancel.

    Returns
    -------
    list of lists of float
        One list of ``num_beams`` log-probabilities (each <= 0) per prompt, in descending order.

    Examples
    --------
    >>> beam_logprobs(lm, ["The capital of France is"], num_beams=3, max_new_tokens=5)  # doctest: +SKIP
    [[-4.1, -4.9, -5.3]]
    """
    backend = backend_of(lm)
    prompts = check_prompts(prompts)
    num_beams = check_int(num_beams, "num_beams", minimum=2)
    max_new_tokens = check_int(max_new_tokens, "max_new_tokens", minimum=1)
    chat_template = check_bool(chat_template, "chat_template")
    results: list[list[float]] = []
    for i, prompt in enumerate(prompts):
        ids = encode_prompt(backend.tokenizer, prompt, chat_template=chat_template)
        results.append(backend.beam_logprobs(ids, num_beams=num_beams, max_new_tokens=max_new_tokens))
        if progress is not None:
            progress(i + 1, len(prompts))
    return results
