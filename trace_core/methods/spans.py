"""Spans of an answer (sentences, and inside them numbers, dates and names) and how risky each one is.

TRACE's premise is that an error sits on one number, one entity, one claim. This module cuts an answer into such
spans with fixed, offline rules (no model, no download), maps each token's surprisal, entropy and share of the TRACE
risk onto the spans its characters fall in, and ranks an answer's spans from riskiest to safest. A
:class:`SpanCalibrator`, fitted on spans labelled right or wrong, turns a span's statistics into a probability that
the span is right.

Segmentation rules (:func:`segment`), on the answer's text:

- **Sentences.** A sentence ends after a run of ``.``, ``!``, ``?`` or ``…`` (with any closing quotes or brackets)
  that is followed by whitespace or the end of the text, unless the run is a single ``.`` after a known abbreviation
  (``Dr``, ``e.g``, ``approx``, month abbreviations, ...) or after a single capital letter (``J. K.``, ``U.S.``), or
  the next word starts with a lower-case letter (``approx. five``). ``。！？`` end a sentence without whitespace. A line
  break always ends one (list items and headings are their own sentences). Sentences are trimmed of whitespace.
- **Dates** (English): a month name or abbreviation with a day and/or a year (``March 5, 2021``, ``5th of March``,
  ``March 2021``), ISO and numeric dates (``2021-03-05``, ``05/03/2021``, ``5.3.2021``), decades (``1990s``), and a
  year of 1000-2099 after ``in``, ``since``, ``from``, ``until``, ``by``, ``around`` or ``circa``.
- **Numbers**: digits (any script's decimal digits) with internal separators ``,`` ``.`` ``'`` and the no-break and
  thin spaces (``1,200``, ``3.5``, a thin-spaced ``1 000``) or groups of three digits after plain spaces
  (``1 000 000``), an optional sign (``-``, ``−``, ``+``) or currency sign before, and an optional ``%``,
  ``percent``, ordinal suffix (``21st``) or scale word (``1.2 million``) after. Any other space separates two
  numbers; a number inside a word (``COVID-19``'s ``19``) still counts.
- **Names**: a run of words that start with a capital letter (``New York``, ``UNESCO``, ``Côte d'Ivoire``), joined
  by single spaces (a period and a space after an initial or a title: ``J. K. Rowling``, ``Dr. Smith``,
  ``U.S. Army``) or the lower-case particles ``of``, ``the``, ``de``, ``la``, ``du``, ``von``, ``van``,
  ``der``, ``al``, ``and`` between two such words (``Bank of England``; a particle never starts or ends a name). A
  run's first word is dropped when it is a common sentence opener (``The``, ``It``, ``However``, ...; :data:`OPENERS`)
  and the word ``I`` is never a name. Without a part-of-speech model a capitalised ordinary word that opens a
  sentence and is not in the list (``Visiting Rome ...``) is taken for a name, and scripts without case (Chinese,
  Arabic) give no names.

Dates win over numbers, and both over names, where they overlap. Offsets are Python string indices (code points)
into the text the tokens spell (``"".join(trace.tokens)``, which is the answer for the traces recorded here).

Span risk (:func:`span_risks`): a token belongs to a span when its characters, without the token's leading and
trailing whitespace, overlap the span (a token that only holds whitespace belongs to no span; a word split into
several tokens brings all of them). A token without text of its own, a byte-level piece that ends inside a multi-byte
character (the recorders write the character on the token that completes it), counts with the token that completes
it (:func:`completing_token`): a Japanese or emoji answer's spans hold the tokens that chose each character's first
bytes too. Per span, over its tokens:

- ``peak_surprisal`` and ``mean_surprisal``: the largest and the mean ``s_t``;
- ``peak_entropy`` and ``mean_entropy``: the same for ``H_t`` (NaN when the trace has no entropy);
- ``risk_share``: the span's share of the answer's TRACE risk, ``sum(c_t) / R`` over its tokens, with ``c_t`` the
  per-token contributions of :func:`trace_core.explain_trace` (0 when R is 0).

Ranking (:func:`rank_spans`): by the calibrator's probability that the span is right, lowest first, when a
:class:`SpanCalibrator` is given; otherwise by ``peak_surprisal``, highest first (the spike display rule uses
surprisal too). Ties go to the earlier span. Sentences and the spans inside them are ranked separately (a sentence's
peak is never below the peak of a span inside it); :func:`riskiest_span` ranks the numbers, dates and names and falls
back to the sentences when an answer has none.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trace_core.checks import check_choice, check_labels, check_real, shorten
from trace_core.methods.logistic import fit_logistic, sigmoid
from trace_core.methods.risk import TraceExplanation, explain_trace
from trace_core.traces.trace import Trace

__all__ = ["KINDS", "OPENERS", "OTHER_SCRIPT_NOTE", "default_span_calibrator", "SPAN_FEATURES", "Span",
           "SpanCalibrator", "SpanRisk", "completing_token", "completing_token_of", "mostly_other_script",
           "other_script_warning", "rank_spans", "riskiest_span", "segment", "span_features", "span_risks"]

KINDS = ("sentence", "date", "number", "name")  # the span kinds; "fine" spans are every kind but "sentence"

_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc eg e.g ie i.e approx no nos inc ltd co corp mt ft fig al cf est dept gen gov "
    "jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun".split())

OPENERS = frozenset(
    "a an the this that these those it its it's they their there here he she his her we our you your i my me "
    "in on at of for from to by with as after before during while when where since until if although though "
    "because but and or so yet also however moreover furthermore additionally overall today currently generally "
    "finally first second third next then thus therefore meanwhile instead still both each every all some many "
    "most other another such no not yes sure certainly of course one two three known located situated founded "
    "what which who whom whose why how is are was were be has have had do does did can could will would should may "
    "might must let please note".split())

_PARTICLES = frozenset("of the de la le du des da di do dos von van der den del al and".split())

_MONTHS = (r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
           r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?")
_DAY = r"(?:[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:\d{3,4})(?:\s?(?:BC|BCE|AD|CE))?"
_DATE = re.compile(
    rf"(?<!\w)(?:"
    rf"{_MONTHS}\s{_DAY},?\s{_YEAR}(?!\d)"             # March 5, 2021
    rf"|{_DAY}\s(?:of\s)?{_MONTHS},?\s{_YEAR}(?!\d)"   # 5 March 2021, 5th of March 2021
    rf"|{_MONTHS}\s{_DAY}(?![\d:])(?!,?\s\d)"            # March 5
    rf"|{_DAY}\s(?:of\s)?{_MONTHS}(?!\w)"               # 5th of March
    rf"|{_MONTHS}\s{_YEAR}(?!\d)"                       # March 2021
    rf"|\d{{4}}-\d{{1,2}}-\d{{1,2}}(?!\d)"               # 2021-03-05
    rf"|\d{{1,4}}[/.]\d{{1,2}}[/.]\d{{2,4}}(?![\d.]\d)"  # 05/03/2021, 5.3.2021, 2021/03/05
    rf"|(?:1\d|20)\d0s(?!\w)"                           # 1990s
    rf")")
_YEAR_AFTER = re.compile(r"(?<!\w)(?:in|since|from|until|till|by|around|circa|c\.)\s((?:1\d|20)\d{2})(?![\d,.]\d|\w)",
                         re.IGNORECASE)
_SEPARATORS = ",.'\u00a0\u202f\u2009\u2019"
_NUMBER = re.compile(
    rf"(?<!\d)(?<![A-Za-z\u00C0-\u024F\u0370-\u03FF\u0400-\u04FF])"  # not inside a number or a cased word
    rf"(?:[-\u2212+](?=[$€£¥₹]?\d))?[$€£¥₹]?"               # sign, currency
    rf"(?:\d{{1,3}}(?: \d{{3}}(?!\d))+"                      # groups of three after plain spaces: 1 000 000
    rf"|\d+(?:[{_SEPARATORS}]\d+)*)"                        # digits with internal separators
    rf"(?:\s?%|\s(?:percent|per\scent)(?!\w)|(?:st|nd|rd|th)(?!\w))?"
    rf"(?:\s(?:hundred|thousand|million|billion|trillion)(?!\w))?")
# a word: starts with a letter or digit; inner apostrophes and hyphens kept, and inner periods before a letter (U.S)
_WORD = re.compile(r"[^\W_][\w'’\-\u0300-\u036f]*(?:\.[^\W\d_]+)*")  # combining accents stay in the word
_ELIDED = re.compile(r"[dl]['’][^\W\d_]")  # d'Ivoire, l'Aquila: a name word after its elided article
_SENTENCE_END = re.compile(r"(?:[.!?…]+[\"'”’)\]]*)(?=\s|$)|[。！？]+|\n+")


@dataclass(frozen=True)
class Span:
    """A stretch of an answer's text.

    Attributes
    ----------
    kind : str
        ``"sentence"``, ``"date"``, ``"number"`` or ``"name"``.
    start, end : int
        Character offsets into the text (``text[start:end]``, end exclusive).
    text : str
        The span's characters.
    """

    kind: str
    start: int
    end: int
    text: str


def _sentences(text: str) -> list[tuple[int, int]]:
    bounds, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        mark = match.group()
        if mark[0] == ".":
            before = re.search(r"([^\W\d_][\w.]*)$", text[max(0, match.start() - 40):match.start()])
            word = before.group(1).casefold() if before else ""
            following = re.match(r"\s*(\S)", text[match.end():])
            if mark.rstrip("\"'”’)]") == "." and (word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())
                                                   or "." in word and len(word) <= 6):
                continue  # "Dr. Smith", "J. K.", "U.S. Army", "e.g. this"
            if following is not None and following.group(1).islower():
                continue  # "approx. five": the next word goes on the sentence
        end = match.start() if mark[0] == "\n" else match.end()
        bounds.append((start, end))
        start = match.end()
    bounds.append((start, len(text)))
    out = []
    for s, e in bounds:
        piece = text[s:e]
        if piece.strip():
            s += len(piece) - len(piece.lstrip())
            e -= len(piece) - len(piece.rstrip())
            out.append((s, e))
    return out


def _free(taken: list[tuple[int, int]], start: int, end: int) -> bool:
    return not any(a < end and start < b for a, b in taken)


def _names(text: str, lo: int, hi: int, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Runs of capitalised words inside the sentence text[lo:hi] (see the module's rules)."""
    words = [(m.start() + lo, m.end() + lo) for m in _WORD.finditer(text[lo:hi])]
    texts = [text[ws:we] for ws, we in words]
    capital = [(w[0].isupper() or (_ELIDED.match(w) is not None and w[2].isupper())) and w != "I"
               and not any(ch.isdigit() for ch in w) and _free(taken, ws, we)
               for w, (ws, we) in zip(texts, words, strict=True)]
    out: list[tuple[int, int]] = []
    run: list[int] = []  # indices into words of the current run; particles included

    def abbreviated(i: int) -> bool:  # "Dr", "J", "U.S": a period and a space may follow inside a name
        return len(texts[i]) == 1 or "." in texts[i] or texts[i].casefold() in _ABBREVIATIONS

    def close() -> None:
        while run and not capital[run[-1]]:
            run.pop()  # a particle never ends a name
        if run:
            first = 1 if run[0] == 0 and texts[0].casefold() in OPENERS else 0  # "The United States": not "The"
            while first < len(run) and not capital[run[first]]:
                first += 1
            if first < len(run):
                end = words[run[-1]][1]
                end -= 2 if text[end - 2:end] in ("'s", "’s") else 0  # "Côte d'Ivoire's": the name without 's
                out.append((words[run[first]][0], end))
        run.clear()

    for i in range(len(words)):
        if run:
            gap = text[words[run[-1]][1]:words[i][0]]
            joined = gap == " " or (gap in (".", ". ") and abbreviated(run[-1]))
            if joined and (capital[i] or texts[i] in _PARTICLES):
                run.append(i)
                continue
            close()
        if capital[i]:
            run.append(i)
    close()
    return out


