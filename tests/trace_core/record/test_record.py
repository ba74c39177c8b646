"""The recorder against a naive full-logits computation, teacher forcing against generation, and model loading."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trace_core import (  # noqa: E402
    DecodingConfig,
    ModelNotFoundError,
    UnsafeModelError,
    generate_trace,
    generate_traces,
    load_model,
    score_answer,
    score_answers,
)
from trace_core.evaluation.run import AnswerValueError  # noqa: E402
from trace_core.record import beam_logprobs, encode_prompt, token_pieces  # noqa: E402

PROMPTS = ["Q: What is 12 plus 7? A:", "The capital of France is", "Unicode: café"]


def naive_generate(lm, prompt, config):
    """Plain generate() keeping the full logits, then surprisal/entropy/top-k computed from them in float64."""
    ids = torch.tensor([encode_prompt(lm.tokenizer, prompt, chat_template=config.chat_template)])
    kwargs = dict(max_new_tokens=config.max_new_tokens, do_sample=config.do_sample, num_beams=1,
                  return_dict_in_generate=True, output_logits=True, pad_token_id=lm.tokenizer.pad_token_id)
    if config.do_sample:
        kwargs.update(temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
    if config.seed is not None:
        torch.manual_seed(config.seed)
    with torch.no_grad():
        out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    tokens = out.sequences[0, ids.shape[1]:].numpy()
    logp = torch.log_softmax(torch.stack(out.logits, dim=1)[0].double(), dim=-1)  # (T, V)
    p = logp.exp()
    entropy = -(torch.where(p > 0, p * logp, torch.zeros_like(p))).sum(-1).numpy()
    surprisal = -logp[torch.arange(len(tokens)), torch.as_tensor(tokens)].numpy()
    top_lp, top_ids = torch.topk(logp, k=config.n_alternatives, dim=-1)
    return tokens, surprisal, entropy, top_lp.numpy(), top_ids.numpy()


@pytest.mark.parametrize("config", [
    DecodingConfig(max_new_tokens=16),
    DecodingConfig(max_new_tokens=16, do_sample=True, temperature=0.7, top_k=20, top_p=0.9, seed=3),
    DecodingConfig(max_new_tokens=16, do_sample=True, temperature=1.5, seed=11),
], ids=["greedy", "sample-warped", "sample-hot"])
@pytest.mark.parametrize("prompt", PROMPTS[:2])
@pytest.mark.parametrize("buffer_steps", [64, 3], ids=["one-flush", "flush-every-3"])
def test_recorder_matches_naive_full_logits(lm, config, prompt, buffer_steps, monkeypatch):
    from trace_core.record.stats import TraceRecorder

    # A 3-step buffer makes the recorder flush mid-generation, reading sampled tokens back from input_ids.
    monkeypatch.setattr(TraceRecorder, "max_steps", buffer_steps)
    tokens, surprisal, entropy, top_lp, top_ids = naive_generate(lm, prompt, config)
    trace = generate_trace(lm, prompt, config=config)
    eos = lm.tokenizer.eos_token_id
    n = int(np.flatnonzero(tokens == eos)[0]) if (tokens == eos).any() else len(tokens)
    np.testing.assert_array_equal(trace.token_ids, tokens[:n])
    np.testing.assert_allclose(trace.surprisal, surprisal[:n], atol=1e-5)
    np.testing.assert_allclose(trace.entropy, entropy[:n], atol=1e-5)
    np.testing.assert_allclose(trace.top_logprobs, top_lp[:n], atol=1e-5)
    np.testing.assert_array_equal(trace.top_ids[:, 0], top_ids[:n, 0])
    # The recorded distribution is the unwarped one, so under greedy decoding the chosen token is the argmax.
    if not config.do_sample:
        assert (trace.ranks == 1).all()
    assert trace.metadata.processed is False
    assert trace.metadata.decoding == config.to_dict()
    assert (trace.metadata.entropy_source, trace.metadata.entropy_k) == ("exact", None) and trace.has_entropy


def test_sampled_tokens_identical_to_plain_generate(lm):
    config = DecodingConfig(max_new_tokens=20, do_sample=True, temperature=1.3, top_p=0.95, seed=5)
    tokens, *_ = naive_generate(lm, PROMPTS[0], config)
    trace = generate_trace(lm, PROMPTS[0], config=config)
    assert trace.token_ids.tolist() == tokens[:len(trace)].tolist()
    # Sampling at high temperature picks non-argmax tokens; the rank must then be > 1 somewhere and agree with top-k.
    assert (trace.ranks > 1).any()
    in_top = trace.ranks <= trace.n_alternatives
    np.testing.assert_array_equal(trace.top_ids[in_top, trace.ranks[in_top] - 1], trace.token_ids[in_top])


def test_teacher_forcing_reproduces_generation_trace(lm):
    config = DecodingConfig(max_new_tokens=24, n_alternatives=4)
    for prompt in PROMPTS:
        generated = generate_trace(lm, prompt, config=config)
        scored = score_answer(lm, prompt, generated.token_ids.tolist(), n_alternatives=4)
        np.testing.assert_array_equal(scored.token_ids, generated.token_ids)
        assert scored.tokens == generated.tokens and scored.answer == generated.answer
        np.testing.assert_allclose(scored.surprisal, generated.surprisal, atol=1e-4)
        np.testing.assert_allclose(scored.entropy, generated.entropy, atol=1e-4)
        np.testing.assert_allclose(scored.top_logprobs, generated.top_logprobs, atol=1e-4)
        np.testing.assert_array_equal(scored.ranks, generated.ranks)
        assert scored.metadata.source == "teacher_forced" and scored.metadata.entropy_source == "exact"


def test_batched_generation_with_left_padding_matches_single(lm):
    config = DecodingConfig(max_new_tokens=12)
    singles = [generate_trace(lm, p, config=config) for p in PROMPTS]
    batched = generate_traces(lm, PROMPTS, config=config, batch_size=3)
    assert len({len(encode_prompt(lm.tokenizer, p)) for p in PROMPTS}) > 1  # padding really happens
    for one, many in zip(singles, batched, strict=True):
        np.testing.assert_array_equal(one.token_ids, many.token_ids)
        np.testing.assert_allclose(one.surprisal, many.surprisal, atol=1e-4)
        np.testing.assert_allclose(one.entropy, many.entropy, atol=1e-4)


def test_batched_and_chunked_scoring_match_single_pass(lm):
    answers = [generate_trace(lm, p, config=DecodingConfig(max_new_tokens=20)).token_ids.tolist() for p in PROMPTS]
    singles = [score_answer(lm, p, a) for p, a in zip(PROMPTS, answers, strict=True)]
    # A tiny logits budget forces one position per chunk, through the key/value cache.
    chunked = score_answers(lm, PROMPTS, answers, batch_size=2, max_logits_bytes=4 * lm.vocab_size)
    for one, many in zip(singles, chunked, strict=True):
        np.testing.assert_allclose(one.surprisal, many.surprisal, atol=1e-4)
        np.testing.assert_allclose(one.entropy, many.entropy, atol=1e-4)
        np.testing.assert_array_equal(one.top_ids[:, 0], many.top_ids[:, 0])


def test_recorders_return_a_table_whose_rows_are_the_traces(lm):
    from trace_core import TraceTable, trace_risk

    config = DecodingConfig(max_new_tokens=8, n_alternatives=3)
    generated = generate_traces(lm, PROMPTS, config=config, batch_size=1)  # no padding: equal to one call's
    scored = score_answers(lm, PROMPTS, [t.token_ids for t in generated], n_alternatives=3)
    for table in (generated, scored):
        assert isinstance(table, TraceTable) and len(table) == len(PROMPTS)
        assert table.offsets.tolist() == np.cumsum([0, *(len(t) for t in table)]).tolist()
    # Each row is the trace one call for that prompt records; a table compares equal to the list of its rows.
    assert generated == [generate_trace(lm, p, config=config) for p in PROMPTS]
    assert generated[1] == generate_trace(lm, PROMPTS[1], config=config)
    np.testing.assert_allclose(scored.surprisal, generated.surprisal, atol=1e-4)
    # A table goes where a list of traces went: scoring and as a list.
    np.testing.assert_array_equal(trace_risk(generated), trace_risk(list(generated)))
    assert [t.answer for t in [*generated, *scored]] == [t.answer for t in generated] * 2
    assert isinstance(score_answers(lm, [], []), TraceTable) and len(generate_traces(lm, [], config=config)) == 0


def test_scoring_text_answers_and_empty_answer(lm):
    traces = score_answers(lm, PROMPTS[:2], [" Paris", ""])
    assert traces[0].answer.strip() == "Paris" and len(traces[0]) >= 1
    assert len(traces[1]) == 0 and traces[1].answer == ""


def test_generation_stops_before_eos(lm):
    config = DecodingConfig(max_new_tokens=10)
    first = generate_trace(lm, PROMPTS[0], config=config)
    stop_token = int(first.token_ids[3])
    original = lm.model.generation_config.eos_token_id
    lm.model.generation_config.eos_token_id = stop_token
    try:
        stopped = generate_trace(lm, PROMPTS[0], config=config)
    finally:
        lm.model.generation_config.eos_token_id = original
    first_stop = int(np.flatnonzero(first.token_ids == stop_token)[0])
    assert len(stopped) == first_stop
    np.testing.assert_array_equal(stopped.token_ids, first.token_ids[:first_stop])
    assert stopped.metadata.extra["finish_reason"] == "eos"
    assert first.metadata.extra["finish_reason"] == "length"


@pytest.mark.parametrize("kwargs, what", [
    ({"num_beams": 4}, "beam search"),
    ({"assistant_model": object()}, "assisted decoding"),
    ({"prompt_lookup_num_tokens": 3}, "prompt-lookup"),
    ({"num_return_sequences": 2}, "several sequences"),
])
def test_multi_sequence_decoding_is_refused(tiny_models, kwargs, what):
    with pytest.raises(ValueError, match=what):
        generate_trace(tiny_models["gpt2"], PROMPTS[0], generate_kwargs=kwargs)


def test_processing_flag_set_by_repetition_penalty(tiny_models):
    trace = generate_trace(tiny_models["gpt2"], PROMPTS[0],
                           config=DecodingConfig(max_new_tokens=5, repetition_penalty=1.3))
    assert trace.metadata.processed is True


def test_memory_kept_is_independent_of_vocabulary():
    from bench._models import random_lm

    # Word-level tokenizers without an end-of-answer token: both answers run to max_new_tokens, so only V differs.
    config = DecodingConfig(max_new_tokens=16, n_alternatives=3)
    kept = {}
    for vocab in (300, 6000):
        lm = random_lm(vocab_size=vocab, hidden=32, layers=1)
        assert lm.vocab_size == vocab
        generated = generate_trace(lm, "w1 w2 w3", config=config)
        scored = score_answer(lm, "w1 w2 w3", generated.token_ids, n_alternatives=3)
        for trace in (generated, scored):
            arrays = [trace.token_ids, trace.surprisal, trace.entropy, trace.top_ids, trace.top_logprobs, trace.ranks]
            assert len(trace) == 16
            assert sum(a.nbytes for a in arrays) / len(trace) == 8 * (1 + 1 + 1 + 3 + 3 + 1)
        kept[vocab] = [(a.shape, a.dtype) for t in (generated, scored)
                       for a in (t.token_ids, t.surprisal, t.entropy, t.top_ids, t.top_logprobs, t.ranks)]
    assert kept[300] == kept[6000]


@pytest.mark.parametrize("text", ["café naïve 日本語 🙂", "Line one\nLine two\n\t<b>x</b> $x$", " leading space", ""])
def test_token_pieces_concatenate_to_decoded_text(lm, text):
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = token_pieces(lm.tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == lm.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def test_token_pieces_split_multibyte_character_onto_completing_token(tiny_models):
    tok = tiny_models["gpt2"].tokenizer
    ids = tok("🙂", add_special_tokens=False)["input_ids"]
    if len(ids) < 2:
        pytest.skip("the emoji is a single token in this vocabulary")
    pieces = token_pieces(tok, ids)
    assert pieces[-1] == "🙂" and all(p == "" for p in pieces[:-1])


def test_chat_template_is_applied_and_recorded(tiny_models):
    lm = tiny_models["gpt2"]
    trace = generate_trace(lm, "hello", config=DecodingConfig(max_new_tokens=4, chat_template=True))
    assert trace.metadata.chat_template is True
    ids = encode_prompt(lm.tokenizer, "hello", chat_template=True)
    assert "<|assistant|>" in lm.tokenizer.decode(ids)
    with pytest.raises(ValueError, match="no chat template"):
        generate_trace(tiny_models["llama"], "hello", config=DecodingConfig(chat_template=True))


def test_load_model_missing_id_gives_one_clear_sentence():
    with pytest.raises(ModelNotFoundError, match="was not found locally") as info:
        load_model("nobody/no-such-model-xyz", device="cpu")
    assert "\n" not in str(info.value)


def test_load_model_missing_folder(tmp_path):
    with pytest.raises(ModelNotFoundError, match="No model folder"):
        load_model(str(tmp_path / "nothing-here"), device="cpu")
    with pytest.raises(ModelNotFoundError, match="has no weights"):
        load_model(tmp_path, device="cpu")


@pytest.fixture
def pickled_folder(tiny_model_dirs, tmp_path):
    """The tiny GPT-2 with its weights as a pickle (pytorch_model.bin) instead of safetensors."""
    import shutil

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_model_dirs["gpt2"], folder)
    state = load_model(folder, device="cpu").model.state_dict()
    for f in folder.glob("*.safetensors"):
        f.unlink()
    torch.save(state, folder / "pytorch_model.bin")
    return folder


def test_load_model_refuses_pickle_weights(pickled_folder):
    folder = pickled_folder
    with pytest.raises(UnsafeModelError, match="pickle"):
        load_model(folder, device="cpu")


def test_empty_prompt_is_rejected(tiny_models):
    with pytest.raises(ValueError, match="prompt is empty"):
        generate_trace(tiny_models["gpt2"], "")


@pytest.mark.parametrize("module", ["trace_core", "trace_core.record"])
def test_import_does_not_import_torch(module):
    code = (f"import sys, {module}; bad = [m for m in ('torch', 'transformers', 'streamlit', 'numba', 'ray')"
            " if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_masked_tokens_give_finite_entropy_of_the_processed_distribution(tiny_models):
    lm = tiny_models["gpt2"]
    banned = list(range(10, 200))
    trace = generate_trace(lm, PROMPTS[0], config=DecodingConfig(max_new_tokens=6),
                           generate_kwargs={"suppress_tokens": banned})
    assert trace.metadata.processed is True
    assert np.isfinite(trace.entropy).all() and not np.isin(trace.token_ids, banned).any()
    ids = torch.tensor([encode_prompt(lm.tokenizer, PROMPTS[0])])
    with torch.no_grad():
        out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                suppress_tokens=banned, return_dict_in_generate=True, output_scores=True,
                                pad_token_id=lm.tokenizer.pad_token_id)
    logp = torch.log_softmax(torch.stack(out.scores, dim=1)[0].double(), dim=-1)
    p = logp.exp()
    expected = -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1).numpy()
    np.testing.assert_allclose(trace.entropy, expected[:len(trace)], atol=1e-5)


def test_beam_logprobs_are_sequence_log_probabilities(tiny_models):
    lm = tiny_models["gpt2"]
    (scores,) = beam_logprobs(lm, [PROMPTS[0]], num_beams=3, max_new_tokens=5)
    assert len(scores) == 3 and scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)
    # The best beam's log-probability equals the teacher-forced sum over its tokens.
    ids = torch.tensor([encode_prompt(lm.tokenizer, PROMPTS[0])])
    with torch.no_grad():
        out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=3, max_new_tokens=5,
                                length_penalty=0.0, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id)
    best = out[0, ids.shape[1]:].tolist()
    assert -score_answer(lm, PROMPTS[0], best).surprisal.sum() == pytest.approx(scores[0], abs=1e-4)
    with pytest.raises(ValueError, match="`num_beams` must be an int >= 2"):
        beam_logprobs(lm, [PROMPTS[0]], num_beams=1)


def test_allow_list_refuses_other_models_and_accepts_listed_ones(tiny_model_dirs, monkeypatch):
    from trace_core import ModelNotAllowedError

    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", f"org/other-model, {tiny_model_dirs['gpt2']}")
    with pytest.raises(ModelNotAllowedError, match="not on this deployment's allow-list"):
        load_model(tiny_model_dirs["llama"], device="cpu")
    assert load_model(tiny_model_dirs["gpt2"], device="cpu").vocab_size > 0
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "")
    assert load_model(tiny_model_dirs["llama"], device="cpu").vocab_size > 0


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "off", ""])
def test_pickle_weights_stay_refused_when_the_environment_says_off(pickled_folder, monkeypatch, value):
    monkeypatch.setenv("TRACE_ALLOW_PICKLE_WEIGHTS", value)
    with pytest.raises(UnsafeModelError):
        load_model(pickled_folder, device="cpu")


@pytest.mark.parametrize("value", ["1", "true", "Yes", "ON"])
def test_pickle_opt_in_through_environment(pickled_folder, monkeypatch, value):
    monkeypatch.setenv("TRACE_ALLOW_PICKLE_WEIGHTS", value)
    assert load_model(pickled_folder, device="cpu").vocab_size > 0


@pytest.mark.parametrize("name", ["TRACE_ALLOW_PICKLE_WEIGHTS", "TRACE_TRUST_REMOTE_CODE"])
def test_a_policy_flag_that_is_not_a_flag_is_an_error_naming_it(tiny_model_dirs, monkeypatch, name):
    from trace_core.settings import SettingError

    monkeypatch.setenv(name, "maybe")
    with pytest.raises(SettingError, match=f"{name}='maybe'"):
        load_model(tiny_model_dirs["gpt2"], device="cpu")


def test_inputs_past_the_model_context_are_refused_with_a_message(tiny_models):
    tiny_gpt2 = tiny_models["gpt2"]
    from trace_core.record import context_length

    limit = context_length(tiny_gpt2)
    assert limit is not None
    long_prompt = "1" * (limit + 10)
    with pytest.raises(AnswerValueError, match=r"answer 0 \(0-based position in the input\) cannot be generated: "
                                               r"its prompt is .* at most") as caught:
        generate_traces(tiny_gpt2, [long_prompt], config=DecodingConfig(max_new_tokens=4))
    assert caught.value.index == 0  # a caller that knows the file's rows names the row (the command line does)
    with pytest.raises(ValueError, match=r"answer 1: .* at most"):
        score_answers(tiny_gpt2, ["Q: 1", "Q: 2"], ["2", "3" * (limit + 10)])


def test_teacher_forcing_statistics_in_small_blocks_match_one_block(lm, monkeypatch):
    from trace_core.record import stats

    prompts, answers = ["Q: 12 + 7 =", "Q: 3 + 4 =", "Q: a b"], [" 19", " 7 and then 8", " c d e f g"]
    whole = score_answers(lm, prompts, answers, batch_size=3)
    monkeypatch.setattr(stats, "STATS_BLOCK_BYTES", 1)  # one token per block
    blocks = score_answers(lm, prompts, answers, batch_size=3)
    for a, b in zip(whole, blocks, strict=True):
        assert a == b


@pytest.mark.parametrize("call, error, match", [
    (lambda lm: score_answers(lm, ["Q"], ["A"], n_alternatives=2.5), TypeError, "`n_alternatives` must be an int"),
    (lambda lm: score_answers(lm, ["Q"], ["A"], n_alternatives=-1), ValueError, "`n_alternatives` must be an int"),
    (lambda lm: score_answers(lm, ["Q"], ["A"], batch_size="2"), TypeError, "`batch_size` must be an int >= 1"),
    (lambda lm: score_answers(lm, ["Q"], ["A"], batch_size=0), ValueError, "`batch_size` must be an int >= 1"),
    (lambda lm: score_answers(lm, ["Q"], ["A"], max_logits_bytes=True), TypeError, "`max_logits_bytes`"),
    (lambda lm: score_answers(lm, ["Q"], ["A"], max_logits_bytes=0), ValueError, "`max_logits_bytes`"),
    (lambda lm: score_answers(lm, ["Q"], ["A"], chat_template="yes"), TypeError, "`chat_template`"),
    (lambda lm: generate_traces(lm, ["Q"], batch_size=1.0), TypeError, "`batch_size` must be an int >= 1"),
    (lambda lm: generate_traces(lm, ["Q"], batch_size=0), ValueError, "`batch_size` must be an int >= 1"),
    (lambda lm: beam_logprobs(lm, ["Q"], num_beams=2.5), TypeError, "`num_beams` must be an int >= 2"),
    (lambda lm: beam_logprobs(lm, ["Q"], max_new_tokens=0), ValueError, "`max_new_tokens` must be an int >= 1"),
    (lambda lm: generate_traces("not a model", ["Q"]), TypeError, "`lm` must be a LoadedModel"),
    (lambda lm: generate_traces(lm, "Q"), TypeError, "`prompts` must be a list of strings"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_arguments_are_checked_once_with_type_and_range_errors(tiny_models, call, error, match):
    # Wrong type -> TypeError, right type out of range -> ValueError (n_alternatives=2.5 used to be a ValueError).
    with pytest.raises(error, match=match):
        call(tiny_models["gpt2"])


@pytest.mark.parametrize("width", [4096, 4097, 32000, 50257])
@pytest.mark.parametrize("k", [1, 5, 32])
def test_top_k_in_runs_gives_torch_topk_values_and_ids_of_those_values(width, k):
    """The recorder's two-stage top-k (run maxima, then the tokens of the best runs and the tail) against torch.topk:
    the same values in the same order; the same ids where the values are distinct; on ties, ids of tokens holding
    exactly those values, none twice. Rows: continuous logits, heavy ties, a row with fewer finite logits than k
    (masked tokens), and the best tokens all in the tail."""
    from trace_core.record.stats import _chunk_maxima, _topk_in_chunks

    gen = torch.Generator().manual_seed(width + k)
    x = torch.randn(6, width, generator=gen) * 3
    x[1] = torch.round(x[1])  # a dozen distinct values
    x[2] = float("-inf")
    x[2, torch.randperm(width, generator=gen)[:3]] = torch.tensor([1.0, 2.0, 0.5])
    x[3, -(width % 128 or 1):] += 50.0  # the tail (or the last token) holds the best
    x[4, ::700] += 40.0  # the best tokens spread over many runs
    shift = torch.randn(6, 1, generator=gen)
    maxima, row_max = _chunk_maxima(x, k)
    assert torch.equal(row_max, x.amax(dim=-1, keepdim=True))
    shifted = x - shift  # taken after the maxima, as in stats_in_place
    values, ids = _topk_in_chunks(shifted, k, maxima)
    expected_values, expected_ids = torch.topk(shifted, k=k, dim=-1)
    assert torch.equal(values, expected_values)
    assert torch.equal(shifted.gather(-1, ids), values)
    assert all(len(set(row.tolist())) == k for row in ids)
    for row in (0, 3, 4):  # distinct values
        assert torch.equal(ids[row], expected_ids[row])


def test_recorder_statistics_equal_with_and_without_the_runs(monkeypatch):
    from trace_core.record import stats

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(12, 50257, generator=gen) * 4
    chosen = torch.randint(0, 50257, (12,), generator=gen)
    for pick in (None, chosen):
        fast = stats.stats_in_place(logits.clone(), 5, pick)
        monkeypatch.setattr(stats, "CHUNKED_FROM", 10**9)
        plain = stats.stats_in_place(logits.clone(), 5, pick)
        monkeypatch.undo()
        for a, b in zip(fast, plain, strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("width", [300, 50257])
def test_recorder_statistics_equal_a_float64_log_softmax(width):
    """Entropy, top-k, chosen log-probabilities and ranks against float64 log_softmax, on rows with masked tokens
    (-inf, as logits processors leave them) and with a sampled (not the top) token."""
    from trace_core.record import stats

    gen = torch.Generator().manual_seed(width)
    logits = torch.randn(5, width, generator=gen) * 4
    logits[1, ::3] = float("-inf")
    logits[2] = float("-inf")
    logits[2, :7] = torch.arange(7.0)
    chosen = torch.tensor([3, 4, 2, width - 1, 0])
    for pick in (None, chosen):
        entropy, top_lp, top_ids, chosen_lp, rank = stats.stats_in_place(logits.clone(), 5, pick)
        logp = torch.log_softmax(logits.double(), dim=-1)
        expected_entropy = -(logp.exp() * logp.clamp(min=-1e300)).sum(-1)
        assert torch.allclose(entropy.double(), expected_entropy, atol=2e-5, rtol=1e-5)
        expected_top, _ = torch.topk(logp, 5, dim=-1)
        assert torch.allclose(top_lp.double(), expected_top, atol=1e-5)
        assert torch.allclose(logp.gather(-1, top_ids), expected_top, atol=1e-5)
        picked = top_ids[:, 0] if pick is None else pick
        assert torch.allclose(chosen_lp.double(), logp.gather(-1, picked[:, None]).squeeze(-1), atol=1e-5)
        expected_rank = (logp > logp.gather(-1, picked[:, None])).sum(-1) + 1
        assert torch.equal(rank.long(), expected_rank)
