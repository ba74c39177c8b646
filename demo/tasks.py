"""Deterministic task generators for the demo model: arithmetic word problems and factual recall.

``arithmetic``
    SVAMP-like word problems: one step (a + b, a - b) and two steps (a + b - c, a + b + c) with two-digit numbers,
    so carries and borrows are common. A problem belongs to the train, validation or test split by a hash of its
    numbers and template, so the splits are disjoint.
``facts``
    TriviaQA-like questions about an invented world (countries with a capital, a founding year and a leader), so no
    real-world knowledge is involved. Facts are shown in training with a long-tailed frequency: some many times, some
    once or twice, some never, so the model knows some well, some weakly and some not at all. Training uses several
    question templates; validation and test questions use held-out templates, so no test question appears verbatim in
    training.

Prompts are ``"Q: <question>\\nA:"`` and answers ``" <answer>"``.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

__all__ = ["FAMILIES", "KnowledgeBase", "Problem", "arithmetic_problems", "fact_problems", "format_prompt",
           "training_texts"]

FAMILIES = ("arithmetic", "facts")

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


def arithmetic_problems(n: int, *, split: str, seed: int = 0, two_step_share: float = 0.5) -> list[Problem]:
    """``n`` distinct word problems of one split ("train", "validation" or "test"), deterministic from ``seed``."""
    rng = random.Random(f"arith-{split}-{seed}")
    out: list[Problem] = []
    seen: set[str] = set()
    while len(out) < n:
        two = rng.random() < two_step_share
        kind, template = rng.choice(_TWO_STEP if two else _ONE_STEP)
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 99)
        if kind == "sub" and b > a:
            a, b = b, a
        if kind == "add_sub" and c > a + b:
            c = rng.randint(1, a + b)
        value = {"add": a + b, "sub": a - b, "add_sub": a + b - c, "add_add": a + b + c}[kind]
        key = f"{template}|{a}|{b}|{c if two else ''}"
        if key in seen or _split_of(key) != split:
            continue
        seen.add(key)
        names = rng.sample(_NAMES, 2)
        question = template.format(n=names[0], m=names[1], a=a, b=b, c=c, item=rng.choice(_ITEMS))
        out.append(Problem("arithmetic", question, str(value), split, "two-step" if two else "one-step"))
    return out


_RELATIONS = {
    "capital": {
        "train": ["What is the capital of {x}?", "Name the capital city of {x}.", "{x} has which capital?",
                  "Tell me the capital of {x}."],
        "validation": ["What city is the capital of {x}?"],
        "test": ["Which city is the capital of {x}?"],
        "statement": "The capital of {x} is {v}.",
    },
    "founded": {
        "train": ["In what year was {x} founded?", "When was {x} founded?", "{x} was founded in which year?",
                  "Tell me the year {x} was founded."],
        "validation": ["What year did {x} get founded?"],
        "test": ["What year was {x} founded in?"],
        "statement": "{x} was founded in {v}.",
    },
    "leader": {
        "train": ["Who leads {x}?", "Who is the leader of {x}?", "Name the leader of {x}.",
                  "Tell me who leads {x}."],
        "validation": ["Who is in charge of {x}?"],
        "test": ["Who is the current leader of {x}?"],
        "statement": "{x} is led by {v}.",
    },
}


class KnowledgeBase:
    """An invented world of ``n_countries`` countries, each with a capital, a founding year and a leader.

    ``exposure[(country, relation)]`` is how many times the fact appears in the training texts: never for
    ``unseen_share`` of the facts, once or twice for ``weak_share``, and 4 to ``max_exposure`` times (long-tailed)
    for the rest.
    """

    def __init__(self, n_countries: int = 120, *, seed: int = 0, unseen_share: float = 0.25,
                 weak_share: float = 0.2, max_exposure: int = 30) -> None:
        rng = random.Random(f"kb-{seed}")
        used: set[str] = set()

        def word(n_syllables: int, suffix: str = "") -> str:
            while True:
                w = "".join(rng.choice(_SYLLABLES) for _ in range(n_syllables)).capitalize() + suffix
                if w not in used:
                    used.add(w)
                    return w

        self.countries = [word(2, rng.choice(["ia", "land", "stan", "ora"])) for _ in range(n_countries)]
        self.facts: dict[tuple[str, str], str] = {}
        for country in self.countries:
            self.facts[(country, "capital")] = word(2)
            self.facts[(country, "founded")] = str(rng.randint(1100, 1999))
            self.facts[(country, "leader")] = f"{rng.choice(_NAMES)} {word(2)}"
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
        """One question per fact, with the split's templates (validation and test templates are held out)."""
        out = []
        for (country, relation), value in sorted(self.facts.items()):
            templates = _RELATIONS[relation][split]
            rng = random.Random(f"{country}-{relation}-{split}")
            question = rng.choice(templates).format(x=country)
            out.append(Problem("facts", question, value, split, f"exposure={self.exposure[(country, relation)]}"))
        return out

    def training_texts(self, *, seed: int = 0) -> list[str]:
        """Each fact ``exposure`` times, as a question-answer pair (train templates) or a statement."""
        rng = random.Random(f"kb-texts-{seed}")
        texts = []
        for (country, relation), value in sorted(self.facts.items()):
            spec = _RELATIONS[relation]
            for _ in range(self.exposure[(country, relation)]):
                if rng.random() < 0.8:
                    texts.append(format_prompt(rng.choice(spec["train"]).format(x=country)) + f" {value}")
                else:
                    texts.append(spec["statement"].format(x=country, v=value))
        return texts


def fact_problems(split: str, *, seed: int = 0) -> list[Problem]:
    return KnowledgeBase(seed=seed).questions(split)


def training_texts(*, seed: int = 0, n_arithmetic: int = 40000) -> list[str]:
    """The whole training corpus: arithmetic problems with answers and the knowledge base's facts, shuffled."""
    texts = [p.prompt + f" {p.answer}" for p in arithmetic_problems(n_arithmetic, split="train", seed=seed)]
    texts += KnowledgeBase(seed=seed).training_texts(seed=seed)
    random.Random(f"shuffle-{seed}").shuffle(texts)
    return texts
