"""The Inspect page's "Try these" examples for the real model, picked from its validation answers (never test).

    python -m demo.real_examples [--data assets/datasets/real_validation.csv]
                                 [--out assets/datasets/real_try_prompts.json]

Three kinds, each entry with the model's label of its greedy answer (``demo/build_real.py`` records and labels them):

``right``
    A right answer: per family, the one with the highest TRACE confidence.
``one token away``
    A wrong answer whose first wrong token (the dataset's ``first_wrong_token``) had, among the model's top-5
    alternatives, one that continues the right value: put in the wrong token's place, the answer follows an accepted
    form past the point where it departed ("17 + 25 = 32": the alternative "4" at the "3"). Per family, the one
    where that alternative had the highest probability.
``confidently wrong``
    A wrong answer with the highest TRACE confidence of its family (the model was sure, and wrong).

At most one entry of each kind per family, in the order of :data:`demo.real_tasks.FAMILIES`. The file names the model
whose answers these are, so the page shows the labels only when that model is loaded.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "assets" / "datasets" / "real_validation.csv"
OUT = ROOT / "assets" / "datasets" / "real_try_prompts.json"
KINDS = ("right", "one token away", "confidently wrong")


def _forms(row) -> list[str]:
    """The accepted texts of the row's answer: the number, the short fact's forms, or every form of both asked facts
    (a country_facts reference reads "capital = A / B | language = C")."""
    reference = str(row["reference"])
    if row["family"] == "country_facts":
        return [f.strip() for part in reference.split("|") for f in part.split("=", 1)[1].split("/") if f.strip()]
    return [f.strip() for f in reference.split("||") if f.strip()]


def continues_right(answer: str, start: int, position: int, alternative: str, forms: Sequence[str]) -> bool:
    """Whether ``alternative``, put in place of the token that starts at ``start`` of ``answer``, continues an
    accepted form past ``position`` (the first wrong character): some form agrees, case-insensitively, with the ``k``
    characters of the answer just before ``position``, and the changed text from there agrees with the form for more
    than ``k`` characters (or spells it whole)."""
    changed = answer[:start] + alternative
    for form in forms:
        f = form.casefold()
        for k in range(min(len(f), position), -1, -1):
            if answer[position - k:position].casefold() != f[:k]:
                continue
            segment = changed[position - k:].casefold()
            n = 0
            while n < len(segment) and n < len(f) and segment[n] == f[n]:
                n += 1
            if n > k and (n == len(segment) or n == len(f)):
                return True
    return False


def one_token_away(trace, row) -> float | None:
    """The probability of the best alternative at the first wrong token that continues the right value, or None."""
    if trace.top_tokens is None or pd.isna(row["first_wrong_token"]) or pd.isna(row["first_wrong_char"]):
        return None
    token, position = int(row["first_wrong_token"]), int(row["first_wrong_char"])
    start = sum(len(t) for t in trace.tokens[:token])
    best = None
    for text, logprob, alt_id in zip(trace.top_tokens[token], trace.top_logprobs[token], trace.top_ids[token],
                                     strict=True):
        if alt_id == trace.token_ids[token] or not text:
            continue
        if continues_right(trace.answer, start, position, text, _forms(row)):
            best = max(best or 0.0, float(math.exp(logprob)))
    return best


def pick(path: Path = DATA) -> dict:
    """The examples of the real model's validation file at ``path``."""
    from trace_core import explain_trace, read_dataset

    from .real_tasks import FAMILIES

    data = read_dataset(path)
    frame = data.frame
    confidence = [explain_trace(t).confidence if t is not None and len(t) else float("nan") for t in data.traces]
    frame = frame.assign(confidence=confidence, **{c: pd.to_numeric(frame[c], errors="coerce")
                                                   for c in ("first_wrong_token", "first_wrong_char")})
    examples = []
    for family in FAMILIES:
        group = frame[frame["family"] == family]
        right = group[group["label"] == 1].sort_values("confidence", ascending=False, kind="stable")
        wrong = group[group["label"] == 0]
        near = [(p, i) for i in wrong.index if (p := one_token_away(data.traces[i], frame.loc[i])) is not None]
        chosen = {"right": right.index[0] if len(right) else None,
                  "one token away": max(near)[1] if near else None,
                  "confidently wrong": wrong.sort_values("confidence", ascending=False, kind="stable").index[0]
                  if len(wrong) else None}
        seen = set()
        for kind in KINDS:
            i = chosen[kind]
            if i is None or i in seen:
                continue
            seen.add(i)
            row = frame.loc[i]
            examples.append({"prompt": str(row["prompt"]), "family": family, "kind": kind,
                             "reference": str(row["reference"]), "label": int(row["label"]),
                             "answer": str(row["answer"]), "confidence": round(float(row["confidence"]), 4)})
    return {"model": str(data.traces[0].metadata.model_id), "source": path.name, "examples": examples}


def write(picked: dict, path: Path) -> None:
    """``picked`` (from :func:`pick`) as the JSON file the Inspect page reads."""
    path.write_text(json.dumps(picked, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    picked = pick(args.data)
    write(picked, args.out)
    for e in picked["examples"]:
        print(f"{e['family']:<14} {e['kind']:<18} conf {e['confidence']:.3f}  {e['prompt'][:60]!r} -> "
              f"{e['answer'][:80]!r}")
    print(f"{len(picked['examples'])} examples -> {args.out}")


if __name__ == "__main__":
    main()
