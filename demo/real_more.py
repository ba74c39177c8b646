"""More task families for the large real-model datasets (``python -m demo.build_large``).

Every fact here was **written for this project** (the element table from general knowledge); the arithmetic is
generated; nothing was downloaded. A family is kept when SmolLM2-135M-Instruct answered about 25-75% of a pilot right
on the validation split (the figures, and the families left out, are in ``assets/README.md``).

``element_names``
    "Which chemical element has the symbol Fe? Answer in a few words."; labeled with the ``claim`` matcher over the
    element's names ("aluminium || aluminum"); a wrong answer is not located. Symbols that are English words are
    asked too: the answer must name the element.
``fact_paragraphs``
    "Write a short paragraph about X. Say what its capital is." (or its official language): one fact inside a
    paragraph, judged by ``real_tasks.judge_facts`` for that fact (1 only when it is stated and right; a fact left
    out is wrong and not located).
``arithmetic`` (:func:`small_arithmetic_problems`)
    every "What is a op b?" of the split with both numbers in 2-12.

Splits hash the subject (the element, the country, the operation and its numbers) with ``real_tasks.split_of``, so no
subject is in both splits; a country's paragraphs are in its split of the small files.
"""

from __future__ import annotations

from collections.abc import Callable

from . import real_tasks as rt

__all__ = ["ELEMENTS", "FAMILIES", "MAX_NEW_TOKENS", "element_problems", "fact_paragraph_problems",
           "small_arithmetic_problems"]

FAMILIES = ("element_names", "fact_paragraphs")
MAX_NEW_TOKENS = {"element_names": 32, "fact_paragraphs": 128}

# atomic number | symbol | accepted names ("/" separates forms); elements 1-56 and eight well-known heavier ones.
_ELEMENTS = """
1 H hydrogen | 2 He helium | 3 Li lithium | 4 Be beryllium | 5 B boron | 6 C carbon | 7 N nitrogen | 8 O oxygen
9 F fluorine | 10 Ne neon | 11 Na sodium | 12 Mg magnesium | 13 Al aluminium/aluminum | 14 Si silicon
15 P phosphorus | 16 S sulfur/sulphur | 17 Cl chlorine | 18 Ar argon | 19 K potassium | 20 Ca calcium
21 Sc scandium | 22 Ti titanium | 23 V vanadium | 24 Cr chromium | 25 Mn manganese | 26 Fe iron | 27 Co cobalt
28 Ni nickel | 29 Cu copper | 30 Zn zinc | 31 Ga gallium | 32 Ge germanium | 33 As arsenic | 34 Se selenium
35 Br bromine | 36 Kr krypton | 37 Rb rubidium | 38 Sr strontium | 39 Y yttrium | 40 Zr zirconium | 41 Nb niobium
42 Mo molybdenum | 43 Tc technetium | 44 Ru ruthenium | 45 Rh rhodium | 46 Pd palladium | 47 Ag silver
48 Cd cadmium | 49 In indium | 50 Sn tin | 51 Sb antimony | 52 Te tellurium | 53 I iodine | 54 Xe xenon
55 Cs caesium/cesium | 56 Ba barium | 78 Pt platinum | 79 Au gold | 80 Hg mercury | 82 Pb lead | 86 Rn radon
88 Ra radium | 92 U uranium | 94 Pu plutonium
"""


def _parse_elements() -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    out = []
    for cell in _ELEMENTS.replace("\n", " | ").split("|"):
        if cell.strip():
            number, symbol, names = cell.split()
            out.append((int(number), symbol, tuple(names.split("/"))))
    return tuple(out)


#: (atomic number, symbol, accepted names) of every element asked about.
ELEMENTS = _parse_elements()


def _pool(family: str, split: str, items: list[tuple[str, Callable[[], rt.Problem]]],
          n: int | None) -> list[rt.Problem]:
    """The split's problems among ``items`` (subject, maker), all or the first ``n`` after a seeded shuffle."""
    mine = [(subject, make) for subject, make in items if rt.split_of(subject) == split]
    if n is not None and n < len(mine):
        rng = rt._rng(family, split, 0)
        mine = sorted(rng.sample(mine, n), key=lambda item: item[0])
    return [make() for _, make in mine]


def element_problems(split: str, *, n: int | None = None) -> list[rt.Problem]:
    """Which element has this symbol (every element of the split by default)."""
    items = [(f"element|{symbol}",
              lambda symbol=symbol, names=names, z=z: rt.Problem(
                  "element_names", f"Which chemical element has the symbol {symbol}? Answer in a few words.",
                  " || ".join(names), split, f"element|{symbol}", f"Z={z}", "claim"))
             for z, symbol, names in ELEMENTS]
    return _pool("element_names", split, items, n)


_PARAGRAPH_TEMPLATES = {"capital": "Write a short paragraph about {x}. Say what its capital is.",
                        "language": "Write a short paragraph about {x}. Say what its official language is."}


def fact_paragraph_problems(split: str, *, n: int | None = None) -> list[rt.Problem]:
    """A paragraph about one of the split's countries that states one fact (capital or official language)."""
    items = [(f"{c.key}|{relation}", lambda c=c, relation=relation: rt.Problem(
        "fact_paragraphs", _PARAGRAPH_TEMPLATES[relation].format(x=c.name), rt.reference_of(c, relation), split,
        c.key, f"{relation} tier={c.tier}", "facts"))
             for c in rt.COUNTRIES for relation in _PARAGRAPH_TEMPLATES if c.forms(relation)]
    mine = [(s, m) for s, m in items if rt.split_of(s.split("|")[0]) == split]
    if n is not None and n < len(mine):
        mine = sorted(rt._rng("fact_paragraphs", split, 0).sample(mine, n), key=lambda item: item[0])
    return [make() for _, make in mine]


def small_arithmetic_problems(split: str) -> list[rt.Problem]:
    """Every "What is a op b?" of the split with both numbers in 2-12 (``real_tasks``' "small" size, the one
    SmolLM2-135M answers 25-75% right); the subjects, so the splits, are those of ``real_tasks.arithmetic_problems``."""
    out = []
    for op in ("+", "-", "×"):
        for a in range(2, 13):
            for b in range(2, a + 1):
                first, second = (a, b) if op == "-" else (b, a)
                subject = f"{op}|{min(a, b)}|{max(a, b)}" if op in "+×" else f"{op}|{a}|{b}"
                if rt.split_of(subject) == split:
                    out.append(rt.Problem("arithmetic", f"What is {first} {op} {second}?",
                                          str(rt._OPS[op](first, second)), split, subject, f"{op} small", "numeric"))
    return out
