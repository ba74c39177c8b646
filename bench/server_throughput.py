"""Scoring answers through a vLLM server vs the local backend, and the response bytes of top-k vs full log-probs.

    python -m bench.server_throughput [--answers 1000] [--concurrency 1 4 16] [--full-answers 100] [--vllm-python PATH]

Builds a tiny random-weight GPT-2 (vocabulary ~400) with ``save_pretrained``, starts a vLLM server on it (a real
``vllm.entrypoints.openai.api_server`` on a free loopback port, from the vLLM environment given by ``--vllm-python``
or ``TRACE_VLLM_PYTHON``; ``make test-engine`` builds one), then, in the same run:

* scores the same (prompt, answer) pairs with ``score_answers`` on ``load_model`` of the folder (the baseline) and
  through ``connect_server`` (top-20) at each concurrency, then at the highest one with ``score_answers``' default
  batch of 8 (a batch's requests end before the next batch starts) and with the full distribution (on the first
  ``--full-answers`` pairs): answers per second, the ratio server / local, and the largest surprisal difference;
* sends the same completions request with ``logprobs=20`` and with ``logprobs=-1`` (every token of the vocabulary)
  and prints the response bytes per generated token of each.

Without a vLLM environment it prints one line saying so and returns. The helpers that build the model and start
and stop the server are shared with ``tests/engine``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERVED_NAME = "tiny"
MAX_MODEL_LEN = 256

# The training text and chat template of the tiny models (tests/conftest.py uses them too): a byte-level BPE with
# real merges.
CORPUS = [
    "Q: What is 12 plus 7? A: 19",
    "Q: What is the capital of France? A: Paris",
    "The quick brown fox jumps over the lazy dog.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000",
    "Unicode: café naïve 日本語 emoji 🙂 done.",
    "Line one\nLine two\n\tTabbed <b>bold</b> $x$ :red[alert]",
] * 20

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# ---------------------------------------------------------------------------------------------------------------------
# The tiny model and the vLLM server (shared with tests/engine)


def save_tiny_gpt2(folder: str | Path, *, vocab_size: int = 400, n_positions: int = MAX_MODEL_LEN,
                   seed: int = 0) -> Path:
    """Save a random-weight GPT-2 and its byte-level BPE tokenizer (with a chat template) into `folder`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(seed)
    # head size 32: vLLM's CPU attention supports 32, 64, 80, ... (not the 16 of the tests' 32 x 2 heads)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=64, n_layer=2, n_head=2,
                        initializer_range=0.3, bos_token_id=tokenizer.eos_token_id,
                        eos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    folder = Path(folder)
    model.save_pretrained(folder)  # safetensors
    tokenizer.save_pretrained(folder)
    return folder


def vllm_python_from_env() -> str:
    from trace_core import settings

    return settings.get("TRACE_VLLM_PYTHON").strip()


def vllm_unavailable(python: str) -> str | None:
    """Why `python` cannot start a vLLM server (None when it can)."""
    if not python:
        return "TRACE_VLLM_PYTHON is not set (`make test-engine` builds a vLLM environment and sets it)"
    if not Path(python).is_file():
        return f"TRACE_VLLM_PYTHON={python} does not exist"
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        found = subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"TRACE_VLLM_PYTHON={python} does not run: {exc}"
    return None if found else f"vllm is not installed for TRACE_VLLM_PYTHON={python}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_server(command: list[str], port: int, log_path: Path, healthy: Callable[[str], bool], *, name: str,
                 timeout: float, poll: float, grace: float, env: dict[str, str] | None = None,
                 ) -> tuple[subprocess.Popen, str]:
    """Run the server `command` (listening on 127.0.0.1:`port`) in its own process group, its output in `log_path`;
    return it and its base URL once ``healthy(url)`` is true (an OSError or ValueError from it counts as not yet),
    asking every `poll` seconds. Raises RuntimeError with the server's last log lines if it exits or is not healthy
    within `timeout` seconds, after stopping it (:func:`stop_process_group` with `grace`)."""
    with log_path.open("w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}:\n{_tail(log_path)}")
            with contextlib.suppress(OSError, ValueError):
                if healthy(url):
                    return proc, url
            time.sleep(poll)
        raise RuntimeError(f"{name} did not answer /health within {timeout:.0f} s:\n{_tail(log_path)}")
    except BaseException:
        stop_process_group(proc, grace=grace)
        raise