def segment(text: str) -> list[Span]:
    """Cut ``text`` into sentences and, inside them, dates, numbers and names (the module's rules).

    Parameters
    ----------
    text : str
        An answer.

    Returns
    -------
    list of Span
        Sorted by start; a sentence comes before the spans inside it.

    Examples
    --------
    >>> [(s.kind, s.text) for s in segment("The capital of Mongolia is Khantak. It has 1,450,000 people.")]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('sentence', 'The capital of Mongolia is Khantak.'), ('name', 'Mongolia'), ('name', 'Khantak'),
     ('sentence', 'It has 1,450,000 people.'), ('number', '1,450,000')]
    """
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a str, got {type(text).__name__}")
    spans: list[Span] = []
    for lo, hi in _sentences(text):
        spans.append(Span("sentence", lo, hi, text[lo:hi]))
        taken: list[tuple[int, int]] = []
        inner: list[tuple[str, int, int]] = []
        piece = text[lo:hi]
        found = [(m.start(), m.end()) for m in _DATE.finditer(piece)]
        found += [(m.start(1), m.end(1)) for m in _YEAR_AFTER.finditer(piece)]
        for kind, matches in (("date", found), ("number", [(m.start(), m.end()) for m in _NUMBER.finditer(piece)])):
            for s, e in sorted(matches):
                s, e = s + lo, e + lo
                if _free(taken, s, e):
                    taken.append((s, e))
                    inner.append((kind, s, e))
        inner += [("name", s, e) for s, e in _names(text, lo, hi, taken)]
        spans += [Span(kind, s, e, text[s:e]) for kind, s, e in sorted(inner, key=lambda x: x[1])]
    return spans


