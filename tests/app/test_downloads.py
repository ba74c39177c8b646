"""The download buttons' files: made on a click once the session is idle, for the latest run that drew the button,
never for an earlier run's settings (the browser test clicks right after a change; these pin the rules)."""

from __future__ import annotations

import inspect
import threading
import time

import pytest

from app.downloads import NoFileError, SessionFiles, session_busy


class Session:
    """A session whose script runs while ``running`` is set."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.files = SessionFiles(self.running.is_set)


def test_a_click_during_a_run_gets_the_file_that_run_draws():
    s = Session()
    s.files.begin_run()
    s.files.draw("csv", "threshold 0.50", lambda: b"rows at 0.50")
    s.running.set()  # the user moved the slider: its run starts, and the click comes in before it has drawn
    s.files.begin_run()
    got = []
    click = threading.Thread(target=lambda: got.append(s.files.file("csv", poll=0.01)))
    click.start()
    time.sleep(0.1)
    assert not got  # waits for the run
    s.files.draw("csv", "threshold 0.49", lambda: b"rows at 0.49")
    s.running.clear()
    click.join(5)
    assert got == [b"rows at 0.49"]


def test_no_file_when_the_latest_run_did_not_draw_the_button_or_drew_it_disabled():
    s = Session()
    s.files.begin_run()
    s.files.draw("csv", 1, lambda: b"a")
    assert s.files.file("csv") == b"a"
    s.files.begin_run()  # this run stopped before the button (e.g. nothing certified)
    with pytest.raises(NoFileError, match="no longer offers"):
        s.files.file("csv")
    s.files.begin_run()
    s.files.draw("csv", 2, None)  # drawn disabled: nothing flagged
    with pytest.raises(NoFileError):
        s.files.file("csv")
    with pytest.raises(NoFileError):
        s.files.file("never drawn")


def test_the_file_is_made_once_per_content_and_never_reused_for_another():
    s = Session()
    made = []

    def make(text: bytes):
        return lambda: made.append(text) or text

    s.files.begin_run()
    s.files.draw("csv", "k1", make(b"one"))
    assert s.files.file("csv") == s.files.file("csv") == b"one"
    s.files.begin_run()
    s.files.draw("csv", "k1", make(b"one again"))  # the same content: the file made before
    assert s.files.file("csv") == b"one"
    s.files.begin_run()
    s.files.draw("csv", "k2", make(b"two"))
    assert s.files.file("csv") == b"two"
    assert made == [b"one", b"two"]


def test_a_session_that_stays_busy_gets_no_file():
    s = Session()
    s.files.begin_run()
    s.files.draw("csv", 1, lambda: b"a")
    s.running.set()
    with pytest.raises(NoFileError, match="still running"):
        s.files.file("csv", wait=0.1, poll=0.01)


def test_session_busy_reads_streamlits_script_runner():
    """``session_busy`` relies on AppSession keeping its script runner in ``_scriptrunner`` while a run is requested
    or going, and dropping it after: a Streamlit that renames it must fail here, not silently hand out files early."""
    from streamlit.runtime.app_session import AppSession

    assert "self._scriptrunner = None" in inspect.getsource(AppSession)
    assert "self._scriptrunner = ScriptRunner(" in inspect.getsource(AppSession._create_scriptrunner)
    assert session_busy("no such session") is False  # no runtime in tests: never busy


def test_no_file_under_a_name_the_settings_have_changed():
    s = Session()
    s.files.begin_run()
    s.files.draw("calibrator", "TRACE+", lambda: b"{}", "trace_plus_calibrator.json")
    assert s.files.file("calibrator", name="trace_plus_calibrator.json") == b"{}"
    s.files.begin_run()
    s.files.draw("calibrator", "SeqLogP", lambda: b"{...}", "seqlogp_calibrator.json")
    with pytest.raises(NoFileError, match="called otherwise"):
        s.files.file("calibrator", name="trace_plus_calibrator.json")  # the button of the run before
    assert s.files.file("calibrator", name="seqlogp_calibrator.json") == b"{...}"
