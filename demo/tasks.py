"""Deterministic task generators for the demo model: arithmetic word problems and factual recall.

``arithmetic``
    SVAMP-like word problems: one step (a + b, a - b) and two steps (a + b - c, a + b + c) with a two-digit ``a`` and
    one-digit ``b`` and ``c``, so carries and borrows are common (47 + 8 = 55, 52 - 7 = 45). A problem belongs to the
    train, validation or test split by a hash of its numbers and template, so the splits are disjoint.
``facts``
    TriviaQA-like questions about an invented world (countries with a capital, a founding year and a leader), so no
    real-world knowledge is involved. Facts are shown in training with a long-tailed frequency: some many times, some
    once or twice, some never, so the model knows some well, some weakly and some not at all. Each relation has five
    question templates; a fact is trained with three of them and asked with the other two in validation and test
    (every template is trained on for other facts), so no validation or test question appears verbatim in training.

Prompts are ``"Q: <question>\\nA:"`` and answers ``" <answer>"``.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FAMILIES", "LONG_FAMILIES", "KnowledgeBase", "Problem", "arithmetic_problems", "description_problems",
           "description_world", "describe", "draw_distinct", "fact_problems", "format_prompt", "long_training_pairs",
           "training_pairs", "training_texts", "worked_problems", "worked_solution", "wrong_facts"]

FAMILIES = ("arithmetic", "facts")
LONG_FAMILIES = ("worked_arithmetic", "descriptions")

_NAMES = ["Ana", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Milo", "Nia",
          "Omar", "Pia", "Ravi", "Sara", "Tom", "Uma"]
_ITEMS = ["apples", "books", "coins", "shells", "stamps", "marbles", "cards", "pencils", "stickers", "beads"]
_SYLLABLES = ["ba", "ce", "di", "fo", "ga", "hu", "ki", "lo", "ma", "ne", "pi", "qua", "ro", "su", "ta", "vi",
              "wo", "xe", "ya", "zo", "bri", "dra", "fen", "gol", "mir", "nor", "pel", "ran", "sel", "tor"]


@dataclass(frozen=True)
class Problem:
    """One question with its gold answer."""

    family: str
    question: str
    answer: str
    split: str
    detail: str = ""  # e.g. "one-step", "two-step", or the fact's exposure count
    solution: str = ""  # the gold answer text in full, when the answer is long (the label may check less of it)

    @property
    def prompt(self) -> str:
        return format_prompt(self.question)


def format_prompt(question: str) -> str:
    return f"Q: {question}\nA:"


def _split_of(key: str) -> str:
    bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


_ONE_STEP = [
    ("add", "{n} has {a} {item}. {n} buys {b} more. How many {item} does {n} have now?"),
    ("add", "There are {a} {item} in a bag and {b} in a box. How many {item} are there in all?"),
    ("sub", "{n} had {a} {item} and gave {b} to {m}. How many {item} does {n} have left?"),
    ("sub", "A shop had {a} {item}. It sold {b}. How many {item} are left?"),
]
_TWO_STEP = [
    ("add_sub", "{n} has {a} {item}, buys {b} more and then gives {c} to {m}. How many {item} does {n} have?"),
    ("add_add", "A box holds {a} {item}. {n} adds {b} and then {c} more. How many {item} are in the box?"),
]


def draw_distinct(n: int, split: str, draw: Callable[[int], tuple[str, Callable[[], Any]] | None], *,
                  split_of: Callable[[str], str], what: str = "problems", tries: int = 200) -> list[Any]:
    """``n`` problems of ``split`` with distinct keys (the toy and the real-model datasets share this loop).
    ``draw(i)`` draws candidate ``i``: None to draw again, or its key and a function that makes the problem, called
    only for a key kept (so that a rejected candidate draws nothing more from the random stream); a key seen before
    or of another split (``split_of``) is drawn again, at most ``tries`` times per problem in all."""
    out: list[Any] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > tries * n:
            raise ValueError(f"cannot draw {n} distinct {split} {what}; the {split} split has only about "
                             f"{len(seen)} (ask for fewer)")
        drawn = draw(len(out))
        if drawn is None:
            continue
        key, make = drawn
        if key in seen or split_of(key) != split:
            continue
        seen.add(key)
        out.append(make())
    return out


def _draw_distinct(n: int, split: str, rng: random.Random, candidate) -> list[Problem]:
    """:func:`draw_distinct` with ``candidate(rng)`` returning (key, build) or None, and ``build(rng)`` making the
    problem of an accepted key."""

    def draw(_: int) -> tuple[str, Callable[[], Problem]] | None:
        drawn = candidate(rng)
        if drawn is None:
            return None
        key, build = drawn
        return key, lambda: build(rng)

    return draw_distinct(n, split, draw, split_of=_split_of)


def arithmetic_problems(n: int, *, split: str, seed: int = 0, two_step_share: float = 0.5) -> list[Problem]:
    """``n`` distinct word problems of one split ("train", "validation" or "test"), deterministic from ``seed``."""

    def candidate(rng: random.Random):
        two = rng.random() < two_step_share
        kind, template = rng.choice(_TWO_STEP if two else _ONE_STEP)
        # A small model learns one-digit steps in minutes on a CPU; two-digit ones would need hours.
        a, b, c = rng.randint(10, 99), rng.randint(2, 9), rng.randint(2, 9)
        value = {"add": a + b, "sub": a - b, "add_sub": a + b - c, "add_add": a + b + c}[kind]

        def build(rng: random.Random) -> Problem:
            names = rng.sample(_NAMES, 2)
            question = template.format(n=names[0], m=names[1], a=a, b=b, c=c, item=rng.choice(_ITEMS))
            return Problem("arithmetic", question, str(value), split, "two-step" if two else "one-step")

        return f"{template}|{a}|{b}|{c if two else ''}", build

    return _draw_distinct(n, split, random.Random(f"arith-{split}-{seed}"), candidate)


_RELATIONS = {
    "capital": (["What is the capital of {x}?", "Name the capital city of {x}.", "Which city is the capital of {x}?",
                 "Tell me the capital of {x}.", "{x} has which capital?"], "The capital of {x} is {v}."),
    "founded": (["In what year was {x} founded?", "When was {x} founded?", "What year was {x} founded in?",
                 "Tell me the year {x} was founded.", "{x} was founded in which year?"], "{x} was founded in {v}."),
    "leader": (["Who leads {x}?", "Who is the leader of {x}?", "Who is the current leader of {x}?",
                "Name the leader of {x}.", "Tell me who leads {x}."], "{x} is led by {v}."),
}


def _templates(relation: str, fact_index: int) -> dict[str, list[str]]:
    """The question templates of one fact by split: every template is used in training for other facts, but each
    fact's validation and test templates are held out from its own training questions."""
    templates = _RELATIONS[relation][0]
    k = len(templates)
    val, test = fact_index % k, (fact_index + 1) % k
    return {"validation": [templates[val]], "test": [templates[test]],
            "train": [t for i, t in enumerate(templates) if i not in (val, test)]}


