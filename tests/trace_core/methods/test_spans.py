"""Spans: the segmentation rules, the token-to-span mapping against a character-by-character reference, and the span
calibrator against scikit-learn."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from trace_core import Trace, TraceMetadata, explain_trace
from trace_core.methods.spans import (
    SPAN_FEATURES,
    Span,
    SpanCalibrator,
    completing_token,
    rank_spans,
    riskiest_span,
    segment,
    span_features,
    span_risks,
)


def kinds(text):
    return [(s.kind, s.text) for s in segment(text)]


def trace_of(tokens, surprisal, entropy=None):
    n = len(tokens)
    return Trace(prompt="Q", answer="".join(tokens), token_ids=np.arange(n), tokens=list(tokens),
                 surprisal=surprisal, entropy=entropy, top_ids=[[]] * n, top_logprobs=[[]] * n,
                 metadata=TraceMetadata(entropy_source="exact" if entropy is not None else "absent"))


@pytest.mark.parametrize("text, expected", [
    ("The capital of Mongolia is Khantak. It has 1,450,000 people.",
     [("sentence", "The capital of Mongolia is Khantak."), ("name", "Mongolia"), ("name", "Khantak"),
      ("sentence", "It has 1,450,000 people."), ("number", "1,450,000")]),
    # initials, titles and abbreviations do not end a sentence; dates win over numbers
    ("Dr. Smith met J. K. Rowling at the U.S. Army base on March 5, 2021. The population was 1 000 000 (est.) in "
     "1998.",
     [("sentence", "Dr. Smith met J. K. Rowling at the U.S. Army base on March 5, 2021."), ("name", "Dr. Smith"),
      ("name", "J. K. Rowling"), ("name", "U.S. Army"), ("date", "March 5, 2021"),
      ("sentence", "The population was 1 000 000 (est.) in 1998."), ("number", "1 000 000"), ("date", "1998")]),
    # particles inside names, elided articles, the possessive left out, the opener dropped
    ("The Democratic Republic of the Congo uses the Congolese franc. Côte d'Ivoire's capital is Yamoussoukro!",
     [("sentence", "The Democratic Republic of the Congo uses the Congolese franc."),
      ("name", "Democratic Republic of the Congo"), ("name", "Congolese"),
      ("sentence", "Côte d'Ivoire's capital is Yamoussoukro!"), ("name", "Côte d'Ivoire"), ("name", "Yamoussoukro")]),
    # line breaks end sentences; currency, signs (U+2212), percent and ordinals
    ("1. Paris\n2. Berlin\n\n- Rome costs €1,200.50 or −3.5% in the 21st century.",
     [("sentence", "1."), ("number", "1"), ("sentence", "Paris"), ("name", "Paris"), ("sentence", "2."),
      ("number", "2"), ("sentence", "Berlin"), ("name", "Berlin"),
      ("sentence", "- Rome costs €1,200.50 or −3.5% in the 21st century."), ("name", "Rome"),
      ("number", "€1,200.50"), ("number", "−3.5%"), ("number", "21st")]),
    # scripts without spaces or case: sentences and full-width digits, no names
    ("東京は日本の首都です。人口は１４００万人です。",
     [("sentence", "東京は日本の首都です。"), ("sentence", "人口は１４００万人です。"), ("number", "１４００")]),
    # thin and no-break spaces group digits; a title joins its name
    ("It is 1\u202f000 km, and 12\u00a0345 m; Mr. Bean said so. Paris, France.",
     [("sentence", "It is 1\u202f000 km, and 12\u00a0345 m; Mr. Bean said so."), ("number", "1\u202f000"),
      ("number", "12\u00a0345"), ("name", "Mr. Bean"), ("sentence", "Paris, France."), ("name", "Paris"),
      ("name", "France")]),
    # openers and "I" are not names; "approx." followed by a lower-case word does not end the sentence
    ("However, New York is large. I think it has approx. eight million people.",
     [("sentence", "However, New York is large."), ("name", "New York"),
      ("sentence", "I think it has approx. eight million people.")]),
    ("17 + 25 = 32", [("sentence", "17 + 25 = 32"), ("number", "17"), ("number", "25"), ("number", "32")]),
    # ISO dates, decades, scale words
    ("2020-03-11: the WHO spoke. In the 1990s it had 1.2 million members.",
     [("sentence", "2020-03-11: the WHO spoke."), ("date", "2020-03-11"), ("name", "WHO"),
      ("sentence", "In the 1990s it had 1.2 million members."), ("date", "1990s"), ("number", "1.2 million")]),
    # a decomposed umlaut (u + U+0308) stays inside its word
    ("Zu\u0308rich is in Switzerland.",
     [("sentence", "Zu\u0308rich is in Switzerland."), ("name", "Zu\u0308rich"), ("name", "Switzerland")]),
    ("", []),
    ("   \n\n  ", []),
])
def test_segment_rules(text, expected):
    assert kinds(text) == expected


def test_segment_offsets_point_into_the_text():
    text = "  Émile Zola was born on 2 April 1840 in Paris.\nHe wrote 20 novels!  "
    for span in segment(text):
        assert text[span.start:span.end] == span.text
    assert [s.text for s in segment(text) if s.kind == "date"] == ["2 April 1840"]


def test_segment_never_fails_and_keeps_its_invariants_on_random_text():
    rng = random.Random(0)
    alphabet = ("abcXYZ Éé\u0301ß東京 0123456789١٢٣ .,;:!?…'’\"-−+%€$\n\t\u00a0\u202f\u200d😀()" + "\ufffd")
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        spans = segment(text)
        sentences = [s for s in spans if s.kind == "sentence"]
        for a, b in zip(sentences, sentences[1:], strict=False):
            assert a.end <= b.start  # sentences do not overlap, in order
        fine = sorted((s for s in spans if s.kind != "sentence"), key=lambda s: s.start)
        for a, b in zip(fine, fine[1:], strict=False):
            assert a.end <= b.start  # dates, numbers and names do not overlap
        for s in fine:
            assert any(t.start <= s.start and s.end <= t.end for t in sentences)  # each lies in a sentence
        for s in spans:
            assert 0 <= s.start < s.end <= len(text) and text[s.start:s.end] == s.text
            assert s.text == s.text.strip()


def test_segment_checks_its_argument():
    with pytest.raises(TypeError, match="`text` must be a str"):
        segment(b"bytes")


def _reference_tokens_of(tokens, span):
    """Character by character: the tokens with a non-whitespace character inside the span."""
    out, position = [], 0
    for i, token in enumerate(tokens):
        if any(not ch.isspace() and span.start <= position + j < span.end for j, ch in enumerate(token)):
            out.append(i)
        position += len(token)
    return out


def test_tokens_that_split_words_map_to_their_span_and_match_a_reference():
    tokens = ["The", " capital", " of", " Mong", "olia", " is", " Kh", "ant", "ak", ".", " ", "It", " has",
              " 1", ",", "450", ",", "000", " people", ".\n", "Yes", "."]
    rng = np.random.default_rng(1)
    trace = trace_of(tokens, rng.uniform(0, 4, len(tokens)), rng.uniform(0, 3, len(tokens)))
    risks = span_risks(trace)
    assert [r.span.text for r in risks] == [s.text for s in segment("".join(tokens))]
    exp = explain_trace(trace)
    for r in risks:
        idx = _reference_tokens_of(tokens, r.span)
        assert r.tokens.tolist() == idx
        assert r.peak_surprisal == pytest.approx(trace.surprisal[idx].max())
        assert r.mean_surprisal == pytest.approx(trace.surprisal[idx].mean())
        assert r.peak_entropy == pytest.approx(trace.entropy[idx].max())
        assert r.mean_entropy == pytest.approx(trace.entropy[idx].mean())
        assert r.risk_share == pytest.approx(exp.contributions[idx].sum() / exp.risk)
    names = {r.span.text: r.tokens.tolist() for r in risks if r.kind == "name"}
    assert names == {"Mongolia": [3, 4], "Khantak": [6, 7, 8]}
    number = next(r for r in risks if r.kind == "number")
    assert number.span.text == "1,450,000" and number.tokens.tolist() == [13, 14, 15, 16, 17]
    assert 10 not in np.concatenate([r.tokens for r in risks])  # the whitespace token belongs to no span
    # the sentences' shares add up to the non-whitespace tokens' share of R
    sentence_share = sum(r.risk_share for r in risks if r.kind == "sentence")
    assert sentence_share == pytest.approx(np.delete(exp.contributions, 10).sum() / exp.risk)


def test_tokens_without_text_count_with_the_token_that_completes_their_character():
    # A byte-level tokenizer writes a multi-byte character on the token that completes it; the tokens before it
    # (empty text) chose its first bytes, and SmolLM2's Japanese and emoji answers put their highest surprisal there.
    tokens = ["", "\u6771", "", "\u4eac", "\u306f", " Tokyo", " ", "", "", "\U0001f31f", "\u3002", " Yes", "."]
    rng = np.random.default_rng(3)
    trace = trace_of(tokens, rng.uniform(0, 4, len(tokens)), rng.uniform(0, 3, len(tokens)))
    assert completing_token(tokens).tolist() == [1, 1, 3, 3, 4, 5, 6, 9, 9, 9, 10, 11, 12]
    exp = explain_trace(trace)
    risks = span_risks(trace)
    assert [r.span.text for r in risks] == [s.text for s in segment("".join(tokens))]
    for r in risks:
        # the character reference's tokens, and each empty token whose completing token is among them
        with_text = _reference_tokens_of(tokens, r.span)
        idx = sorted(with_text + [i for i, t in enumerate(tokens) if t == "" and
                                  next(j for j in range(i, len(tokens)) if tokens[j]) in with_text])
        assert r.tokens.tolist() == idx
        assert r.peak_surprisal == pytest.approx(trace.surprisal[idx].max())
        assert r.mean_surprisal == pytest.approx(trace.surprisal[idx].mean())
        assert r.peak_entropy == pytest.approx(trace.entropy[idx].max())
        assert r.risk_share == pytest.approx(exp.contributions[idx].sum() / exp.risk)
    assert risks[0].tokens.tolist() == list(range(6)) + [7, 8, 9, 10]  # one run but the space: the box is whole
    # an answer cut inside a character: its last bytes complete nothing and belong to no span
    cut = trace_of(["Yes", "", ""], [0.1, 2.0, 1.0])
    assert completing_token(cut.tokens).tolist() == [0, -1, -1]
    assert [r.tokens.tolist() for r in span_risks(cut)] == [[0]]
    assert completing_token([]).tolist() == []


def test_heatmap_boxes_a_japanese_sentence_once_with_its_byte_level_tokens():
    from app.heatmap import heatmap_html

    tokens = ["", "\u6771", "", "\u4eac", "\u306f", "", "\u3069", "\u3002"]
    trace = trace_of(tokens, [1.7, 1.2, 0.2, 1.2, 0.5, 1.5, 0.9, 0.1])
    (sentence,) = span_risks(trace)
    html = heatmap_html(trace, spans=[sentence])
    assert html.count('class="tr-span-rank"') == 1 and html.count("tr-span-first") == 1
    assert html.count("tr-span-last") == 1 and html.count("tr-span ") + html.count('tr-span"') == len(tokens)


def test_ranking_finds_the_wrong_value_and_falls_back_to_sentences():
    tokens = ["The", " capital", " of", " Mong", "olia", " is", " Kh", "ant", "ak", "."]
    surprisal = [0.1, 0.2, 0.1, 0.4, 0.1, 0.1, 3.5, 0.9, 0.2, 0.1]
    trace = trace_of(tokens, surprisal)
    ranked = rank_spans(span_risks(trace), level="fine")
    assert [r.span.text for r in ranked] == ["Khantak", "Mongolia"]
    assert riskiest_span(trace).span.text == "Khantak"
    assert [r.kind for r in rank_spans(span_risks(trace), level="sentence")] == ["sentence"]
    plain = trace_of(["yes", " it", " is", "."], [0.1, 2.0, 0.1, 0.1])
    assert riskiest_span(plain).kind == "sentence"
    assert riskiest_span(trace_of([], [])) is None
    with pytest.raises(ValueError, match="`level`"):
        rank_spans([], level="words")


def test_span_risks_without_entropy_and_checks_spans():
    trace = trace_of(["Paris", "."], [0.5, 0.1])
    risk = span_risks(trace)[0]
    assert np.isnan(risk.peak_entropy) and np.isnan(risk.mean_entropy)
    with pytest.raises(ValueError, match="outside the answer"):
        span_risks(trace, spans=[Span("name", 0, 99, "Paris")])
    with pytest.raises(TypeError, match="Span objects"):
        span_risks(trace, spans=[(0, 5)])


def _labelled_spans(n_answers=150, seed=0):
    """Spans of synthetic answers whose wrong name carries a surprisal spike more often than a right one."""
    rng = np.random.default_rng(seed)
    risks, labels = [], []
    for _ in range(n_answers):
        wrong = rng.random() < 0.4
        spike = rng.uniform(2.0, 5.0) if wrong else rng.uniform(0.0, 2.5)
        tokens = ["The", " capital", " is", " Kh", "ant", "ak", ".", " It", " has", " 12", " people", "."]
        s = rng.uniform(0.0, 0.8, len(tokens))
        s[3] = spike
        for r in span_risks(trace_of(tokens, s)):
            if r.span.text == "Khantak":
                risks.append(r), labels.append(int(not wrong))
            elif r.span.text == "12":
                risks.append(r), labels.append(1)
    return risks, np.array(labels)


def test_span_calibrator_equals_scikit_learn_and_round_trips():
    risks, labels = _labelled_spans()
    cal = SpanCalibrator(C=1.0).fit(risks, labels, provenance={"model_id": "toy"})
    F = span_features(risks)
    assert F.shape == (len(risks), len(SPAN_FEATURES))
    mean, scale = F.mean(axis=0), F.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    ref = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit((F - mean) / scale, labels)
    np.testing.assert_allclose(cal.predict_proba(risks), ref.predict_proba((F - mean) / scale)[:, 1], atol=1e-6)
    # the wrong names are the least likely to be right
    p = cal.predict_proba(risks)
    assert p[labels == 0].mean() < p[labels == 1].mean() - 0.2
    again = SpanCalibrator.from_json(cal.to_json())
    np.testing.assert_array_equal(again.predict_proba(risks), p)
    assert again.provenance == {"n_spans": len(labels), "n_right": int(labels.sum()), "model_id": "toy"}
    ranked = span_risks(trace_of(["Kh", "ant", "ak", "."], [4.0, 0.1, 0.1, 0.1]), calibrator=cal)
    assert all(0 <= r.probability <= 1 for r in ranked)


def test_span_calibrator_refuses_bad_input_and_broken_files():
    risks, labels = _labelled_spans(20)
    with pytest.raises(ValueError, match="both right"):
        SpanCalibrator().fit(risks, np.ones(len(risks)))
    with pytest.raises(ValueError, match="not fitted"):
        SpanCalibrator().predict_proba(risks)
    good = json.loads(SpanCalibrator().fit(risks, labels).to_json())
    for field, value, message in [("type", "TracePlus", "`type`"), ("coef", [1.0], "`coef`"),
                                  ("mean", ["x"] * len(SPAN_FEATURES), "`mean`"),
                                  ("scale", [0.0] * len(SPAN_FEATURES), "`scale`"),
                                  ("intercept", float("nan"), "`intercept`"), ("features", ["a"], "`features`"),
                                  ("version", 9, "`version`"), ("provenance", [], "`provenance`")]:
        broken = dict(good, **{field: value})
        with pytest.raises(ValueError, match=message):
            SpanCalibrator.from_json(json.dumps(broken))
    with pytest.raises(ValueError, match="not JSON"):
        SpanCalibrator.from_json("{" + "x" * 5000)


def test_span_calibrator_on_one_feature_is_platt_scaling_and_ranks_like_peak_surprisal():
    risks, labels = _labelled_spans(seed=3)
    cal = SpanCalibrator(features=("peak_surprisal",)).fit(risks, labels)
    peak = np.array([[r.peak_surprisal] for r in risks])
    z = (peak - peak.mean()) / peak.std()
    ref = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(z, labels)
    np.testing.assert_allclose(cal.predict_proba(risks), ref.predict_proba(z)[:, 1], atol=1e-6)
    trace = trace_of(["The", " capital", " of", " Mong", "olia", " is", " Kh", "ant", "ak", "."],
                     [0.1, 0.2, 0.1, 0.4, 0.1, 0.1, 3.5, 0.9, 0.2, 0.1])
    assert ([r.span for r in rank_spans(span_risks(trace, calibrator=cal))]
            == [r.span for r in rank_spans(span_risks(trace))])
    again = SpanCalibrator.from_json(cal.to_json())
    assert again.features == ("peak_surprisal",)
    with pytest.raises(ValueError, match="`features`"):
        SpanCalibrator(features=("peak_surprisal", "peak_surprisal"))
    with pytest.raises(ValueError, match="`features`"):
        SpanCalibrator(features=("loudness",))


@pytest.mark.slow
def test_the_shipped_span_calibrator_is_the_one_bench_spans_fits(tmp_path):
    from bench.spans import main

    out = tmp_path / "span_calibrator.json"
    main(["--bootstrap", "2", "--write-calibrator", str(out)])
    shipped = SpanCalibrator.from_json((Path(__file__).resolve().parents[3] / "trace_core" / "methods" / "span_calibrator.json")
                                       .read_text(encoding="utf-8"))
    again = SpanCalibrator.from_json(out.read_text(encoding="utf-8"))
    assert shipped.features == again.features and shipped.provenance == again.provenance
    np.testing.assert_allclose(shipped.coef_, again.coef_, rtol=1e-9)
    # it ranks a wrong name of the real model's answers below a right one: peak surprisal weighs against a span
    assert shipped.coef_[shipped.features.index("peak_surprisal")] < 0


def _answers_with_a_wrong_name(n=60, seed=0):
    rng = np.random.default_rng(seed)
    traces, labels = [], []
    for i in range(n):
        wrong = i % 3 == 0
        tokens = ["The", " capital", " is", " Kh", "ant", "ak", ".", " It", " has", " 12", " people", "."]
        s = rng.uniform(0.0, 0.5, len(tokens))
        s[3] = rng.uniform(3.0, 5.0) if wrong else rng.uniform(0.0, 0.6)
        traces.append(trace_of(tokens, s, rng.uniform(0.0, 1.0, len(tokens))))
        labels.append(int(not wrong))
    return traces, np.array(labels)


def test_score_rows_adds_the_riskiest_span_and_flags_by_it():
    import pandas as pd

    from trace_core import TracePlus
    from trace_core.flagging.flag import (
        OUTPUT_COLUMNS,
        SPAN_COLUMNS,
        previous_export,
        score_rows,
        select_flagged,
        unscored,
    )

    traces, labels = _answers_with_a_wrong_name()
    frame = pd.DataFrame({"answer": [t.answer for t in traces]})
    scored = score_rows(frame, traces, TracePlus().fit(traces, labels))
    assert list(scored.columns) == ["answer", *OUTPUT_COLUMNS]
    assert all(c.startswith("riskiest_span") for c in SPAN_COLUMNS)
    wrong = scored[labels == 0]
    assert (wrong["riskiest_span_text"] == "Khantak").all() and (wrong["riskiest_span_kind"] == "name").all()
    text = traces[0].answer
    assert text[wrong["riskiest_span_start"].iloc[0]:wrong["riskiest_span_end"].iloc[0]] == "Khantak"
    assert scored["riskiest_span_probability"].between(0, 1).all()
    # flagging by span: the answers whose weakest span is least likely to be right, least likely first
    by_span = select_flagged(scored, coverage=2 / 3, by="span")
    assert set(by_span.index) == set(np.flatnonzero(labels == 0))
    assert by_span["riskiest_span_probability"].is_monotonic_increasing
    with pytest.raises(ValueError, match="`by`"):
        select_flagged(scored, coverage=0.5, by="token")
    # an export made before the span columns existed is still recognised and rescored
    old = scored.drop(columns=list(SPAN_COLUMNS))
    assert previous_export(old.columns) and list(unscored(old).columns) == ["answer"]
    # and one of the dashboard's exports, which left out the spikes in context
    dashboard = scored.drop(columns=["spike_context"])
    assert previous_export(dashboard.columns) and list(unscored(dashboard).columns) == ["answer"]
    assert not previous_export(scored.drop(columns=["peak_risk_tokens"]).columns)


def test_cli_flag_writes_the_riskiest_span_columns_spreadsheet_safe(tmp_path, capsys):
    import csv

    import pandas as pd

    from trace_core import write_dataset
    from trace_core.cli import main

    traces, labels = _answers_with_a_wrong_name(seed=1)
    # a formula-like answer: its riskiest span must not become a live formula in a spreadsheet
    tokens = ["=", "HYPER", "LINK", "(", "1", ")", " Khantak", "."]
    traces.append(trace_of(tokens, [0.1, 4.0, 0.1, 0.1, 0.1, 0.1, 0.2, 0.1], [0.5] * len(tokens)))
    traces.append(trace_of(["=", "cmd", "|", " x"], [3.0, 0.1, 0.1, 0.1], [0.5] * 4))  # no name: the sentence
    labels = np.append(labels, [0, 0])
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                          "label": labels})
    data = tmp_path / "answers.jsonl"
    write_dataset(frame, data, traces=traces)
    calibrator, flagged = tmp_path / "cal.json", tmp_path / "flagged.csv"
    assert main(["fit", str(data), "--out", str(calibrator)]) == 0
    assert main(["flag", str(data), "--calibrator", str(calibrator), "--threshold", "1.0", "--out", str(flagged)]) == 0
    with flagged.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {"riskiest_span_text", "riskiest_span_kind", "riskiest_span_start", "riskiest_span_end",
            "riskiest_span_probability"} <= set(rows[0])
    assert all(not r["riskiest_span_text"].startswith(("=", "+", "-", "@")) for r in rows)
    assert any(r["riskiest_span_text"] == "'=cmd| x" and r["riskiest_span_kind"] == "sentence" for r in rows)
    khantak = [r for r in rows if r["riskiest_span_text"] == "Khantak"]
    assert khantak and all(0 <= float(r["riskiest_span_probability"]) <= 1 for r in khantak)
    # --by span: the flagged rows are those whose riskiest span is least likely right, in that order
    assert main(["flag", str(data), "--calibrator", str(calibrator), "--coverage", "0.5", "--by", "span",
                 "--out", str(flagged)]) == 0
    with flagged.open(newline="", encoding="utf-8") as f:
        by_span = [float(r["riskiest_span_probability"]) for r in csv.DictReader(f)]
    everything = sorted(float(r["riskiest_span_probability"]) for r in rows)
    assert by_span == everything[:len(by_span)] and len(by_span) == len(rows) - int(np.ceil(0.5 * len(rows)))
    assert main(["flag", str(data), "--calibrator", str(calibrator), "--max-risk", "0.2", "--risk-data", str(data),
                 "--by", "span", "--out", str(flagged)]) == 1  # an error, said in one line
    assert "Latin alphabet" not in capsys.readouterr().err  # English answers: nothing to caution


def test_flag_by_span_cautions_about_answers_mostly_outside_the_latin_alphabet(tmp_path, capsys):
    import pandas as pd

    from trace_core import write_dataset
    from trace_core.cli import main

    traces, labels = _answers_with_a_wrong_name(seed=2)
    japanese = ["", "\u6771", "\u4eac", "\u306f", "\u3069", "\u3053", "\u3002"]
    traces.append(trace_of(japanese, [2.0, 0.3, 0.4, 0.1, 1.5, 0.2, 0.1], [0.5] * len(japanese)))
    labels = np.append(labels, [0])
    frame = pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                          "label": labels})
    data, calibrator, flagged = tmp_path / "answers.jsonl", tmp_path / "cal.json", tmp_path / "flagged.csv"
    write_dataset(frame, data, traces=traces)
    assert main(["fit", str(data), "--out", str(calibrator)]) == 0
    capsys.readouterr()
    assert main(["flag", str(data), "--calibrator", str(calibrator), "--threshold", "0.5", "--by", "span",
                 "--out", str(flagged)]) == 0
    err = capsys.readouterr().err
    assert f"warning: 1 of {len(traces)} answers is mostly outside the Latin alphabet: the shipped span calibrator" in err
    assert main(["flag", str(data), "--calibrator", str(calibrator), "--threshold", "0.5", "--out", str(flagged)]) == 0
    assert "Latin alphabet" not in capsys.readouterr().err  # judged by the answer: spans play no part


def test_heatmap_boxes_the_riskiest_spans_and_the_list_ranks_them():
    from app.heatmap import heatmap_html, legend_html, signal_values
    from app.spans import boxed_spans, ranked_spans, spans_frame

    tokens = ["The", " capital", " of", " <b>Mong", "olia", " is", " Kh", "ant", "ak", ".", " Yes", "."]
    trace = trace_of(tokens, [0.1, 0.2, 0.1, 0.4, 0.1, 0.1, 3.5, 0.9, 0.2, 0.1, 0.2, 0.1])
    exp = explain_trace(trace)
    fine, sentences = ranked_spans(trace, exp)
    assert [r.span.text for r in fine][:2] == ["Khantak", "Mongolia"]  # "<b>" is not part of the name
    assert all(0 <= r.probability <= 1 for r in fine + sentences)
    boxed = boxed_spans(fine, sentences)
    html = heatmap_html(trace, explanation=exp, spans=boxed)
    assert html.count('class="tr-span-rank"') == len(boxed)
    first = html.index('<sup class="tr-span-rank" aria-hidden="true">1</sup>')
    assert html[first:].index('data-index="6"') < html[first:].index('data-index="7"')  # the box opens at " Kh"
    assert html.count("tr-span-first") == len(boxed) and html.count("tr-span-last") == len(boxed)
    assert "riskiest span 1 (name, " in html and "<b>Mong" not in html  # token text escaped
    assert "riskiest spans" in legend_html(signal_values(trace, "surprisal", exp), spans=True)
    frame = spans_frame(fine, sentences)
    assert list(frame["kind"]) == ["name"] * len(fine) + ["sentence"] * len(sentences)
    assert frame["rank"].tolist()[:len(fine)] == list(range(1, len(fine) + 1))
    assert heatmap_html(trace, explanation=exp).count("tr-span") == 0  # no spans given, no box


def test_a_boxed_span_and_its_number_open_at_its_first_letter_not_at_the_space_before_it():
    """The badge used to sit before the first token's leading space: "The³ Golden Horde"."""
    import re

    from app.heatmap import heatmap_html
    from app.spans import ranked_spans

    tokens = ["The", " Golden", " Horde", " ruled", "."]
    trace = trace_of(tokens, [0.1, 2.5, 1.9, 0.2, 0.1])
    fine, _ = ranked_spans(trace, explain_trace(trace))
    (name,) = [r for r in fine if r.span.text == "Golden Horde"]
    html = heatmap_html(trace, spans=[name])
    opening = re.search(r'<span class="tr-lead"[^>]*>( +)</span><sup class="tr-span-rank"[^>]*>1</sup>'
                        r'<span class="([^"]*)"[^>]*data-index="1"[^>]*>([^<]*)<', html)
    assert opening is not None, html[:600]
    lead, classes, text = opening.groups()
    assert lead == " " and "tr-span-first" in classes.split()
    assert text == "Golden"  # the space is drawn just before the box, in the token's colour
    assert html.count('class="tr-lead"') == 1  # only where a box opens
    visible = re.sub(r'<span class="tr-card".*?</span></span>|<sup[^>]*>\d+</sup>|<[^>]+>', "", html)
    assert visible.startswith("The Golden Horde ruled.")


def test_mostly_other_script_counts_letters_as_a_plain_pass_over_every_character_does():
    """Its fast path (ASCII letters counted in bytes, only non-ASCII word characters looked up) against the
    definition: a majority of the text's letters (str.isalpha) whose Unicode name is not LATIN."""
    import unicodedata

    from trace_core.methods.spans import mostly_other_script

    def plain(text):
        letters = [ch for ch in text if ch.isalpha()]
        return sum(unicodedata.name(ch, "").startswith("LATIN") for ch in letters) < len(letters) / 2

    rng = random.Random(3)
    alphabet = "abcXYZ \u00e9\u00e8\u00e7\u00d4\u00df\u0111\u0141 \u6771\u4eac\u306f \u0645\u0631\u062d \u041c\u043e\u0441 12_,.!?\u00b2\u00bd\u0301\u00aa\u0663\U0001d400"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(5000)]
    assert [mostly_other_script(t) for t in texts] == [plain(t) for t in texts]
    assert any(mostly_other_script(t) for t in texts) and not all(mostly_other_script(t) for t in texts)
