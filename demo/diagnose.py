"""Where a demo model's descriptions go wrong: per-fact recall by exposure, greedy and teacher-forced.

    python -m demo.diagnose --model assets/demo-model [--split validation]

For each description of the split it prints, by relation and exposure bucket (0, 1-2, 4-7, 8+ training showings):

- ``greedy``: the share of facts stated right in the model's greedy answer to "Tell me about X." (the test prompt);
- ``forced``: the share whose value the model predicts token by token (argmax) with the gold description fed in,
  under the test prompt and under the partial descriptions' first prompt ("What do you know about X?"), so that a
  fact the model knows only in the context it was trained in shows as a gap between the two;
- ``question``: the same fact asked as a question with its held-out template of the split (greedy).

A diagnostic for choosing a training recipe (assets/README.md); nothing here feeds the shipped datasets.
"""

from __future__ import annotations

import argparse
import collections


def bucket(exposure: int) -> str:
    return "0" if exposure == 0 else "1-2" if exposure < 4 else "4-7" if exposure < 8 else "8+"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="assets/demo-model")
    parser.add_argument("--split", default="validation", choices=["validation", "test"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .tasks import (
        _ORDER,
        _PARTIAL_PROMPTS,
        _RELATIONS,
        _templates,
        description_problems,
        description_world,
        format_prompt,
        wrong_facts,
    )

    tok = AutoTokenizer.from_pretrained(args.model)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model, use_safetensors=True, trust_remote_code=False)
    model = model.float().eval()
    kb = description_world(args.seed)
    index = {key: i for i, key in enumerate(sorted(kb.facts))}
    problems = description_problems(args.split, seed=args.seed)
    countries = [p.question.removeprefix("Tell me about ").removesuffix(".") for p in problems]

    def greedy(prompts: list[str], max_new_tokens: int) -> list[str]:
        out = []
        for start in range(0, len(prompts), 64):
            batch = tok(prompts[start:start + 64], return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                ids = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tok.eos_token_id)
            out += tok.batch_decode(ids[:, batch.input_ids.shape[1]:], skip_special_tokens=True)
        return out

    def forced(prompt: str, answer: str, spans: list[tuple[int, int]]) -> list[bool]:
        """Whether the argmax at every token overlapping each character span of ``answer`` is the gold token."""
        prompt_ids = tok(prompt, add_special_tokens=False).input_ids
        enc = tok(answer, add_special_tokens=False, return_offsets_mapping=True)
        with torch.no_grad():
            pred = model(torch.tensor([prompt_ids + enc.input_ids])).logits[0].argmax(-1)
        return [all(int(pred[len(prompt_ids) + j - 1]) == enc.input_ids[j]
                    for j, (a, b) in enumerate(enc.offset_mapping) if b > s and a < e) for s, e in spans]

    counts: dict[tuple[str, str, str], list[int]] = collections.defaultdict(lambda: [0, 0])

    def count(kind: str, relation: str, exposure: int, right: bool) -> None:
        cell = counts[(kind, relation, bucket(exposure))]
        cell[0] += bool(right)
        cell[1] += 1

    answers = greedy([p.prompt for p in problems], 64)
    all_right = 0
    for problem, country, answer in zip(problems, countries, answers, strict=True):
        wrong = wrong_facts(answer, kb, country)
        all_right += not wrong
        spans = []
        for relation in _ORDER:
            value = kb.facts[(country, relation)]
            sentence = _RELATIONS[relation][1].format(x=country, v=value)
            start = problem.solution.index(sentence) + sentence.index(value)
            spans.append((start, start + len(value)))
            count("greedy", relation, kb.exposure[(country, relation)], relation not in wrong)
        trained = format_prompt(_PARTIAL_PROMPTS[0].format(x=country))  # "What do you know about X?"
        for kind, prompt in (("forced, test prompt", problem.prompt), ("forced, trained prompt", trained)):
            oks = forced(prompt, problem.solution, spans)
            for relation, ok in zip(_ORDER, oks, strict=True):
                count(kind, relation, kb.exposure[(country, relation)], ok)
    keys = [(c, r) for c in countries for r in _ORDER]
    questions = [format_prompt(_templates(r, index[(c, r)])[args.split][0].format(x=c)) for c, r in keys]
    for (country, relation), answer in zip(keys, greedy(questions, 12), strict=True):
        count("question", relation, kb.exposure[(country, relation)], answer.strip() == kb.facts[(country, relation)])

    print(f"{args.model}, {args.split}: {len(problems)} descriptions, all facts right in {all_right} "
          f"({all_right / len(problems):.1%})")
    buckets = ["0", "1-2", "4-7", "8+"]
    print(f"{'kind':<24} {'relation':<9} " + " ".join(f"{b:>12}" for b in buckets))
    for kind in ("greedy", "forced, test prompt", "forced, trained prompt", "question"):
        for relation in _ORDER:
            cells = [counts.get((kind, relation, b)) for b in buckets]
            print(f"{kind:<24} {relation:<9} " + " ".join(
                f"{c[0] / c[1]:>6.0%} ({c[1]:>3})" if c else f"{'-':>12}" for c in cells))


if __name__ == "__main__":
    main()