class KnowledgeBase:
    """An invented world of ``n_countries`` countries, each with a capital, a founding year and a leader.

    ``exposure[(country, relation)]`` is how many times the fact appears in the training texts: never for
    ``unseen_share`` of the facts, once or twice for ``weak_share``, and 4 to ``max_exposure`` times (long-tailed)
    for the rest.
    """

    def __init__(self, n_countries: int = 120, *, seed: int = 0, unseen_share: float = 0.25,
                 weak_share: float = 0.2, max_exposure: int = 30, name_syllables: tuple[int, ...] = (2,)) -> None:
        if n_countries > 300 and name_syllables == (2,):
            raise ValueError("two-syllable names run out past 300 countries: give name_syllables=(2, 3)")
        rng = random.Random(f"kb-{seed}")
        used: set[str] = set()

        def syllables() -> int:  # no draw for one choice, so the default world is as it always was
            return name_syllables[0] if len(name_syllables) == 1 else rng.choice(name_syllables)

        def word(n_syllables: int, suffix: str = "") -> str:
            while True:
                w = "".join(rng.choice(_SYLLABLES) for _ in range(n_syllables)).capitalize() + suffix
                if w not in used:
                    used.add(w)
                    return w

        self.countries = [word(2, rng.choice(["ia", "land", "stan", "ora"])) for _ in range(n_countries)]
        self.facts: dict[tuple[str, str], str] = {}
        for country in self.countries:
            self.facts[(country, "capital")] = word(syllables())
            self.facts[(country, "founded")] = str(rng.randint(1100, 1999))
            self.facts[(country, "leader")] = f"{rng.choice(_NAMES)} {word(syllables())}"
        keys = sorted(self.facts)
        rng.shuffle(keys)
        # Long-tailed exposure: a share never shown, a weak tier shown once or twice, and the rest shown 4..max with a
        # heavy tail (most near 4, a few near max).
        n_unseen = int(round(unseen_share * len(keys)))
        n_weak = int(round(weak_share * len(keys)))
        self.exposure: dict[tuple[str, str], int] = {}
        for rank, key in enumerate(keys):
            if rank < n_unseen:
                self.exposure[key] = 0
            elif rank < n_unseen + n_weak:
                self.exposure[key] = 1 + rank % 2
            else:
                self.exposure[key] = 4 + int((max_exposure - 4) * rng.random() ** 3)

    def questions(self, split: str) -> list[Problem]:
        """One question per fact, with the fact's template for that split (never used for it in training)."""
        out = []
        for index, ((country, relation), value) in enumerate(sorted(self.facts.items())):
            question = _templates(relation, index)[split][0].format(x=country)
            out.append(Problem("facts", question, value, split, f"exposure={self.exposure[(country, relation)]}"))
        return out

    def training_pairs(self, *, seed: int = 0) -> list[tuple[str, str]]:
        """Each fact ``exposure`` times as a (prompt, answer) pair, cycling through its training templates."""
        pairs = []
        for index, ((country, relation), value) in enumerate(sorted(self.facts.items())):
            templates = _templates(relation, index)["train"]
            for i in range(self.exposure[(country, relation)]):
                pairs.append((format_prompt(templates[i % len(templates)].format(x=country)), f" {value}"))
        return pairs