@dataclass(frozen=True)
class SpanRisk:
    """One span of one answer with the statistics of its tokens.

    Attributes
    ----------
    span : Span
    tokens : ndarray of int
        Indices of the tokens that overlap the span (ascending).
    peak_surprisal, mean_surprisal : float
        Largest and mean surprisal ``s_t`` of those tokens, in nats.
    peak_entropy, mean_entropy : float
        The same for entropy ``H_t``; NaN when the trace has no entropy.
    risk_share : float
        The span's share of the answer's TRACE risk, in [0, 1] (tokens in several spans count in each).
    answer_risk : float
        The whole answer's TRACE risk R.
    n_answer_tokens : int
        Tokens in the whole answer.
    probability : float or None
        The probability that the span is right, from a :class:`SpanCalibrator`; None without one.
    """

    span: Span
    tokens: np.ndarray = field(repr=False)
    peak_surprisal: float
    mean_surprisal: float
    peak_entropy: float
    mean_entropy: float
    risk_share: float
    answer_risk: float
    n_answer_tokens: int
    probability: float | None = None

    @property
    def kind(self) -> str:
        return self.span.kind


def completing_token(tokens: Sequence[str]) -> np.ndarray:
    """For each token, the token whose text holds it: itself when its text is not empty; for an empty token (a
    byte-level piece that ends inside a multi-byte character, which the recorders write on the token that completes
    it) the next token with text; -1 when no later token has text (an answer cut inside a character).

    Examples
    --------
    >>> completing_token(["", "", "\U0001f31f", "", "\u3053", ""]).tolist()
    [2, 2, 2, 4, 4, -1]
    """
    owner = np.empty(len(tokens), dtype=np.int64)
    nxt = -1
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i] != "":
            nxt = i
        owner[i] = nxt
    return owner


