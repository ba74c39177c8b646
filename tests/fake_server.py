"""An in-process OpenAI-compatible model server for tests, answering in vLLM's response shapes.

It runs a small local Hugging Face model with plain torch code of its own (one full forward pass per step, a full
log-softmax, argmax for greedy), independent of ``trace_core.record``, so that a server-recorded trace can be compared
with a locally recorded one. Shapes follow vLLM's completions endpoint:

* ``/v1/models``: ``{"object": "list", "data": [{"id", "object": "model", "max_model_len", ...}]}``;
* generation: ``choices[0].logprobs`` with ``tokens``, ``token_logprobs`` and ``top_logprobs``; each step's dict
  holds the sampled token first, then the top ``logprobs`` tokens, and only its first ``logprobs + 1`` entries are
  kept (so ``logprobs=-1`` keeps none, as in vLLM); keys ``"token_id:N"`` with ``return_tokens_as_token_ids``; a
  completion that stopped on EOS ends with the EOS token and ``finish_reason="stop"``;
* teacher forcing: ``choices[0].prompt_logprobs``, a list aligned with the prompt (first entry None) of
  ``{"<id>": {"logprob", "rank", "decoded_token"}}`` holding the prompt token and the top ``prompt_logprobs``
  (-1: the whole vocabulary); ``prompt_token_ids`` with ``return_token_ids``;
* chat (``/v1/chat/completions``): the messages wrapped in the tokenizer's chat template (``add_generation_prompt``,
  no added special tokens; without a template, vLLM's 400), ``choices[0].message`` and ``choices[0].logprobs.content``
  of ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``: each step's list is the
  first ``top_logprobs`` entries (-1: all) of the sampled token followed by the top ``top_logprobs`` (so a sampled
  token outside the top k pushes the k-th out, as in vLLM); ``max_completion_tokens`` over ``max_tokens``;
  ``usage.prompt_tokens`` counts the templated prompt;
* ``logprobs``/``prompt_logprobs``/``top_logprobs`` above ``max_logprobs`` are refused with vLLM's 400 message;
* ``"stream": true``: the same answer as server-sent events in a chunked body (``data: {...}`` chunks of
  ``stream_tokens`` tokens, each with its log-probabilities, finish_reason on the last; chat's first chunk carries the
  role, and a usage chunk follows with ``stream_options.include_usage``), then ``data: [DONE]``; with
  ``streams = False`` the one JSON answer instead (a server that cannot stream).

Tests can script failures and odd answers (``script``), count attempts and requests in flight, hold the first
requests at a barrier, and require an API key.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import torch
from local_server import LocalServer

from trace_core.record import http_policy


@pytest.fixture
def fast_backoff(monkeypatch):
    """Retries of the server client without their real waits (import this fixture into a test module to use it)."""
    monkeypatch.setattr(http_policy, "BACKOFF_BASE", 0.001)


@pytest.fixture
def serve():
    """serve(folder, **options) -> a running FakeServer, stopped at the end of the test."""
    servers = []

    def start(folder, **options):
        servers.append(FakeServer(folder, **options))
        return servers[-1]

    try:
        yield start
    finally:
        for s in servers:
            s.stop()


class FakeServer(LocalServer):
    """Serve ``model_dir`` as ``served_name`` on 127.0.0.1 (a free port) until :meth:`stop`."""

    def __init__(self, model_dir: Any, served_name: str = "tiny", *, max_model_len: int = 512,
                 max_logprobs: int = -1) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.vocab = int(self.model.get_output_embeddings().weight.shape[0])
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])
        self.served_name = served_name
        self.max_model_len = max_model_len
        self.max_logprobs = max_logprobs
        self.script: list[tuple] = []  # answers for the next POST requests, consumed in order
        self.fail_texts: tuple[str, ...] = ()  # a completion whose decoded prompt holds one of these: 500, always
        self.no_prompt_logprobs = False  # answer 400 to prompt_logprobs, as servers that cannot score do
        self.echo_offset = 0  # add this to the echoed prompt ids (a server that tokenizes differently)
        self.required_key: str | None = None
        self.barrier: threading.Barrier | None = None  # the first `barrier.parties` completions wait here
        self.hold_first: list[float] = []  # seconds the i-th completion request sleeps (before computing)
        self.stream_tokens = 1  # tokens per streamed chunk (``"stream": true``)
        self.stream_pause = 0.0  # seconds between streamed chunks
        self.streams = True  # False: answer ``"stream": true`` with one JSON body (a server that cannot stream)
        self.chunks_sent = 0  # streamed chunks written, over all requests
        self.lock = threading.Lock()
        self.model_lock = threading.Lock()
        self.attempts = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict] = []
        self.paths: list[str] = []  # the endpoint of each body
        self.auth_headers: list[str | None] = []
        self._start(_handler(self))

    # ------------------------------------------------------------------------------------------------------------

    def failing(self, path: str, body: dict[str, Any]) -> tuple | None:
        """The error answer for a completion request whose prompt holds one of :attr:`fail_texts` (whichever request
        of a run it is, unlike :attr:`script`), else None."""
        if not self.fail_texts or path != "/v1/completions" or not isinstance(body.get("prompt"), list):
            return None
        text = self.tokenizer.decode([int(i) for i in body["prompt"]])
        return ("error", 500, {}, "engine died") if any(t in text for t in self.fail_texts) else None

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.served_name, "object": "model", "created": 0,
                                            "owned_by": "vllm", "root": "tiny", "parent": None,
                                            "max_model_len": self.max_model_len, "permission": []}]}

    def _log_softmax(self, ids: list[int]) -> torch.Tensor:
        """log p(. | ids[:j+1]) for every position j: shape (len(ids), V), float32."""
        with self.model_lock, torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
        return torch.log_softmax(logits, dim=-1)

    def _key(self, token_id: int, as_id: bool) -> str:
        return f"token_id:{token_id}" if as_id else self.tokenizer.decode([token_id])

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("model") != self.served_name:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist.", "code": 404}}
        cap = self.vocab if self.max_logprobs == -1 else self.max_logprobs
        for name, what in (("logprobs", "sample"), ("prompt_logprobs", "prompt")):
            n = body.get(name)
            if n is not None and (self.vocab if n == -1 else n) > cap:
                n = self.vocab if n == -1 else n
                return 400, {"error": {"message": f"Requested {what} logprobs of {n}, which is greater than max "
                                                  f"allowed: {cap}", "type": "BadRequestError", "code": 400}}
        if body.get("prompt_logprobs") is not None and self.no_prompt_logprobs:
            return 400, {"error": {"message": "prompt_logprobs is not supported by this server", "code": 400}}
        prompt = [int(i) for i in body["prompt"]]
        as_id = bool(body.get("return_tokens_as_token_ids"))
        ids, lps_per_step, finish = self._generate(prompt, body)
        choice: dict[str, Any] = {"index": 0, "text": self.tokenizer.decode(ids, skip_special_tokens=True),
                                  "finish_reason": finish, "stop_reason": None, "logprobs": None,
                                  "prompt_logprobs": None, "prompt_token_ids": None}
        n = body.get("logprobs")
        if n is not None:
            choice["logprobs"] = self._sample_logprobs(ids, lps_per_step, n, as_id)
        if body.get("prompt_logprobs") is not None:
            choice["prompt_logprobs"] = self._prompt_logprobs(prompt, body["prompt_logprobs"])
        if body.get("return_token_ids"):
            choice["prompt_token_ids"] = [i + self.echo_offset for i in prompt]
            choice["token_ids"] = ids
        return 200, {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": self.served_name,
                     "choices": [choice], "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                                                    "total_tokens": len(prompt) + len(ids)}}

    def chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("model") != self.served_name:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist.", "code": 404}}
        k = body.get("top_logprobs") or 0
        if k and not body.get("logprobs"):
            return 400, {"error": {"message": "when using `top_logprobs`, `logprobs` must be set to true.",
                                   "type": "BadRequestError", "code": 400}}
        cap = self.vocab if self.max_logprobs == -1 else self.max_logprobs
        n = (self.vocab if k == -1 else k) if body.get("logprobs") else 0
        if n > cap:
            return 400, {"error": {"message": f"Requested sample logprobs of {n}, which is greater than max "
                                              f"allowed: {cap}", "type": "BadRequestError", "code": 400}}
        if not getattr(self.tokenizer, "chat_template", None):
            return 400, {"error": {"message": "As of transformers v4.44, default chat template is no longer allowed, "
                                              "so you must provide a chat template if the tokenizer does not define "
                                              "one.", "type": "BadRequestError", "code": 400}}
        text = self.tokenizer.apply_chat_template(body["messages"], tokenize=False,
                                                  add_generation_prompt=body.get("add_generation_prompt", True))
        prompt = self.tokenizer(text, add_special_tokens=bool(body.get("add_special_tokens", False)))["input_ids"]
        limit = body.get("max_completion_tokens")
        ids, lps_per_step, finish = self._generate(prompt, dict(body, max_tokens=limit if limit is not None
                                                                  else body.get("max_tokens", 16)))
        logprobs = None
        if body.get("logprobs"):
            logprobs = {"content": self._chat_logprobs(ids, lps_per_step, k,
                                                       bool(body.get("return_tokens_as_token_ids")))}
        message = {"role": "assistant", "content": self.tokenizer.decode(ids, skip_special_tokens=True),
                   "refusal": None, "annotations": None, "audio": None, "function_call": None, "reasoning": None}
        choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish,
                  "stop_reason": None, "token_ids": None, "routed_experts": None}
        return 200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": self.served_name,
                     "choices": [choice], "service_tier": None, "system_fingerprint": None,
                     "usage": {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(ids),
                               "completion_tokens": len(ids), "prompt_tokens_details": None},
                     "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None}

    def stream_events(self, path: str, body: dict[str, Any], payload: dict[str, Any]) -> list[dict[str, Any]]:
        """The answer ``payload`` as vLLM streams it: chunks of ``stream_tokens`` tokens with their log-probabilities,
        the last carrying finish_reason; through chat a first chunk with the role, and a usage chunk when
        ``stream_options.include_usage``."""
        choice = payload["choices"][0]
        base = {"id": payload["id"], "created": 0, "model": self.served_name}
        step = max(1, self.stream_tokens)
        events: list[dict[str, Any]] = []
        if path == "/v1/chat/completions":
            base["object"] = "chat.completion.chunk"
            events.append(dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                               "logprobs": None, "finish_reason": None}]))
            content = (choice["logprobs"] or {}).get("content") or []
            for start in range(0, len(content), step):
                part = content[start:start + step]
                last = start + step >= len(content)
                text = "".join(bytes(e["bytes"]).decode("utf-8", "replace") for e in part)
                events.append(dict(base, choices=[{
                    "index": 0, "delta": {"content": text}, "logprobs": {"content": part},
                    "finish_reason": choice["finish_reason"] if last else None,
                    **({"stop_reason": choice["stop_reason"]} if last else {})}]))
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append(dict(base, choices=[], usage=payload["usage"]))
            return events
        base["object"] = "text_completion"
        logprobs = choice["logprobs"]
        n = len(logprobs["tokens"])
        for start in range(0, n, step):
            last = start + step >= n
            part = {name: logprobs[name][start:start + step]
                    for name in ("text_offset", "token_logprobs", "tokens", "top_logprobs")}
            events.append(dict(base, choices=[{"index": 0, "text": "".join(part["tokens"]), "logprobs": part,
                                               "finish_reason": choice["finish_reason"] if last else None,
                                               "stop_reason": choice["stop_reason"] if last else None}]))
        return events

    def _chat_logprobs(self, ids: list[int], steps: list[torch.Tensor], k: int, as_id: bool) -> list[dict]:
        content = []
        width = self.vocab if k == -1 else k
        for token, lp in zip(ids, steps, strict=True):
            entries = {token: float(lp[token])}  # the sampled token first, then the top ones
            if width:
                values, order = torch.topk(lp, k=min(width, self.vocab))
                for v, i in zip(values.tolist(), order.tolist(), strict=True):
                    entries.setdefault(int(i), float(v))
            # vLLM's chat endpoint keeps the entries i < top_logprobs (-1: all).
            kept = [(i, v) for j, (i, v) in enumerate(entries.items()) if k == -1 or j < k]
            top = []
            for i, v in kept:
                key = self._key(i, as_id)
                top.append({"token": key, "logprob": max(v, -9999.0), "bytes": list(key.encode("utf-8"))})
            decoded = self.tokenizer.decode([token])
            content.append({"token": self._key(token, as_id), "logprob": max(float(lp[token]), -9999.0),
                            "bytes": list(decoded.encode("utf-8")), "top_logprobs": top})
        return content

    def _generate(self, prompt: list[int], body: dict[str, Any]) -> tuple[list[int], list[torch.Tensor], str]:
        temperature = float(body.get("temperature", 1.0))
        generator = torch.Generator().manual_seed(int(body["seed"])) if "seed" in body else torch.Generator()
        seq, out, steps = list(prompt), [], []
        for _ in range(int(body.get("max_tokens", 16))):
            lp = self._log_softmax(seq)[-1]
            if temperature == 0:
                token = int(torch.argmax(lp))
            else:
                token = int(torch.multinomial(torch.softmax(lp / temperature, dim=-1), 1, generator=generator))
            out.append(token)
            steps.append(lp)
            seq.append(token)
            if token in self.eos:
                return out, steps, "stop"
        return out, steps, "length"

    def _sample_logprobs(self, ids: list[int], steps: list[torch.Tensor], n: int, as_id: bool) -> dict[str, Any]:
        tokens, token_lps, tops = [], [], []
        width = self.vocab if n == -1 else n  # vLLM's engine reads -1 as the whole vocabulary ...
        for token, lp in zip(ids, steps, strict=True):
            values, order = torch.topk(lp, k=min(width, self.vocab))
            entries = {token: float(lp[token])}  # the sampled token first, then the top ones
            for v, i in zip(values.tolist(), order.tolist(), strict=True):
                entries.setdefault(int(i), float(v))
            # ... but its completions endpoint keeps the entries i with n >= i: -1 keeps none.
            kept = {self._key(i, as_id): max(v, -9999.0) for j, (i, v) in enumerate(entries.items()) if n >= j}
            tokens.append(self._key(token, as_id))
            token_lps.append(max(float(lp[token]), -9999.0))
            tops.append(kept)
        return {"text_offset": list(range(len(ids))), "token_logprobs": token_lps, "tokens": tokens,
                "top_logprobs": tops}

    def _prompt_logprobs(self, prompt: list[int], n: int) -> list[Any]:
        lp = self._log_softmax(prompt)
        width = self.vocab if n == -1 else n
        out: list[Any] = [None]
        for j in range(1, len(prompt)):
            row = lp[j - 1]
            token = prompt[j]
            rank = int((row >= row[token]).sum())  # vLLM counts the tokens at least as likely
            entries = {str(token): {"logprob": float(row[token]), "rank": rank,
                                    "decoded_token": self.tokenizer.decode([token])}}
            if width:
                values, order = torch.topk(row, k=min(width, self.vocab))
                for r, (v, i) in enumerate(zip(values.tolist(), order.tolist(), strict=True), start=1):
                    entries.setdefault(str(int(i)), {"logprob": float(v), "rank": r,
                                                     "decoded_token": self.tokenizer.decode([int(i)])})
            out.append(entries)
        return out


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, events: list[dict[str, Any]]) -> None:
            """Server-sent events in a chunked body, as vLLM (uvicorn) sends them, then ``data: [DONE]``."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"]:
                    data = event.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    with server.lock:
                        server.chunks_sent += 1
                    if server.stream_pause:
                        time.sleep(server.stream_pause)
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError, OSError):
                self.close_connection = True  # the client left (it stopped reading)

        def _authorised(self) -> bool:
            header = self.headers.get("Authorization")
            with server.lock:
                server.auth_headers.append(header)
            if server.required_key is not None and header != f"Bearer {server.required_key}":
                self._send(401, {"error": {"message": "Unauthorized", "code": 401}})
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if not self._authorised():
                return
            if self.path == "/v1/models":
                self._send(200, server.models())
            else:
                self._send(404, {"error": {"message": "Not Found", "code": 404}})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if not self._authorised():
                return
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self._send(404, {"error": {"message": "Not Found", "code": 404}})
                return
            with server.lock:
                server.attempts += 1
                order = server.attempts - 1
                server.bodies.append(body)
                server.paths.append(self.path)
                action = server.script.pop(0) if server.script else server.failing(self.path, body)
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            counted = True
            try:
                if action is not None:
                    if action[0] == "drop":  # close the connection without an answer
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    if action[0] == "reply":  # a scripted 200 answer
                        self._send(200, action[1])
                        return
                    _, status, headers, message = action
                    self._send(status, {"error": {"message": message, "type": "Error", "code": status}}, headers)
                    return
                if server.barrier is not None and order < server.barrier.parties:
                    server.barrier.wait(timeout=30)
                if order < len(server.hold_first):
                    time.sleep(server.hold_first[order])
                status, payload = (server.chat(body) if self.path == "/v1/chat/completions"
                                   else server.complete(body))
                # Out of flight before the reply is written: the client may send its next request as soon as it
                # reads this one, and counting both at once would be this server's lag, not the client's.
                with server.lock:
                    server.in_flight -= 1
                counted = False
                if status == 200 and body.get("stream") and server.streams:
                    self._stream(server.stream_events(self.path, body, payload))
                    return
                self._send(status, payload)
            finally:
                if counted:
                    with server.lock:
                        server.in_flight -= 1

    return Handler
