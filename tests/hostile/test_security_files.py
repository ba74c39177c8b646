"""Security of the dashboard's file boundary (issue 13, items 1, 4 and 5).

- "File path" is off unless the deployment turns it on, and then reads only regular files inside the data folder
  (TRACE_DATA_DIR, or the working directory), after resolving symlinks and ``..``; everything else gets one message
  that does not tell whether the file exists.
- A file read by path that is not a usable dataset is named, never quoted.
- Every echo of user input is bounded: huge column names and headers are refused with a short message, and no alert
  on a page is longer than ``MAX_MESSAGE`` characters.
- The typed model name is shown literally in the sidebar's messages.
"""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest
from helpers import dashboard

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest  # noqa: E402

from app import services  # noqa: E402
from app.text import MAX_MESSAGE  # noqa: E402
from trace_core import DatasetError, read_dataset  # noqa: E402

SECRET = "sk-SECRET-0123456789"
GOOD_CSV = "prompt,answer,label\nQ: 1+1?,2,1\nQ: 2+2?,5,0\nQ: 3+3?,6,1\nQ: 4+4?,9,0\n"
HOSTILE_NAME = ":red[x] **b** <img src=x>"


def _page(monkeypatch, **env: str) -> AppTest:
    """The Calibrate page with no model, after setting ``env`` (unset variables are removed)."""
    for name in ("TRACE_LOCAL_FILES", "TRACE_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return dashboard("../pages/calibrate.py", no_model=True)


def _by_path(at: AppTest, path_text: str) -> AppTest:
    at.radio(key="data_source").set_value("File path").run()
    at.text_input(key="data_path").set_value(path_text).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.radio(key="data_source").set_value("Upload a file").run()
    at.file_uploader(key="upload").set_value((name, data, "text/csv")).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _everything(at: AppTest) -> str:
    """All the text the page shows: alerts, captions, markdown and tables, decoded."""
    parts = [html.unescape(str(e.value)) for kind in ("error", "warning", "info", "success", "caption", "markdown")
             for e in getattr(at, kind)]
    parts += [d.value.to_csv() for d in at.dataframe]
    return "\n".join(parts)


@pytest.fixture
def folders(tmp_path):
    """A data folder (with a good dataset) and, next to it, an outside folder with a secret file."""
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (data / "good.csv").write_text(GOOD_CSV)
    (data / "sub").mkdir()
    (data / "sub" / "good.csv").write_text(GOOD_CSV)
    (outside / "secret.csv").write_text(GOOD_CSV)
    return data, outside


# --------------------------------------------------------------------------------------------------
# Item 1: off by default, confined to the data folder, no existence oracle, no content echo
# --------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_file_path_is_off_unless_the_deployment_turns_it_on(monkeypatch, tmp_path):
    assert "File path" not in _page(monkeypatch).radio(key="data_source").options
    assert "File path" not in _page(monkeypatch, TRACE_DATA_DIR=str(tmp_path)).radio(key="data_source").options
    at = _page(monkeypatch, TRACE_LOCAL_FILES="on", TRACE_DATA_DIR=str(tmp_path))
    assert "File path" in at.radio(key="data_source").options


def test_files_inside_the_data_folder_are_read_by_relative_or_absolute_path(monkeypatch, folders):
    data, _ = folders
    monkeypatch.setenv("TRACE_DATA_DIR", str(data))
    for text in ("good.csv", str(data / "good.csv"), "sub/good.csv", "sub/../good.csv"):
        assert services.read_local_file(text) == (GOOD_CSV.encode(), "good.csv")
    at = _by_path(_page(monkeypatch, TRACE_LOCAL_FILES="1", TRACE_DATA_DIR=str(data)), "good.csv")
    assert [s.value for s in at.success] == ["4 rows read, all kept."]


def test_without_a_data_folder_the_working_directory_is_the_data_folder(monkeypatch, folders):
    data, outside = folders
    monkeypatch.delenv("TRACE_DATA_DIR", raising=False)
    monkeypatch.chdir(data)
    assert services.data_folder() == data.resolve()
    assert services.read_local_file("good.csv")[1] == "good.csv"
    with pytest.raises(ValueError, match="No file at"):
        services.read_local_file(str(outside / "secret.csv"))


def _refusal(monkeypatch, data: Path, text: str) -> str:
    monkeypatch.setenv("TRACE_DATA_DIR", str(data))
    with pytest.raises(ValueError) as caught:
        services.read_local_file(text)
    return str(caught.value).replace(f"'{text}'", "'<path>'", 1)


def test_everything_outside_the_data_folder_gets_one_message_that_tells_nothing(monkeypatch, folders):
    data, outside = folders
    (data / "link.csv").symlink_to(outside / "secret.csv")  # a symlink out of the folder
    (data / "loop.csv").symlink_to(data / "loop.csv")
    cases = ["/proc/self/environ", "/etc/passwd", str(outside / "secret.csv"), str(outside / "missing.csv"),
             "../outside/secret.csv", "sub/../../outside/secret.csv", "link.csv", "loop.csv", "sub", ".",
             "missing.csv", "bad\x00name.csv"]
    messages = {text: _refusal(monkeypatch, data, text) for text in cases}
    assert len(set(messages.values())) == 1, messages  # the same words whether or not the file exists
    (message,) = set(messages.values())
    assert message == "No file at '<path>' inside the data folder (TRACE_DATA_DIR); File path reads only files inside it."
    long_message = _refusal(monkeypatch, data, "x" * 10_000)  # typed text is quoted shortened
    assert len(long_message) < 400 and "10,000 characters in all" in long_message


def test_proc_self_environ_is_refused_on_the_page_even_with_the_root_as_data_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACE_TEST_SECRET", SECRET)
    at = _by_path(_page(monkeypatch, TRACE_LOCAL_FILES="1", TRACE_DATA_DIR=str(tmp_path)), "/proc/self/environ")
    assert [html.unescape(e.value) for e in at.error] == [
        "No file at '/proc/self/environ' inside the data folder (TRACE_DATA_DIR); File path reads only files "
        "inside it."]
    assert SECRET.lower() not in _everything(at).lower()


def test_a_data_folder_that_is_not_a_folder_is_named(monkeypatch, tmp_path):
    at = _page(monkeypatch, TRACE_LOCAL_FILES="1", TRACE_DATA_DIR=str(tmp_path / "nope"))
    at.radio(key="data_source").set_value("File path").run()
    assert not at.exception
    (error,) = [html.unescape(e.value) for e in at.error]
    assert error.startswith("TRACE_DATA_DIR=") and "is not a folder" in error


SECRET_FILES = {
    "env.csv": f"openai_api_key={SECRET}\nother=1\n",                       # the first line became "found columns"
    "config.json": json.dumps({"openai_api_key": SECRET}) + "\n",           # a one-line JSON showed its keys
    "labels.csv": f"prompt,answer,label\nq,a,{SECRET}\nq2,a2,{SECRET}x\n",  # every row rejected: cells in a table
    "columns.csv": f"prompt,answer,{SECRET}\nq,a,1\n",                       # "needs a label column; found columns"
}


@pytest.mark.parametrize("name", SECRET_FILES)
def test_a_file_read_by_path_that_is_not_a_dataset_is_named_but_never_quoted(monkeypatch, tmp_path, name):
    (tmp_path / name).write_text(SECRET_FILES[name])
    at = _by_path(_page(monkeypatch, TRACE_LOCAL_FILES="1", TRACE_DATA_DIR=str(tmp_path)), str(tmp_path / name))
    (error,) = [html.unescape(e.value) for e in at.error]
    assert error.startswith(f"{name}: not a dataset the app can read")
    shown = _everything(at)
    assert SECRET.lower() not in shown.lower() and "openai_api_key" not in shown and "found columns" not in shown
    assert not at.dataframe  # no rejected-rows table


def test_an_upload_keeps_its_detailed_message(monkeypatch):
    at = _upload(_page(monkeypatch), "env.csv", SECRET_FILES["env.csv"].encode())
    (error,) = [html.unescape(e.value) for e in at.error]
    assert "missing required columns" in error and "found columns" in error


# --------------------------------------------------------------------------------------------------
# Item 4: bounded echo of user input
# --------------------------------------------------------------------------------------------------

def _read_error(data: bytes, name: str) -> str:
    with pytest.raises(DatasetError) as caught:
        read_dataset(data, format="jsonl" if name.endswith(".jsonl") else "csv")
    return str(caught.value)


def test_a_10_mib_column_name_is_refused_with_a_short_message():
    big = "n" * (10 * 2**20)
    for data, name in [(f"prompt,answer,{big}\nq,a,1\n".encode(), "x.csv"),
                       (json.dumps({"prompt": "q", "answer": "a", big: 1}).encode() + b"\n", "x.jsonl")]:
        message = _read_error(data, name)
        assert len(message) < 400, len(message)
        assert "10,485,760 characters long" in message and "at most 1,000 characters" in message


@pytest.mark.parametrize("rows", ["", "\n" + ",".join("1" * 200_000)])
def test_a_200000_column_header_is_refused_with_a_short_message(rows):
    header = ",".join(f"column_{i}" for i in range(200_000))
    message = _read_error((header + rows + "\n").encode(), "x.csv")
    assert len(message) < 400, len(message)
    assert "200,000 columns; at most 10,000 are read" in message


def test_messages_listing_columns_show_a_few_shortened_names():
    header = ",".join(f"{i}{'c' * 900}" for i in range(30))  # 30 long names, under the limits
    message = _read_error(f"{header}\n".encode(), "x.csv")  # header only: "no data rows: the file has columns"
    assert message.startswith("no data rows") and "(30 in all)" in message and len(message) < 1_500


def _alerts(at: AppTest) -> list[str]:
    return [e.value for kind in ("error", "warning", "info") for e in getattr(at, kind)]


@pytest.mark.parametrize("payload", ["one name", "many names"])
def test_a_5_mb_upload_never_becomes_a_5_million_character_alert(monkeypatch, payload):
    if payload == "one name":  # one 5 MB line: a single column name
        data = b"q" * (5 * 2**20) + b"\n1\n"
    else:  # 5,000 names of 999 characters (each under the limits), none of them the required ones
        data = (",".join(f"{i:04d}" + "n" * 995 for i in range(5_000)) + "\n" + ",".join("1" * 5_000) + "\n").encode()
    assert len(data) > 5 * 10**6
    at = _upload(_page(monkeypatch), "big.csv", data)
    alerts = [html.unescape(a) for a in _alerts(at)]
    assert alerts and all(len(a) <= MAX_MESSAGE + 100 for a in alerts), [len(a) for a in alerts]


# --------------------------------------------------------------------------------------------------
# Item 5: the typed model name is shown literally
# --------------------------------------------------------------------------------------------------

def _sidebar_with_model(monkeypatch, name: str) -> AppTest:
    return dashboard(model=name)


def _literal(value: str, text: str) -> bool:
    """``text`` appears in the Markdown ``value`` only as character references: shown, never parsed."""
    return text in html.unescape(value) and not any(s in value for s in (":red[", "**", "<img", "`"))


def test_the_sidebar_shows_a_typed_model_name_literally(monkeypatch):
    at = _sidebar_with_model(monkeypatch, HOSTILE_NAME)
    (error,) = [e.value for e in at.sidebar.error]
    assert "was not found locally" in html.unescape(error) and _literal(error, HOSTILE_NAME)
    # the Inspect page points to the sidebar's message instead of repeating the name
    assert any("could not be loaded (the sidebar says why)" in i.value for i in at.info)
    assert not any(HOSTILE_NAME[:10] in html.unescape(i.value) for i in at.info)


def test_the_sidebar_shows_a_huge_model_name_shortened(monkeypatch):
    at = _sidebar_with_model(monkeypatch, "m" * 1_000_000)
    (error,) = [html.unescape(e.value) for e in at.sidebar.error]
    assert len(error) <= MAX_MESSAGE + 100


def test_the_loaded_caption_shows_a_hostile_folder_name_literally(tiny_model_dirs, monkeypatch, tmp_path):
    folder = tmp_path / f"m` {HOSTILE_NAME} `b"  # backticks would close the caption's code span
    shutil.copytree(tiny_model_dirs["gpt2"], folder)
    at = _sidebar_with_model(monkeypatch, str(folder))
    (caption,) = [c.value for c in at.sidebar.caption if "Loaded" in c.value]
    assert _literal(caption, f"m` {HOSTILE_NAME} `b")
