"""The real-model tasks (demo/real_tasks.py): references, splits, per-fact labels and the first wrong token, on
hand-written answers (no model)."""

from __future__ import annotations

import re

import pytest

from demo import real_tasks as rt
from trace_core import label_from_reference

C = rt.countries()


# --------------------------------------------------------------------------------------------------- the table

def test_table_is_complete_and_unique():
    keys = [c.key for c in rt.COUNTRIES]
    assert len(keys) == len(set(keys)) and 150 <= len(keys) <= 200
    for c in rt.COUNTRIES:
        assert c.tier in (1, 2, 3)
        assert c.language, c.key  # every country has an official language in the table
        # a capital is left out only where it would be matched by repeating the country's name
        if not c.capital:
            assert c.key in {"Djibouti", "Luxembourg", "Monaco", "Nauru", "San Marino", "São Tomé and Príncipe",
                             "Singapore", "Vatican City"}, c.key


def test_no_reference_is_matched_by_the_question_alone():
    # An answer that only repeats the question must never count as right.
    matched = [problem.prompt for split in ("validation", "test") for problem in rt.short_fact_problems(split)
               if label_from_reference(problem.prompt, problem.reference, matcher="contains")]
    matched += [f"{problem.prompt} ({relation})" for split in ("validation", "test")
                for problem in rt.country_fact_problems(split) for relation in rt.LONG_RELATIONS
                if label_from_reference(problem.prompt, list(C[problem.subject].forms(relation)), matcher="contains")]
    assert matched == []


@pytest.mark.parametrize("answer, country, relation, label", [
    ("The capital of Australia is Canberra.", "Australia", "capital", 1),
    ("Sydney.", "Australia", "capital", 0),
    ("Kiev is the capital of Ukraine.", "Ukraine", "capital", 1),
    ("Kyiv", "Ukraine", "capital", 1),
    ("Bogota", "Colombia", "capital", 1),  # without the accent
    ("Bogotá", "Colombia", "capital", 1),
    ("Mexico", "Mexico", "capital", 0),  # the country, not Mexico City
    ("The currency of Japan is the yen.", "Japan", "currency", 1),  # a unit no other country uses
    ("The Australian dollar.", "Australia", "currency", 1),
    ("The dollar.", "Australia", "currency", 0),  # which dollar? not enough
    ("The US dollar.", "Australia", "currency", 0),
    ("the peso", "Mexico", "currency", 0),
    ("The Mexican peso (MXN).", "Mexico", "currency", 1),
    ("The Brazilian real.", "Brazil", "currency", 1),
    ("The real currency is the dollar.", "Brazil", "currency", 0),  # an everyday word is not accepted alone
    ("The Sierra Leonean leone", "Sierra Leone", "currency", 1),
    ("Sierra Leone uses the dollar.", "Sierra Leone", "currency", 0),  # the unit is in the country's name
    ("The euro", "Croatia", "currency", 1),
    ("The Croatian kuna", "Croatia", "currency", 0),  # replaced by the euro in 2023
    ("It uses the Polish zloty.", "Poland", "currency", 1),
    ("Swahili and English", "Kenya", "language", 1),
    ("French", "Kenya", "language", 0),
    ("Asia", "Laos", "continent", 1),
    ("It is in Southeast Asia.", "Laos", "continent", 1),
    ("Europe", "Laos", "continent", 0),
    ("Central America", "Honduras", "continent", 1),
    ("It lies in the South American continent.", "Guyana", "continent", 1),
    ("It is a South American country in Africa.", "Guyana", "continent", 0),
    ("South America", "Honduras", "continent", 0),
])
def test_references_match_the_right_answers_only(answer, country, relation, label):
    assert label_from_reference(answer, rt.reference_of(C[country], relation), matcher="contains") == label


# --------------------------------------------------------------------------------------------------- splits