def completing_token_of(tokens: Sequence[str], i: int) -> int:
    """:func:`completing_token` of token ``i`` alone, looking no further than the next token with text.

    >>> completing_token_of(["", "", "\U0001f31f"], 0), completing_token_of(["A", ""], 1)
    (2, -1)
    """
    return next((j for j in range(i, len(tokens)) if tokens[j] != ""), -1)


def _token_cores(tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each token's character range without its leading and trailing whitespace (empty for a whitespace token); an
    empty token takes the range of the token that completes it (:func:`completing_token`)."""
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    lead = np.fromiter((len(t) - len(t.lstrip()) for t in tokens), dtype=np.int64, count=len(tokens))
    trail = np.fromiter((len(t) - len(t.rstrip()) for t in tokens), dtype=np.int64, count=len(tokens))
    core_start = starts + lead
    core_end = np.maximum(ends - trail, core_start)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        owner = completing_token(tokens)[empty]
        has = owner >= 0
        core_start[empty[has]], core_end[empty[has]] = core_start[owner[has]], core_end[owner[has]]
    return core_start, core_end


def span_risks(trace: Trace, *, spans: Sequence[Span] | None = None, explanation: TraceExplanation | None = None,
               calibrator: SpanCalibrator | None = None) -> list[SpanRisk]:
    """Map one answer's token statistics onto its spans.

    Parameters
    ----------
    trace : Trace
    spans : sequence of Span, optional
        Spans of ``"".join(trace.tokens)``; by default :func:`segment` of it.
    explanation : TraceExplanation, optional
        ``explain_trace(trace)`` when already computed (its contributions give ``risk_share``).
    calibrator : SpanCalibrator, optional
        Fills each span's ``probability``.

    Returns
    -------
    list of SpanRisk
        In the order of ``spans``; spans without a token (only possible with spans given by the caller) are left out.

    Examples
    --------
    >>> from trace_core import Trace, TraceMetadata
    >>> tokens = ["The", " answer", " is", " 42", "."]
    >>> trace = Trace(prompt="Q", answer="".join(tokens), token_ids=np.arange(5), tokens=tokens,
    ...               surprisal=[0.1, 0.2, 0.1, 3.0, 0.1], entropy=None, top_ids=[[]] * 5, top_logprobs=[[]] * 5,
    ...               metadata=TraceMetadata(entropy_source="absent"))
    >>> risky = rank_spans(span_risks(trace), level="fine")[0]
    >>> risky.span.text, round(risky.peak_surprisal, 1)
    ('42', 3.0)
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"`trace` must be a Trace, got {type(trace).__name__}")
    text = "".join(trace.tokens)
    spans = segment(text) if spans is None else list(spans)
    if explanation is None:
        explanation = explain_trace(trace) if len(trace) else None
    core_start, core_end = _token_cores(trace.tokens)
    # Non-whitespace token cores are in order and disjoint but for an empty token's, which equals the core of the
    # token that completes it, next in this order: the tokens overlapping a span are a run of them.
    keep = np.flatnonzero(core_end > core_start)
    starts, ends = core_start[keep], core_end[keep]
    s = np.asarray(trace.surprisal, dtype=np.float64)[keep]
    h = np.asarray(trace.entropy, dtype=np.float64)[keep] if trace.has_entropy else None
    contributions = (explanation.contributions if explanation is not None else np.zeros(len(trace)))[keep]
    risk = float(explanation.risk) if explanation is not None else 0.0
    cumulative = {name: np.concatenate([[0.0], np.cumsum(x)]) for name, x in
                  (("s", s), ("h", h if h is not None else s), ("c", contributions))}
    for span in spans:
        if not isinstance(span, Span):
            raise TypeError(f"`spans` must hold Span objects, got {type(span).__name__}")
        if not 0 <= span.start <= span.end <= len(text):
            raise ValueError(f"span {shorten(span.text, 60)} at {span.start}:{span.end} lies outside the answer's "
                             f"{len(text)} characters")
    bounds = np.array([(span.start, span.end) for span in spans], dtype=np.int64).reshape(-1, 2)
    lo = np.searchsorted(ends, bounds[:, 0], side="right")
    hi = np.searchsorted(starts, bounds[:, 1], side="left")
    found = np.flatnonzero(hi > lo)
    lo, hi = lo[found], hi[found]
    n = hi - lo
    s_list = s.tolist()
    lo_list, hi_list = lo.tolist(), hi.tolist()
    peak_s = [max(s_list[a:b]) for a, b in zip(lo_list, hi_list, strict=True)]
    mean_s = ((cumulative["s"][hi] - cumulative["s"][lo]) / n).tolist()
    if h is not None:
        h_list = h.tolist()
        peak_h = [max(h_list[a:b]) for a, b in zip(lo_list, hi_list, strict=True)]
        mean_h = ((cumulative["h"][hi] - cumulative["h"][lo]) / n).tolist()
    else:
        peak_h = mean_h = [math.nan] * len(lo_list)
    share = (np.clip((cumulative["c"][hi] - cumulative["c"][lo]) / risk, 0.0, 1.0) if risk > 0
             else np.zeros(len(lo))).tolist()
    kinds = [spans[k].kind for k in found.tolist()]
    if calibrator is not None and len(lo_list):
        F = _feature_matrix(np.array(peak_s), np.array(mean_s), n, np.array(share), keep[lo], len(trace), risk, kinds)
        probability: list[float | None] = calibrator._predict_features(F).tolist()
    else:
        probability = [None] * len(lo_list)
    return [SpanRisk(span=spans[k], tokens=keep[a:b], peak_surprisal=ps, mean_surprisal=ms, peak_entropy=ph,
                     mean_entropy=mh, risk_share=sh, answer_risk=risk, n_answer_tokens=len(trace), probability=p)
            for k, a, b, ps, ms, ph, mh, sh, p in zip(found.tolist(), lo_list, hi_list, peak_s, mean_s, peak_h,
                                                     mean_h, share, probability, strict=True)]