def _vllm_healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
        return response.status == 200


_VLLM_GRACE = 30.0  # seconds the server and its engine processes get to end after SIGTERM


def start_vllm(python: str, model_dir: str | Path, log_path: Path, *, timeout: float = 360.0,
               extra_args: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """Start a vLLM OpenAI-compatible server on `model_dir` (its own process group); return it and its base URL
    once ``/health`` answers. Raises RuntimeError with the server's last log lines if it exits or times out."""
    port = _free_port()
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
               "--max-logprobs", "-1", "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32", *extra_args]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1"}
    return start_server(command, port, log_path, _vllm_healthy, name="the vLLM server", timeout=timeout, poll=2.0,
                        grace=_VLLM_GRACE, env=env)


def stop_vllm(proc: subprocess.Popen) -> None:
    """Stop the server and every process it started (its engine runs in child processes of the same group)."""
    stop_process_group(proc, grace=_VLLM_GRACE)


def stop_process_group(proc: subprocess.Popen, *, grace: float) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL it if it has not ended within ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # children that outlived the leader
        os.killpg(proc.pid, signal.SIGKILL)


def post_json(url: str, body: dict[str, Any], timeout: float = 120.0) -> bytes:
    """POST `body` as JSON; the raw response bytes (so that sizes are what went over the wire, before parsing)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


# ---------------------------------------------------------------------------------------------------------------------
# The benchmark


def _pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Prompts of 4-16 words and answers of 4-40 words from the corpus' words: lengths vary, all fit 256 tokens."""
    import numpy as np

    words = sorted({w for line in CORPUS for w in line.split()})
    rng = np.random.default_rng(seed)
    text = lambda m: " ".join(rng.choice(words, m))  # noqa: E731
    return [(text(int(rng.integers(4, 17))), " " + text(int(rng.integers(4, 41)))) for _ in range(n)]


def _timed(fn) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _score_rows(url: str, folder: Path, pairs: list[tuple[str, str]], args: argparse.Namespace) -> None:
    """Answers/s of local scoring and of server scoring at each concurrency, and the largest |Δ surprisal|."""
    import numpy as np

    from trace_core import load_model, score_answers
    from trace_core.record import connect_server

    prompts, answers = [p for p, _ in pairs], [a for _, a in pairs]
    lm = load_model(folder, device="cpu")
    score_answers(lm, prompts[:16], answers[:16])  # warm-up
    local_s, reference = _timed(lambda: score_answers(lm, prompts, answers, batch_size=args.local_batch))
    n_tokens = sum(len(t) for t in reference)
    local_rate = len(pairs) / local_s
    print(f"{len(pairs):,} answers ({n_tokens:,} tokens); local: score_answers, batch {args.local_batch}; server: "
          f"score_answers through prompt_logprobs, batch {args.server_batch} (answers per call; at most that many "
          "requests in flight)")
    print(f"{'backend':<36} {'seconds':>8} {'answers/s':>10} {'vs local':>9} {'max |Δs|':>9}")
    print(f"{'local (torch, ' + str(args.threads) + ' threads)':<36} {local_s:>8.2f} {local_rate:>10.1f} "
          f"{1.0:>9.2f} {'':>9}")
    top = max(args.concurrency)
    runs = [(c, False, args.server_batch) for c in args.concurrency]
    runs += [(top, False, 8), (top, True, args.server_batch)]  # the default batch; every log-probability
    for concurrency, full, batch in runs:
        sm = connect_server(url, SERVED_NAME, tokenizer=str(folder), api_key_env=None, concurrency=concurrency,
                            top_logprobs=20, full_distribution=full, timeout=300)
        n = min(len(pairs), args.full_answers) if full else len(pairs)  # the full distribution is slow: fewer
        score_answers(sm, prompts[:concurrency], answers[:concurrency])  # warm-up
        seconds, traces = _timed(functools.partial(score_answers, sm, prompts[:n], answers[:n], batch_size=batch))
        diff = max(float(np.max(np.abs(a.surprisal - b.surprisal), initial=0.0))
                   for a, b in zip(traces, reference, strict=True))
        label = f"server c={concurrency} " + (f"full distribution ({n})" if full else "top-20")
        label += f", batch {batch}" if batch != args.server_batch else ""
        rate = n / seconds
        print(f"{label:<36} {seconds:>8.2f} {rate:>10.1f} {rate / local_rate:>9.2f} {diff:>9.1e}")