def test_splits_are_disjoint_by_subject_and_deterministic():
    families = {
        "short": lambda s: rt.short_fact_problems(s),
        "arith": lambda s: rt.arithmetic_problems(150, split=s),
        "word": lambda s: rt.word_problems(80, split=s),
        "long": lambda s: rt.country_fact_problems(s),
    }
    for name, make in families.items():
        val, test = make("validation"), make("test")
        assert {p.subject for p in val} and not {p.subject for p in val} & {p.subject for p in test}, name
        assert not {p.prompt for p in val} & {p.prompt for p in test}, name
        assert all(p.split == "validation" for p in val) and all(p.split == "test" for p in test)
        assert make("test") == test, name
    # a country's short and long questions share its split
    long_split = {p.subject: p.split for s in ("validation", "test") for p in rt.country_fact_problems(s)}
    for s in ("validation", "test"):
        for p in rt.short_fact_problems(s):
            assert long_split.get(p.subject, s) == s
    # commutative problems are one subject: 17 + 25 and 25 + 17 cannot land in different splits
    subjects = {p.subject for s in ("validation", "test") for p in rt.arithmetic_problems(150, split=s)}
    assert not any(sub.startswith("+|") and int(sub.split("|")[1]) > int(sub.split("|")[2]) for sub in subjects)


def test_split_of_splits_roughly_in_half():
    splits = [rt.split_of(c.key) for c in rt.COUNTRIES]
    assert 0.35 < splits.count("test") / len(splits) < 0.65


def test_arithmetic_and_word_problem_references_are_right():
    problems = rt.arithmetic_problems(60, split="test")
    for p in problems:
        a, op, b = p.prompt.removeprefix("What is ").removesuffix("?").split()
        assert int(p.reference) == {"+": int(a) + int(b), "-": int(a) - int(b), "×": int(a) * int(b)}[op]
        assert p.detail.split()[0] == op and int(p.reference) >= 0
        (a_low, a_high), (b_low, b_high) = rt.ARITHMETIC_SIZES[p.detail.split()[1]]
        if op == "-":  # the two numbers of the size's ranges, the larger first
            assert min(a_low, b_low) <= int(b) <= int(a) <= max(a_high, b_high)
        else:
            assert a_low <= int(a) <= a_high and b_low <= int(b) <= b_high
    # every operation in every size, in the documented shares
    details = [p.detail for p in problems]
    for op in ("+", "-", "×"):
        assert details.count(f"{op} small") == 12 and details.count(f"{op} mixed") == 4
        assert details.count(f"{op} two-digit") == 4
    for p in rt.word_problems(40, split="validation"):
        kind, a, b, c = p.subject.split("|")
        a, b, c = int(a), int(b), int(c)
        # the story's arithmetic, written out independently of WORD_KINDS' lambdas
        expected = {"buy_give": a + b - c, "give_find": a - c + b, "get_get": a + b + c, "lose_lose": a - b - c}[kind]
        assert int(p.reference) == expected >= 0 and p.detail == kind
        assert 3 <= a <= 12 and 2 <= b <= 6 and 1 <= c <= 4
        assert kind != "give_find" or c <= a  # nobody gives away more than they have
        story = p.prompt.removesuffix(" Work it out step by step, then write 'Answer:' and the number.")
        assert story != p.prompt and re.findall(r"\d+", story) == [str(a), *( [str(c), str(b)] if kind == "give_find"
                                                                           else [str(b), str(c)])]
        assert not re.search(r"\. (he|she) ", story)  # a pronoun that opens a sentence is capitalised
    assert {p.detail for p in rt.word_problems(8, split="test")} == {k for k, _, _ in rt.WORD_KINDS}


# ------------------------------------------------------------------------------------------ per-fact labels

def _verdicts(answer: str, country: str) -> dict[str, str]:
    return {v.relation: v.status for v in rt.judge_facts(answer, C[country])}


def test_three_right_facts_in_three_sentences():
    answer = ("The capital of Kenya is Nairobi. Its currency is the Kenyan shilling. "
              "Its official languages are English and Swahili.")
    assert _verdicts(answer, "Kenya") == {"capital": "right", "currency": "right", "language": "right"}
    problem = rt.Problem("country_facts", "q", "r", "test", "Kenya", "tier=1", "facts")
    label, detail, position = rt.label_of(problem, answer)
    assert (label, position) == (1, None) and detail == "tier=1 wrong=none"
    # one wrong fact is enough to make the answer wrong
    wrong = answer.replace("Nairobi", "Mombasa")
    label, detail, position = rt.label_of(problem, wrong)
    assert label == 0 and detail == "tier=1 wrong=capital" and wrong[position:].startswith("Mombasa.")