_ASCII_LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_NON_ASCII_WORD = re.compile(r"[^\W\x00-\x7f]")  # a word character outside ASCII


def mostly_other_script(text: str) -> bool:
    """True when most of ``text``'s letters are not Latin (Japanese, Arabic, Cyrillic, ...): the rules here find
    names by capital letters and the shipped span calibrator was fitted on English answers, so neither fits such a
    text. False for a text without letters.

    >>> mostly_other_script("Tokyo (\u6771\u4eac) is the capital."), mostly_other_script("\u6771\u4eac\u306f")
    (False, True)
    """
    if text.isascii():  # every ASCII letter is Latin: the usual English answer, without a pass in Python
        return False
    others = [ch for ch in _NON_ASCII_WORD.findall(text) if ch.isalpha()]  # only these are looked at one by one
    plain = text.encode("ascii", "ignore")
    ascii_letters = len(plain) - len(plain.translate(None, _ASCII_LETTERS))
    latin = ascii_letters + sum(unicodedata.name(ch, "").startswith("LATIN") for ch in others)
    return latin < (ascii_letters + len(others)) / 2


#: Why spans do not fit answers mostly outside the Latin alphabet (:func:`mostly_other_script`).
OTHER_SCRIPT_NOTE = ("the shipped span calibrator was fitted on English answers, and names are found by their capital "
                     "letters (a script without case has none), so spans and their probabilities of being right are "
                     "unreliable for such answers")