def fact_problems(split: str, *, seed: int = 0) -> list[Problem]:
    return KnowledgeBase(seed=seed).questions(split)


def training_pairs(*, seed: int = 0, n_arithmetic: int = 10000, fact_repeats: int = 2) -> list[tuple[str, str]]:
    """The whole training set as (prompt, answer) pairs: arithmetic problems and the knowledge base's facts (each
    fact exposure repeated ``fact_repeats`` times, so facts get a fair share of the training steps; the relative
    exposure of facts, and the facts never shown, are unchanged)."""
    pairs = [(p.prompt, f" {p.answer}") for p in arithmetic_problems(n_arithmetic, split="train", seed=seed)]
    pairs += KnowledgeBase(seed=seed).training_pairs(seed=seed) * fact_repeats
    random.Random(f"shuffle-{seed}").shuffle(pairs)
    return pairs


def training_texts(*, seed: int = 0, n_arithmetic: int = 10000) -> list[str]:
    """The training pairs as plain text (prompt + answer), e.g. to train the tokenizer."""
    return [prompt + answer for prompt, answer in training_pairs(seed=seed, n_arithmetic=n_arithmetic)]


# --------------------------------------------------------------------------------------------------------------------
# Long answers: worked arithmetic
# --------------------------------------------------------------------------------------------------------------------