def _bytes_rows(url: str, folder: Path, pairs: list[tuple[str, str]], args: argparse.Namespace) -> None:
    """Response bytes per token of the same requests with the top-20 and with every log-probability."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocab = len(tokenizer)
    sample = pairs[:args.byte_requests]
    ids = [(tokenizer(p, add_special_tokens=False)["input_ids"], tokenizer(a, add_special_tokens=False)["input_ids"])
           for p, a in sample]
    common = {"model": SERVED_NAME, "temperature": 0.0, "return_tokens_as_token_ids": True}
    print(f"\nresponse bytes per token, {len(sample)} requests each (vocabulary V = {vocab})")
    print(f"{'request':<42} {'tokens':>7} {'bytes/token':>12} {'vs top-20':>10} {'bytes/entry':>12}")
    for kind in ("generation: logprobs", "scoring: prompt_logprobs"):
        base = None
        for k in (20, -1):
            total, tokens = 0, 0
            for prompt, answer in ids:
                if kind.startswith("generation"):
                    body = {**common, "prompt": prompt, "max_tokens": args.new_tokens, "logprobs": k,
                            "ignore_eos": True}
                    raw = post_json(f"{url}/v1/completions", body)
                    tokens += json.loads(raw)["usage"]["completion_tokens"]
                else:
                    body = {**common, "prompt": prompt + answer, "max_tokens": 1, "prompt_logprobs": k}
                    raw = post_json(f"{url}/v1/completions", body)
                    tokens += len(prompt + answer) - 1  # every prompt token but the first has an entry
                total += len(raw)
            per_token = total / tokens
            base = base or per_token
            entries = vocab if k == -1 else k
            label = f"{kind}={k}" + (" (full)" if k == -1 else "")
            print(f"{label:<42} {tokens:>7,} {per_token:>12,.0f} {per_token / base:>10.1f} "
                  f"{per_token / entries:>12.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--local-batch", type=int, default=16, help="answers per forward pass of the local backend")
    parser.add_argument("--server-batch", type=int, default=64,
                        help="answers per score_answers batch through the server (bounds the requests in flight)")
    parser.add_argument("--full-answers", type=int, default=100,
                        help="answers scored with the full distribution (the slowest row)")
    parser.add_argument("--byte-requests", type=int, default=8, help="requests per row of the bytes table")
    parser.add_argument("--new-tokens", type=int, default=32, help="generated tokens per request of the bytes table")
    parser.add_argument("--vllm-python", default=vllm_python_from_env(),
                        help="the Python of an environment with vLLM (default: TRACE_VLLM_PYTHON)")
    parser.add_argument("--start-timeout", type=float, default=360.0, help="seconds to wait for the server")
    args = parser.parse_args(argv)
    reason = vllm_unavailable(args.vllm_python)
    if reason:
        print(f"server_throughput skipped: {reason}")
        return

    import torch

    args.threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="bench-served-") as tmp:
        folder = save_tiny_gpt2(Path(tmp) / "model")
        proc, url = start_vllm(args.vllm_python, folder, Path(tmp) / "server.log", timeout=args.start_timeout)
        try:
            pairs = _pairs(args.answers)
            _score_rows(url, folder, pairs, args)
            _bytes_rows(url, folder, pairs, args)
        finally:
            stop_vllm(proc)


if __name__ == "__main__":
    main()