def other_script_warning(answers: Iterable[str]) -> str | None:
    """``"2 of 5 answers are mostly outside the Latin alphabet: the shipped span calibrator ..."`` when any of
    ``answers`` is (:func:`mostly_other_script`); None otherwise.

    >>> other_script_warning(["Paris.", "\u6771\u4eac\u306f"]).split(":")[0], other_script_warning(["Paris."])
    ('1 of 2 answers is mostly outside the Latin alphabet', None)
    """
    texts = [str(a) for a in answers]
    other = sum(mostly_other_script(t) for t in texts)
    if not other:
        return None
    subject = (f"{other:,} of {len(texts):,} answers {'is' if other == 1 else 'are'}" if len(texts) > 1
               else "the answer is")
    return f"{subject} mostly outside the Latin alphabet: {OTHER_SCRIPT_NOTE}"


def rank_spans(risks: Iterable[SpanRisk], *, level: str = "all") -> list[SpanRisk]:
    """``risks`` from riskiest to safest: by probability of being right (lowest first) when every span has one, else
    by peak surprisal (highest first); ties to the earlier span.

    ``level``: ``"all"`` keeps every span, ``"fine"`` the dates, numbers and names, ``"sentence"`` the sentences.
    """
    check_choice(level, "level", ("all", "fine", "sentence"))
    kept = [r for r in risks if level == "all" or (r.kind == "sentence") == (level == "sentence")]
    if kept and all(r.probability is not None for r in kept):
        return sorted(kept, key=lambda r: (r.probability, r.span.start, r.span.end))
    return sorted(kept, key=lambda r: (-r.peak_surprisal, r.span.start, r.span.end))


def riskiest_span(trace: Trace, *, calibrator: SpanCalibrator | None = None,
                  explanation: TraceExplanation | None = None) -> SpanRisk | None:
    """The riskiest date, number or name of the answer (:func:`rank_spans`), or its riskiest sentence when it has
    none; None for an empty answer."""
    risks = span_risks(trace, explanation=explanation, calibrator=calibrator)
    fine = rank_spans(risks, level="fine")
    if fine:
        return fine[0]
    sentences = rank_spans(risks, level="sentence")
    return sentences[0] if sentences else None


SPAN_FEATURES = ("peak_surprisal", "mean_surprisal", "log_tokens", "risk_share", "position", "answer_risk",
                 "is_date", "is_number", "is_name")