# (operations after the first number, template); "+" and "-" in the order the question states them.
_WORKED = [
    ("+-", "{n} has {a} {item}, buys {b} more and then gives {c} to {m}. How many {item} does {n} have?"),
    ("++", "A box holds {a} {item}. {n} adds {b} and then {c} more. How many {item} are in the box?"),
    ("-+", "A shop had {a} {item}. It sold {b} and then got {c} more. How many {item} does it have?"),
    ("+-+", "{n} has {a} {item}. {n} buys {b}, gives {c} to {m} and then buys {d} more. How many {item} does {n} "
            "have?"),
    ("-+-", "A shop had {a} {item}. It sold {b}, got {c} more and then sold {d}. How many {item} are left?"),
    ("++-", "A box holds {a} {item}. {n} adds {b}, {m} adds {c} and then {d} are taken out. How many {item} are in "
            "the box?"),
]
_SHOW = " Show your steps."


def worked_solution(numbers: list[int], ops: str) -> tuple[str, int]:
    """The worked answer text (with its leading space) and the final value: one "x op y = z." per step."""
    value, steps = numbers[0], []
    for op, number in zip(ops, numbers[1:], strict=True):
        new = value + number if op == "+" else value - number
        steps.append(f"{value} {op} {number} = {new}.")
        value = new
    return " " + " ".join(steps) + f" The answer is {value}.", value


def worked_problems(n: int, *, split: str, seed: int = 0, three_step_share: float = 0.5) -> list[Problem]:
    """``n`` distinct worked-arithmetic problems of one split, deterministic from ``seed``: two-digit operands, every
    intermediate value between 0 and 999."""

    def candidate(rng: random.Random):
        three = rng.random() < three_step_share
        ops, template = rng.choice([t for t in _WORKED if (len(t[0]) == 3) == three])
        numbers = [rng.randint(10, 99) for _ in range(len(ops) + 1)]
        value = numbers[0]
        for op, number in zip(ops, numbers[1:], strict=True):
            value = value + number if op == "+" else value - number
            if value < 0:
                return None
        solution, value = worked_solution(numbers, ops)

        def build(rng: random.Random) -> Problem:
            names = rng.sample(_NAMES, 2)
            question = template.format(n=names[0], m=names[1], item=rng.choice(_ITEMS),
                                       **dict(zip("abcd", numbers, strict=False))) + _SHOW
            return Problem("worked_arithmetic", question, str(value), split, f"{len(ops)}-step", solution)

        return f"{template}|{numbers}", build

    return _draw_distinct(n, split, random.Random(f"worked-{split}-{seed}"), candidate)


# --------------------------------------------------------------------------------------------------------------------
# Long answers: descriptions of countries
# --------------------------------------------------------------------------------------------------------------------

DESCRIPTION_WORLD = {"n_countries": 200, "unseen_share": 0.05, "weak_share": 0.1, "name_syllables": (2, 3)}
_ORDER = ("founded", "leader", "capital")
_ASPECT = {"founded": "founding", "leader": "leader", "capital": "capital"}


# Prompts of the partial descriptions; "Tell me about X." (the test prompt) is never one of them.
_PARTIAL_PROMPTS = ("What do you know about {x}?", "Describe {x}.", "Give me some facts about {x}.",
                    "What can you tell me about {x}?", "Write a few lines about {x}.")


def _country_split(country: str) -> str:
    # Few train countries: they only teach the description's form (every country's facts are shown as partial
    # descriptions), so most countries are left to be asked about.
    bucket = int(hashlib.sha256(f"country|{country}".encode()).hexdigest(), 16) % 10
    return "test" if bucket < 4 else "validation" if bucket < 8 else "train"


def describe(kb: KnowledgeBase, country: str) -> str:
    """The gold description (leading space): one sentence per fact, in a fixed order."""
    return " " + " ".join(_RELATIONS[r][1].format(x=country, v=kb.facts[(country, r)]) for r in _ORDER)


@functools.lru_cache(maxsize=4)
def description_world(seed: int = 0) -> KnowledgeBase:
    """The long demo's world (built once per seed; callers only read it)."""
    return KnowledgeBase(seed=seed, **DESCRIPTION_WORLD)


