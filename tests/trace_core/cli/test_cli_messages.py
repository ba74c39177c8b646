"""The command line's words: options and environment variables (never keyword arguments), options checked before any
work, file rows (never 0-based positions), no raw warnings; and the shared wording for answers without tokens."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import make_trace, synthetic_trace_objects

from trace_core import EvaluationConfig, evaluate, write_dataset
from trace_core.cli import main
from trace_core.cli._support import cli_words, plain_warnings
from trace_core.evaluation.run import AnswerValueError
from trace_core.policy import usable_rows


@pytest.fixture()
def labeled(tmp_path):
    traces, y = synthetic_trace_objects(60, seed=3)
    path = tmp_path / "labeled.jsonl"
    write_dataset(pd.DataFrame({"prompt": [t.prompt for t in traces], "answer": [t.answer for t in traces],
                                "label": y}), path, traces=traces)
    return path


@pytest.mark.parametrize("argv, option", [
    (["evaluate", "{data}", "--splits", "0"], "--splits must be an int in [1, 1000], got 0"),
    (["evaluate", "{data}", "--splits", "100000000"], "--splits must be an int in [1, 1000], got 100000000"),
    (["evaluate", "{data}", "--calibration-fraction", "1.5"], "--calibration-fraction must be"),
    (["evaluate", "{data}", "--bins", "0"], "--bins must be an int in [1, 1000]"),
    (["evaluate", "{data}", "--bins", "5000"], "--bins must be an int in [1, 1000]"),
    (["fit", "{data}", "--out", "c.json", "--C", "-1"], "--C must be a finite real number > 0"),
    (["flag", "{data}", "--calibrator", "c.json", "--threshold", "2", "--out", "f.csv"], "--threshold must be"),
    (["flag", "{data}", "--calibrator", "c.json", "--coverage", "0", "--out", "f.csv"], "--coverage must be"),
    (["generate", "{data}", "--model", "m", "--out", "g.jsonl", "--max-new-tokens", "0"], "--max-new-tokens must"),
    (["generate", "{data}", "--model", "m", "--out", "g.jsonl", "--top-p", "0"], "--top-p must"),
    (["generate", "{data}", "--model", "m", "--out", "g.jsonl", "--seed", "-1"], "--seed must"),
    (["score", "{data}", "--model", "m", "--out", "g.jsonl", "--batch-size", "0"], "--batch-size must be an int in [1, 100000]"),
    (["score", "{data}", "--model", "m", "--out", "g.jsonl", "--alternatives", "-1"], "--alternatives must"),
    (["score", "{data}", "--model", "m", "--out", "g.jsonl", "--beams", "1"], "--beams must be an int in [2, 64]"),
    (["score", "{data}", "--model", "m", "--out", "g.jsonl", "--alternatives", "1001"], "--alternatives must"),
    (["generate", "{data}", "--model", "m", "--out", "g.jsonl", "--max-new-tokens", str(2**53)], "--max-new-tokens must"),
    (["generate", "{data}", "--server", "http://127.0.0.1:9", "--server-model", "m", "--out", "g.jsonl", "--retries",
      "1000"], "--retries must be an int in [0, 20]"),
    (["generate", "{data}", "--server", "http://127.0.0.1:9", "--server-model", "m", "--out", "g.jsonl", "--timeout",
      "1e9"], "--timeout must"),
    (["evaluate", "{data}", "--tolerance", "-1"], "--tolerance must"),
])
def test_bad_options_are_named_as_options_before_any_work(argv, option, labeled, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([a.format(data=labeled) for a in argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {err[-1][len('error: '):]}"] and option in err[0]  # one line: nothing was read first
    assert "`" not in err[0] and "_" not in err[0].split(" must ")[0]


def test_library_words_become_command_line_words():
    assert cli_words("`n_splits` must be an int >= 1, got 0") == "--splits must be an int >= 1, got 0"
    assert cli_words("or opt in with allow_pickle_weights=True (or TRACE_ALLOW_PICKLE_WEIGHTS=1) if") == (
        "or opt in with --allow-pickle-weights (or TRACE_ALLOW_PICKLE_WEIGHTS=1) if")
    assert cli_words("Opt in with trust_remote_code=True only") == "Opt in with --trust-remote-code only"
    assert "format=" not in cli_words("cannot tell the format of 'x' from its extension; expected one of .csv, "
                                       "or pass format= one of ('csv', 'jsonl', 'parquet')")
    assert cli_words("a Parquet file: use format='parquet' or a .parquet extension") == (
        "a Parquet file: give it a .parquet extension")
    assert cli_words("the `prompt` column") == "the `prompt` column"  # column names are not options


def test_pickle_only_model_names_the_option_and_the_variable(tmp_path, capsys):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt2"}')
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    assert main(["generate", str(prompts), "--model", str(folder), "--out", str(tmp_path / "g.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "--allow-pickle-weights" in err and "TRACE_ALLOW_PICKLE_WEIGHTS=1" in err
    assert "allow_pickle_weights=True" not in err


def test_a_relative_model_path_is_not_called_a_hub_id(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "p.txt").write_text("hello\n")
    assert main(["generate", "p.txt", "--model", "models/tiny", "--out", "g.jsonl"]) == 1
    err = capsys.readouterr().err
    assert "No model folder at 'models/tiny'" in err and "huggingface-cli download" not in err


def test_numpy_runtime_warnings_become_one_plain_line(capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.log(np.zeros(2))
        np.array([1.0]) / np.array([0.0])
        warnings.warn("a plain library warning", UserWarning, stacklevel=1)
    plain_warnings(caught)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "warning: a plain library warning"
    assert len(err) == 2 and err[1].startswith("warning: a computation met values it could not handle (")
    assert "divide by zero" in err[1] and "RuntimeWarning" not in err[1] and ".py" not in err[1]


def test_overflowing_values_name_the_answer_and_the_cli_names_the_file_row(labeled, tmp_path, capsys, monkeypatch):
    traces, y = synthetic_trace_objects(60, seed=1)
    traces[6] = make_trace([1e308, 1e308], [1.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the error names the answer; numpy says nothing before it
        with pytest.raises(AnswerValueError, match=r"answer 6 \(0-based") as info:
            evaluate(traces, y, config=EvaluationConfig(n_splits=2))
    assert info.value.index == 6

    # The command line maps the position to the file's row (the reader bounds values, so inject the failure).
    import trace_core.cli.evaluate as evaluate_command

    def failing(traces, labels, **kwargs):
        raise AnswerValueError(2, "makes SeqLogP's score non-finite")

    monkeypatch.setattr(evaluate_command, "evaluate", failing)
    frame = pd.read_json(labeled, lines=True)
    frame["label"] = frame["label"].astype(object)
    frame.loc[0, "label"] = "maybe"  # row 1 rejected: position 2 of the kept rows is file row 4
    spoiled = tmp_path / "spoiled.jsonl"
    frame.to_json(spoiled, orient="records", lines=True)
    assert main(["evaluate", str(spoiled), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {spoiled}: row 4: makes SeqLogP's score non-finite")


def test_an_empty_token_list_with_answer_text_is_not_called_an_empty_answer():
    empty_text = make_trace([], [])
    with_text = make_trace([], [])
    import dataclasses

    with_text = dataclasses.replace(with_text, answer="Hi there")
    usable = usable_rows([make_trace([0.1], [0.2]), empty_text, with_text], row_numbers=[3, 4, 5])
    message = usable.empty_message()
    assert message.startswith("2 answers with no tokens left out: rows 4, 5; row 5: the answer text is not empty")
    only_empty = usable_rows([make_trace([0.1], [0.2]), empty_text], row_numbers=[3, 4])
    assert only_empty.empty_message() == "1 empty answer (no tokens) left out: row 4"
    assert usable_rows([with_text]).nothing_left_message().startswith("no answer has tokens")


def test_an_error_closes_open_progress_bars_so_it_starts_its_own_line(monkeypatch, capsys):
    from trace_core import cli
    from trace_core.cli import _support

    def failing(args):
        update, _ = _support.progress(10, "splits", True)
        update(3, 10)
        raise ValueError("something broke")

    monkeypatch.setattr(cli, "check_options", lambda args: None)
    parser = cli.build_parser()
    real = parser.parse_args

    def parse(argv):
        args = real(argv)
        args.func = failing
        return args

    monkeypatch.setattr(cli, "build_parser", lambda: type("P", (), {"parse_args": staticmethod(parse)})())
    assert main(["evaluate", "x.csv"]) == 1
    err = capsys.readouterr().err
    assert _support._OPEN_BARS == []
    last = err.rsplit("\r", 1)[-1]  # what a terminal shows on the error's line, after the bar cleared itself
    assert last.lstrip().startswith("error: something broke") and "splits" not in last


def test_every_option_says_what_it_does_and_its_default(capsys):
    from trace_core.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them here
    for name, sub in commands.items():
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings[0]} has no help"
                if action.default not in (None, False) and not isinstance(action.default, bool):
                    assert "default" in action.help, f"{name} {action.option_strings[0]} does not say its default"
            elif not action.option_strings:
                assert action.help, f"{name} {action.dest} has no help"


def test_txt_prompts_take_line_breaks_as_escapes_and_keep_their_line_numbers(tmp_path):
    from trace_core.cli.generate import _read_prompts

    path = tmp_path / "prompts.txt"
    path.write_text("Q: 2 + 2?\\nA:\n\n   \nsay \\\\n literally\n", encoding="utf-8")
    frame, references, numbers = _read_prompts(str(path))
    assert frame["prompt"].tolist() == ["Q: 2 + 2?\nA:", "say \\n literally"] and references is None
    assert numbers == [1, 4]  # the file's line numbers, blank lines counted


@pytest.mark.parametrize("has_template, flag, said", [
    (True, False, True),  # --no-chat-template on an instruct model: say so, and why its answers may be empty
    (True, True, False),
    (False, False, False),  # no template to use: nothing to say
])
def test_the_command_line_says_when_a_models_chat_template_goes_unused(has_template, flag, said, capsys):
    from types import SimpleNamespace

    from trace_core.cli import common

    lm = SimpleNamespace(has_chat_template=has_template)
    args = SimpleNamespace(chat_template=flag, quiet=False)
    assert common.template_unused(lm, args) is said
    common.say_template_unused(lm, args)
    assert ("prompts go to it bare" in capsys.readouterr().err) is said
    common.say_template_unused(lm, SimpleNamespace(chat_template=flag, quiet=True))
    assert capsys.readouterr().err == ""  # a note, left out with --quiet
    warning = common.empty_answers_warning(["Paris", " \n", ""], lm, args)
    assert warning.startswith("2 of 3 answers are empty (the model ended its answer at once)")
    assert ("(leave out --no-chat-template)" in warning) is said
    assert common.empty_answers_warning(["Paris", "42"], lm, args) == ""