def span_features(risks: Sequence[SpanRisk]) -> np.ndarray:
    """The :class:`SpanCalibrator`'s features, shape (n, 9), columns :data:`SPAN_FEATURES`: peak and mean surprisal,
    log of the span's token count, its share of the TRACE risk, its first token's position as a share of the answer
    (0 = first token), the answer's TRACE risk, and the span's kind (a sentence is all zeros). Entropy is left out
    so that the same calibrator serves traces with and without it."""
    risks = list(risks)
    return _feature_matrix(
        np.array([r.peak_surprisal for r in risks], dtype=np.float64),
        np.array([r.mean_surprisal for r in risks], dtype=np.float64),
        np.array([len(r.tokens) for r in risks], dtype=np.float64),
        np.array([r.risk_share for r in risks], dtype=np.float64),
        np.array([r.tokens[0] for r in risks], dtype=np.float64),
        np.array([r.n_answer_tokens for r in risks], dtype=np.float64), np.array([r.answer_risk for r in risks]),
        [r.kind for r in risks])


def _feature_matrix(peak: np.ndarray, mean: np.ndarray, n_tokens: np.ndarray, share: np.ndarray, first: np.ndarray,
                    n_answer: Any, answer_risk: Any, kinds: Sequence[str]) -> np.ndarray:
    kind = np.array(kinds, dtype=object)
    columns = [peak, mean, np.log(n_tokens), share, first / np.maximum(n_answer, 1), np.broadcast_to(
        np.asarray(answer_risk, dtype=np.float64), peak.shape), kind == "date", kind == "number", kind == "name"]
    return np.column_stack([np.asarray(c, dtype=np.float64) for c in columns]).reshape(len(peak), len(SPAN_FEATURES))