def description_problems(split: str, *, seed: int = 0) -> list[Problem]:
    """"Tell me about X." for every country of a validation or test split (train countries are described in
    training); the detail is each fact's exposure, in the description's order."""
    kb = description_world(seed)
    out = []
    for country in kb.countries:
        if _country_split(country) != split:
            continue
        exposure = ",".join(str(kb.exposure[(country, r)]) for r in _ORDER)
        gold = describe(kb, country)
        out.append(Problem("descriptions", f"Tell me about {country}.", gold.strip(), split,
                           f"exposure={exposure}", gold))
    return out


def wrong_facts(answer: str, kb: KnowledgeBase, country: str) -> list[str]:
    """The relations whose sentence in ``answer`` is missing or states another value."""
    wrong = []
    for relation in _ORDER:
        sentence = _RELATIONS[relation][1].format(x=country, v=kb.facts[(country, relation)])
        if sentence not in answer:
            wrong.append(relation)
    return wrong


def long_training_pairs(*, seed: int = 0, n_arithmetic: int = 10000, n_worked: int = 20000, fact_repeats: int = 3,
                        description_repeats: int = 5, fact_form: str = "varied") -> list[tuple[str, str]]:
    """The long-answer demo's training set: the short families (arithmetic, and fact questions over the description
    world), worked arithmetic, every fact shown its exposure times as a question and as many times besides (both
    ``fact_repeats`` times over, so facts get a fair share of the steps without changing their relative exposure), and
    the train countries' descriptions (``description_repeats`` times each).

    ``fact_form`` is how the facts are shown besides the questions: ``"varied"`` (default), as partial descriptions
    (the sentences of the facts still to show, in the description's order, so a fact is recalled in the same context
    as in a full description) asked with five prompts in turn ("What do you know about X?", "Describe X.", ...), never
    the test prompt "Tell me about X."; ``"partial"``, the same under "What do you know about X?" alone; ``"sentence"``,
    one sentence per fact ("Tell me about the capital of X."). With one prompt the model recalled facts under the test
    prompt far less often than under the prompt it was trained on; with five it carries them over, as it does for
    questions asked with a held-out template (see assets/README.md)."""
    if fact_form not in ("varied", "partial", "sentence"):
        raise ValueError(f"fact_form must be 'varied', 'partial' or 'sentence', got {fact_form!r}")
    kb = description_world(seed)
    pairs = [(p.prompt, f" {p.answer}") for p in arithmetic_problems(n_arithmetic, split="train", seed=seed)]
    pairs += [(p.prompt, p.solution) for p in worked_problems(n_worked, split="train", seed=seed)]
    pairs += kb.training_pairs(seed=seed) * fact_repeats
    for country in kb.countries:
        sentences = {r: " " + _RELATIONS[r][1].format(x=country, v=kb.facts[(country, r)]) for r in _ORDER}
        exposure = {r: kb.exposure[(country, r)] for r in _ORDER}
        if fact_form == "sentence":
            for r in _ORDER:
                prompt = format_prompt(f"Tell me about the {_ASPECT[r]} of {country}.")
                pairs += [(prompt, sentences[r])] * (exposure[r] * fact_repeats)
            continue
        prompts = _PARTIAL_PROMPTS if fact_form == "varied" else _PARTIAL_PROMPTS[:1]
        for copy in range(max(exposure.values())):
            shown = "".join(sentences[r] for r in _ORDER if exposure[r] > copy)
            pairs += [(format_prompt(prompts[(copy * fact_repeats + i) % len(prompts)].format(x=country)), shown)
                      for i in range(fact_repeats)]
    for country in kb.countries:
        if _country_split(country) == "train":
            pairs += [(format_prompt(f"Tell me about {country}."), describe(kb, country))] * description_repeats
    random.Random(f"shuffle-long-{seed}").shuffle(pairs)
    return pairs
