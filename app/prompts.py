"""The Inspect page's prompts: the "Try these" examples for the loaded model, and why a typed prompt cannot be
answered."""

from __future__ import annotations

import json
from typing import Any

from trace_core import settings

from .services import DATASETS, bundled_answers_of


def prompt_problem(prompt: str) -> str | None:
    """Why ``prompt`` cannot be answered, in one sentence, or None: empty, or longer than TRACE_MAX_PROMPT_CHARS.
    The box itself takes a paste of any length (a box with a character cap drops a longer paste silently, and the
    page then said the prompt was empty), so the limit is said here."""
    limit = settings.get("TRACE_MAX_PROMPT_CHARS")
    if not prompt.strip():
        return "The prompt is empty: type a question first."
    if len(prompt) > limit:
        return (f"The prompt is {len(prompt):,} characters; the limit is {limit:,} (TRACE_MAX_PROMPT_CHARS): shorten "
                "it.")
    return None


def _examples(name: str) -> Any:
    path = DATASETS / name
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def try_prompts(model_id: str | None = None) -> list[dict[str, Any]]:
    """The Inspect page's example prompts for the loaded model (``family``, ``prompt``, ``reference``, and the
    ``label`` of that model's own answer when the examples were recorded with it; real-model entries also carry
    their ``kind``: right, one token away or confidently wrong).

    The bundled demo model gets its own examples (its "Q: ... A:" format); any other model gets the real model's
    (``real_try_prompts.json``, from SmolLM2-135M-Instruct's validation answers), labelled only when it is that
    model, since another model's answers may differ."""
    if bundled_answers_of(model_id) == "demo":
        return _examples("try_prompts.json") or []
    real = _examples("real_try_prompts.json")
    if not real:
        return []
    if bundled_answers_of(model_id) == "real":
        return real["examples"]
    return [{k: v for k, v in e.items() if k not in ("label", "kind")} for e in real["examples"]]


def example_label(example: dict[str, Any]) -> str:
    """One "Try these" entry: the family, how the model answered it (when known) and the question's start."""
    question = example["prompt"].splitlines()[0].removeprefix("Q: ")
    question = question if len(question) <= 90 else question[:89] + "…"
    verdict = {0: "answered wrong", 1: "answered right"}.get(example.get("label", -1), "")
    kind = example.get("kind")
    if verdict and kind in ("one token away", "confidently wrong"):
        verdict += f", {kind}"
    return f"{example['family'].replace('_', ' ')}{f' ({verdict})' if verdict else ''}: {question}"