class SpanCalibrator:
    """The probability that a span is right: L2 logistic regression on standardised span features.

    Parameters
    ----------
    features : sequence of str
        Which of :data:`SPAN_FEATURES` to use; by default all of them. ``("peak_surprisal",)`` is Platt scaling of the
        span's peak surprisal (it ranks spans as :func:`rank_spans` does without a calibrator).
    C : float
        Inverse regularisation strength (scikit-learn's ``LogisticRegression(C=...)``).

    Examples
    --------
    >>> cal = SpanCalibrator().fit(risks, labels)  # doctest: +SKIP
    >>> span_risks(trace, calibrator=cal)[0].probability  # doctest: +SKIP
    0.83
    """

    def __init__(self, *, features: Sequence[str] = SPAN_FEATURES, C: float = 1.0) -> None:
        if isinstance(features, str):
            raise TypeError("`features` must be a sequence of feature names, not one str")
        self.features = tuple(check_choice(f, "features", SPAN_FEATURES) for f in features)
        if not self.features or len(set(self.features)) != len(self.features):
            raise ValueError(f"`features` must name one or more distinct features of {list(SPAN_FEATURES)}")
        self._columns = [SPAN_FEATURES.index(f) for f in self.features]
        self.C = check_real(C, "C", minimum=0.0, low_open=True)
        self.mean_: np.ndarray | None = None
        self.scale_: np.ndarray | None = None
        self.coef_: np.ndarray | None = None
        self.intercept_: float | None = None
        self.provenance: dict[str, Any] = {}

    def fit(self, risks: Sequence[SpanRisk], labels: Any, *, provenance: Mapping[str, Any] | None = None
            ) -> SpanCalibrator:
        """Fit on spans and their labels (1 = the span is right, 0 = wrong); both classes must occur."""
        risks = list(risks)
        y = check_labels(labels, "labels", n=len(risks))
        if len(np.unique(y)) < 2:
            raise ValueError("`labels` must hold both right (1) and wrong (0) spans to fit a span calibrator")
        F = span_features(risks)[:, self._columns]
        mean, scale = F.mean(axis=0), F.std(axis=0)
        scale = np.where(scale > 1e-12, scale, 1.0)
        coef, intercept = fit_logistic((F - mean) / scale, y, C=self.C)
        self.mean_, self.scale_, self.coef_, self.intercept_ = mean, scale, coef, intercept
        self.provenance = {"n_spans": int(len(y)), "n_right": int(y.sum()), **dict(provenance or {})}
        return self

    def predict_proba(self, risks: Sequence[SpanRisk]) -> np.ndarray:
        """Probability that each span is right, shape (n,)."""
        if self.coef_ is None:
            raise ValueError("this SpanCalibrator is not fitted yet: call fit() or load one with from_json()")
        return self._predict_features(span_features(list(risks)))

    def _fitted(self, unfitted: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """``mean_``, ``scale_``, ``coef_`` and ``intercept_`` (set together); ValueError ending ``unfitted`` if not."""
        mean, scale, coef, intercept = self.mean_, self.scale_, self.coef_, self.intercept_
        if mean is None or scale is None or coef is None or intercept is None:
            raise ValueError(f"this SpanCalibrator is not fitted yet: {unfitted}")
        return mean, scale, coef, intercept

    def _predict_features(self, F: np.ndarray) -> np.ndarray:
        """Probabilities from a full feature matrix (all :data:`SPAN_FEATURES` columns)."""
        mean, scale, coef, intercept = self._fitted("call fit() or load one with from_json()")
        F = F[:, self._columns]
        if len(F) == 0:
            return np.zeros(0)
        F = np.where(np.isfinite(F), F, mean)  # a non-finite statistic reads as the calibration average
        return sigmoid(((F - mean) / scale) @ coef + intercept)

    def to_json(self) -> str:
        """The fitted model as JSON (no pickle): features, standardisation, coefficients, provenance."""
        mean, scale, coef, intercept = self._fitted("nothing to save")
        return json.dumps({"type": "SpanCalibrator", "version": 1, "features": list(self.features), "C": self.C,
                           "mean": mean.tolist(), "scale": scale.tolist(), "coef": coef.tolist(),
                           "intercept": intercept, "provenance": self.provenance}, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> SpanCalibrator:
        """Load a span calibrator written by :meth:`to_json`; every field is checked, and a message names the first
        wrong one."""
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a span calibrator: the file is not JSON ({shorten(str(exc), 120)})") from None
        if not isinstance(data, dict) or data.get("type") != "SpanCalibrator":
            raise ValueError("not a span calibrator: `type` must be 'SpanCalibrator'")
        if data.get("version") != 1:
            raise ValueError(f"span calibrator `version` must be 1, got {shorten(data.get('version'), 40)}")
        features = data.get("features")
        if (not isinstance(features, list) or not features or len(set(map(str, features))) != len(features)
                or not all(isinstance(f, str) and f in SPAN_FEATURES for f in features)):
            raise ValueError(f"span calibrator `features` must be a list of distinct names from {list(SPAN_FEATURES)}")
        d = len(features)
        arrays = {}
        for name in ("mean", "scale", "coef"):
            value = data.get(name)
            if (not isinstance(value, list) or len(value) != d
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                               for v in value)):
                raise ValueError(f"span calibrator `{name}` must be a list of {d} finite numbers")
            arrays[name] = np.asarray(value, dtype=np.float64)
        if not (arrays["scale"] > 0).all():
            raise ValueError("span calibrator `scale` must be positive")
        intercept = data.get("intercept")
        if not isinstance(intercept, (int, float)) or isinstance(intercept, bool) or not math.isfinite(intercept):
            raise ValueError("span calibrator `intercept` must be a finite number")
        provenance = data.get("provenance", {})
        if not isinstance(provenance, dict):
            raise ValueError("span calibrator `provenance` must be an object")
        C = data.get("C", 1.0)
        if not isinstance(C, (int, float)) or isinstance(C, bool) or not math.isfinite(C) or C <= 0:
            raise ValueError("span calibrator `C` must be a positive number")
        cal = cls(features=features, C=C)
        cal.mean_, cal.scale_, cal.coef_, cal.intercept_ = arrays["mean"], arrays["scale"], arrays["coef"], float(
            intercept)
        cal.provenance = provenance
        return cal


def default_span_calibrator() -> SpanCalibrator:
    """The span calibrator shipped with the package (``trace_core/methods/span_calibrator.json``).

    Fitted by ``python -m bench.spans --write-calibrator trace_core/methods/span_calibrator.json`` on the labelled spans
    of SmolLM2-135M-Instruct's validation paragraphs about countries (per-fact judgements), its features chosen by
    cross-validation on those answers alone. On the test paragraphs it ranks wrong spans above right ones better than
    chance (span AUROC about 0.67) but its probabilities are no sharper than the base rate (``docs/results.md``): for
    another model or task, fit one on your own labelled spans. Its provenance names the data.
    """
    from importlib import resources

    return SpanCalibrator.from_json(resources.files(__package__).joinpath("span_calibrator.json").read_text(
        encoding="utf-8"))