def test_facts_in_one_sentence_are_judged_in_their_own_clauses():
    # each fact is judged on its own clause of the shared sentence
    answer = "The capital of France is Paris, its currency is the US dollar and its official language is French."
    assert _verdicts(answer, "France") == {"capital": "right", "currency": "wrong", "language": "right"}
    # a right value in another fact's clause does not make a wrong fact right
    answer = "The capital of France is the euro, its currency is Paris and its language is French."
    assert _verdicts(answer, "France") == {"capital": "wrong", "currency": "wrong", "language": "right"}


def test_a_weak_keyword_does_not_take_the_place_of_a_strong_one():
    # "spoken" in the currency's sentence is not the language's clause when "language" is named later
    answer = ("Its capital is Tokyo. The most widely spoken currency is the Japanese yen, and its official language "
              "is Korean.")
    verdicts = {v.relation: v for v in rt.judge_facts(answer, C["Japan"])}
    assert {r: v.status for r, v in verdicts.items()} == {"capital": "right", "currency": "right",
                                                          "language": "wrong"}
    assert answer[verdicts["language"].value_start:] == "Korean."
    # "Monetary" (the International Monetary Fund) does not name the currency
    assert _verdicts("Its capital is Tokyo. It is in the International Monetary Fund. Japanese is its language.",
                     "Japan")["currency"] == "missing"
    # with no "language" at all, "speak" names the fact
    assert _verdicts("Tokyo is the capital. It uses the yen. People speak Japanese.", "Japan")["language"] == "right"


def test_missing_and_unkeyed_facts():
    answer = "Denmark is a Nordic country. Copenhagen is lovely. People there speak Danish."
    # no "capital" keyword but the right city is named: right; currency never mentioned: missing
    assert _verdicts(answer, "Denmark") == {"capital": "right", "currency": "missing", "language": "right"}
    problem = rt.Problem("country_facts", "q", "r", "test", "Denmark", "tier=1", "facts")
    # a country_facts answer is judged on LONG_RELATIONS only: the currency is not asked
    assert rt.label_of(problem, answer) == (1, "tier=1 wrong=none", None)
    label, detail, position = rt.label_of(problem, "Denmark is a Nordic country. Copenhagen is lovely.")
    assert (label, detail) == (0, "tier=1 wrong=language missing=language")
    assert position is None  # a missing fact has no place in the answer


def test_country_fact_problems_ask_two_facts_of_tier_1_and_2_countries():
    problems = [p for split in ("validation", "test") for p in rt.country_fact_problems(split)]
    assert {C[p.subject].tier for p in problems} == {1, 2}
    assert len(problems) == sum(c.tier in (1, 2) and bool(c.capital) for c in rt.COUNTRIES)
    assert all("capital" in p.prompt and "official language" in p.prompt for p in problems)
    assert rt.LONG_RELATIONS == ("capital", "language")


@pytest.mark.parametrize("answer, country, relation, value", [
    ("The capital of Kenya is Mombasa. Its currency is the Kenyan shilling. It speaks English.", "Kenya",
     "capital", "Mombasa"),
    ("Its capital, Mombasa, is a port city. The currency is the Kenyan shilling. English is spoken.", "Kenya",
     "capital", "Mombasa"),
    ("Sydney is the capital of Australia. It uses the Australian dollar. English is its official language.",
     "Australia", "capital", "Sydney"),
    ("Canberra is the capital. Australia uses the U.S. dollar as its currency. English is the language.",
     "Australia", "currency", "U.S. dollar"),
    ("Niger is a developed nation with a capital city of Kano, and its official currency being the Kena.",
     "Niger", "capital", "Kano"),
    ("The capital of Peru is Lima, its currency is the Peruvian sol and its official language is Portuguese.",
     "Peru", "language", "Portuguese"),
    ("Capital: Quito\nCurrency: Ecuadorian sucre\nLanguage: Spanish", "Ecuador", "currency", "Ecuadorian sucre"),
    ("Burgkabu, the capital of Burkina Faso, is a vibrant city. It uses the CFA franc. French is spoken.",
     "Burkina Faso", "capital", "Burgkabu"),
    ("Its capital is Nuku'alofa. Its currency is the pa'anga. Tonga is a Polynesian language, but rare.", "Tonga",
     "language", " is a Polynesian"),  # "Tonga" agrees with "Tongan" as far as it goes
    ("In Kenya, the capital is Mombasa. It uses the Kenyan shilling. English is spoken.", "Kenya", "capital",
     "Mombasa"),
    # the part of the value that agrees with the right form is not wrong: the departure is
    ("Its capital is Yerei. Its currency is the Armenian dram. Armenian is its language.", "Armenia", "capital",
     "i. Its"),
    ("Its capital is Santiago. Chile has a single currency, the Chilean dollar. Spanish is spoken.", "Chile",
     "currency", "dollar."),
    ("Its capital is Lima and its currency the sol. Peru has Portuguese as its official language, which is rare.",
     "Peru", "language", "Portuguese"),
])
def test_first_wrong_fact_value_is_located(answer, country, relation, value):
    verdicts = rt.judge_facts(answer, C[country])
    first, position = rt.locate_first_wrong(verdicts)
    assert first == relation
    assert answer[position:].startswith(value), answer[position:position + 20]


