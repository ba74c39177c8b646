"""Model-server response shapes: one typed parser per layout a server writes its log-probabilities in.

Each parser reads a response (or one of its ``logprobs`` objects) into :class:`TokenStep` values, the chosen token's
text, bytes and log-probability with the alternatives offered beside it, and refuses a malformed field with a
ValueError naming it. The file importer (:mod:`trace_core.data.responses`) maps parsed responses to traces; live
recording from a server (:mod:`trace_core.record.backends.server_steps`) maps the same steps to recorded arrays, so
both read a layout, and check its numbers (:func:`~trace_core.traces.logprobs.check_logprob`), alike.

* :mod:`.steps` -- :class:`TokenStep`, :class:`Offered`, :class:`ParsedResponse`; :mod:`.fields` -- the field
  readers every parser uses; :mod:`.agreement` -- whether what a response says twice agrees (a token's bytes and
  text, a step's alternatives and chosen token, the tokens and the answer text), for both readers.
* :mod:`.openai` -- OpenAI chat.completions and legacy completions (also vLLM, TGI, Ollama and llama.cpp at ``/v1``).
* :mod:`.responses_api` -- OpenAI's Responses API (``/v1/responses``), whose text parts carry chat's ``logprobs``.
* :mod:`.llamacpp` -- llama.cpp ``/completion`` with ``n_probs``; :mod:`.ollama` -- Ollama ``/api/generate`` and
  ``/api/chat``; :mod:`.tgi` -- TGI ``/generate``; :mod:`.vllm` -- vLLM ``prompt_logprobs``.

Nothing here imports an HTTP client, torch or the dataset readers.
"""

from __future__ import annotations

from trace_core.server_shapes.steps import Offered, ParsedResponse, TokenStep

__all__ = ["Offered", "ParsedResponse", "TokenStep"]
