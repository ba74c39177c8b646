"""Record real vLLM responses of the tiny random-weight test model into tests/data/responses/ (run once, by hand).

    TRACE_VLLM_PYTHON=PATH python tests/engine/record_fixtures.py [--out tests/data/responses] [--only NAME ...]

Builds the engine tests' tiny GPT-2 (random weights: the responses hold no third-party model output), starts a vLLM
server on it and saves four responses, pretty-printed, for the importer tests (``--only``: just those named):

* ``vllm_completions.json``: ``/v1/completions`` with ``logprobs: 5`` and ``return_tokens_as_token_ids: true``;
* ``vllm_chat.json``: ``/v1/chat/completions`` with ``logprobs: true, top_logprobs: 5`` (the tokenizer's chat
  template);
* ``vllm_prompt_logprobs.json``: ``/v1/completions`` of a prompt followed by its answer with ``prompt_logprobs: 5``
  (the answer's tokens are the last ones of ``prompt_token_ids``).
* ``vllm_responses.json``: ``/v1/responses`` (OpenAI's Responses API) with ``top_logprobs: 5`` and
  ``include: ["message.output_text.logprobs"]``.

The requests are saved too, in ``vllm_requests.json`` (file name -> endpoint and body), so that each response
can be read with what asked for it. Greedy decoding: recording again gives the same tokens and numbers (ids and
``created`` times differ).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from recording import ROOT, record

import bench.server_throughput as bench

PROMPT = "Q: What is the capital of France? A:"
ANSWER = " Paris is the capital."


def requests_for(model_dir: Path) -> dict[str, tuple[str, dict]]:
    """File name -> (endpoint, request body)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt_ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(ANSWER, add_special_tokens=False)["input_ids"]
    common = {"model": bench.SERVED_NAME, "temperature": 0.0, "seed": 0}
    return {
        "vllm_completions.json": ("/v1/completions", {
            **common, "prompt": prompt_ids, "max_tokens": 8, "logprobs": 5, "return_tokens_as_token_ids": True}),
        "vllm_chat.json": ("/v1/chat/completions", {
            **common, "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 8,
            "logprobs": True, "top_logprobs": 5}),
        "vllm_prompt_logprobs.json": ("/v1/completions", {
            **common, "prompt": prompt_ids + answer_ids, "max_tokens": 1, "prompt_logprobs": 5,
            "return_tokens_as_token_ids": True, "return_token_ids": True}),
        "vllm_responses.json": ("/v1/responses", {
            "model": bench.SERVED_NAME, "temperature": 0.0, "input": "What is the capital of France?",
            "max_output_tokens": 8, "top_logprobs": 5, "include": ["message.output_text.logprobs"]}),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "responses")
    parser.add_argument("--vllm-python", default=bench.vllm_python_from_env())
    parser.add_argument("--only", nargs="+", metavar="NAME", help="record only these responses (file names)")
    args = parser.parse_args(argv)
    reason = bench.vllm_unavailable(args.vllm_python)
    if reason:
        raise SystemExit(f"cannot record: {reason}")
    with tempfile.TemporaryDirectory(prefix="tiny-gpt2-") as tmp:
        model_dir = bench.save_tiny_gpt2(Path(tmp) / "model")
        proc, url = bench.start_vllm(args.vllm_python, model_dir, Path(tmp) / "server.log")
        try:
            asked = requests_for(model_dir)
            unknown = sorted(set(args.only or ()) - set(asked))
            if unknown:
                raise SystemExit(f"--only: no response named {', '.join(unknown)}; known: {', '.join(asked)}")
            record(url, {k: v for k, v in asked.items() if not args.only or k in args.only}, args.out,
                   "vllm_requests.json")
        finally:
            bench.stop_vllm(proc)


if __name__ == "__main__":
    main()