def test_the_first_wrong_fact_is_the_earliest_in_the_answer_not_in_the_question():
    # currency (asked second) is stated first and wrong; the capital (asked first) is wrong later
    answer = "Its currency is the rupee. Its capital is Lagos. Its official language is English."
    first, position = rt.locate_first_wrong(rt.judge_facts(answer, C["Kenya"]))
    assert first == "currency" and answer[position:].startswith("rupee")


def test_first_wrong_token_is_the_token_covering_the_value():
    answer = " The capital of Kenya is Mombasa."
    tokens = [" The", " capital", " of", " Kenya", " is", " Mom", "basa", "."]
    _, position = rt.locate_first_wrong(rt.judge_facts(answer, C["Kenya"], ["capital"]))
    assert rt.first_wrong_token_of(tokens, answer, position) == 5  # " Mom": its space and "Mom"
    assert rt.first_wrong_token_of(tokens, answer, 0) == 0
    assert rt.first_wrong_token_of(tokens, answer, 6) == 1  # the "a" of " capital"
    assert rt.first_wrong_token_of(tokens, answer, None) is None
    assert rt.first_wrong_token_of(tokens[:-1], answer, position) is None  # the tokens do not spell the answer


def test_label_of_short_and_numeric_families():
    short = rt.Problem("short_facts", "q", rt.reference_of(C["Mongolia"], "capital"), "test", "Mongolia",
                       "capital tier=2", "contains")
    answer = "Mongolia's capital is Khantak."
    label, _, position = rt.label_of(short, answer)
    assert label == 0 and answer[position:].startswith("Khantak")
    assert rt.label_of(short, "Ulaanbaatar.")[0] == 1 and rt.label_of(short, "Ulaanbaatar.")[2] is None
    arith = rt.Problem("arithmetic", "What is 17 + 25?", "42", "test", "+|17|25", "+", "numeric")
    answer = "To add 17 and 25: 17 + 25 = 32."
    label, _, position = rt.label_of(arith, answer)
    assert label == 0 and answer[position:] == "32."  # the last number's first digit departs from 42
    assert rt.label_of(arith, "17 + 25 = 42.")[:2] == (1, "+")


def test_sentences_do_not_end_at_initials():
    text = "The currency is the U.S. dollar. The capital is Washington, D.C. and more.\nNext line"
    spans = [text[s:e] for s, e in rt.sentence_spans(text)]
    assert spans == ["The currency is the U.S. dollar.", "The capital is Washington, D.C. and more.", "Next line"]


def test_one_token_away_means_an_alternative_continues_the_right_value():
    from demo.real_examples import continues_right

    answer = "59 × 3 = 165"
    position = answer.index("65")  # the "6": where 165 departs from 177
    start = position  # the token "6" starts there
    assert continues_right(answer, start, position, "7", ["177"])
    assert not continues_right(answer, start, position, "8", ["177"])
    assert continues_right(answer, start, position, "77", ["177"])  # a longer token that spells the rest
    # a token that began before the departure: " Maje" for "Majuro" departs at the "e"; " Maj" + "uro" continues
    answer = "The capital is Maje."
    start, position = answer.index(" Maje"), answer.index("e.")
    assert continues_right(answer, start, position, " Majuro", ["Majuro"])
    assert not continues_right(answer, start, position, " Maj", ["Majuro"])  # stops where it departed: no further
    assert not continues_right(answer, start, position, " Paris", ["Majuro"])
