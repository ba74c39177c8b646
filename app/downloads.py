"""Download buttons whose file is made when clicked, for the settings the user has set, never for earlier ones.

A click right after a setting changed reaches the server before the page has been drawn again: the browser still
shows the button of the run before the change. A file made with the page (bytes given to the button) is then the
file of the previous settings, while the page, a moment later, shows the new ones: a wrong download. Two guards:

- In the browser, a style (:data:`WHILE_RUNNING_CSS`, drawn on every page) disables the download buttons while the
  page runs: from the moment the browser hears that a run started until it has finished, when the buttons are the
  new run's. A click then does nothing, as on a disabled button.
- On the server, for a click that comes before the browser has heard of the run: every button is a deferred file
  (Streamlit calls a function when the button is clicked), and that function does not make the file of the run
  that drew the button. It waits until the session's script is idle, then makes the file that the latest complete
  run drew this button for. The setting's rerun is requested before the click is handled (both travel over the
  session's one connection, in order), so once the session is idle the latest run is the one with the user's
  settings, and the file holds what the page shows for them. When that run did not draw the button (the page
  stopped before it) or drew it disabled (nothing to download), the click gets no file and Streamlit says the file
  could not be made, rather than handing out the previous settings' file.

Without the first guard a click can also come too late for the second: Streamlit forgets the previous run's deferred
files when the next run ends, and a busy browser may still click the previous run's button then (it fails).

The last file made is kept (one per session): clicking it again reuses it. A button whose file name depends on the
settings (the calibrator's file is named after its score) gives no file when clicked right after a change of name:
the browser would save the new content under the old name. A click on the redrawn button gets it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from . import state

#: Disables the download buttons while the script runs (the app root's run state, which Streamlit sets from the
#: server's messages: "running" from a run's start until it has finished, "initial" before the first).
WHILE_RUNNING_CSS = """<style>
[data-testid="stApp"]:not([data-test-script-state="notRunning"]) [data-testid="stDownloadButton"] button {
  pointer-events: none; opacity: 0.55; cursor: progress;
}
</style>"""

#: How long a click waits for the session's script to finish its run (a setting changed just before) before it
#: gives up without a file.
WAIT_SECONDS = 120.0
POLL_SECONDS = 0.05


class NoFileError(RuntimeError):
    """The click cannot get a file: the latest run did not draw the button, drew it disabled, or did not finish."""


@dataclass(frozen=True)
class _Drawn:
    run: int  # the page run that drew the button
    content: Hashable  # what the file depends on
    make: Callable[[], bytes] | None  # None: drawn disabled
    name: str | None  # the file's name


class SessionFiles:
    """The files one session's download buttons hand out: for each button, what the latest run drew it for.

    Runs of a session are sequential: :meth:`begin_run` counts them (the router calls it before every page), and a
    button drawn in an earlier run than the latest has not been drawn for the current settings.

    Parameters
    ----------
    busy : callable returning bool
        Whether the session's script is running or about to run (a rerun requested).
    """

    def __init__(self, busy: Callable[[], bool]) -> None:
        self._busy = busy
        self._lock = threading.Lock()
        self._run = 0
        self._drawn: dict[str, _Drawn] = {}
        self._made: dict[str, tuple[Hashable, bytes]] = {}

    def begin_run(self) -> None:
        with self._lock:
            self._run += 1

    def draw(self, key: str, content: Hashable, make: Callable[[], bytes] | None, name: str | None = None) -> None:
        """Button ``key`` drawn in this run for ``content`` (``make`` None: disabled), its file named ``name``."""
        with self._lock:
            self._drawn[key] = _Drawn(self._run, content, make, name)
            made = self._made.get(key)
            if made is not None and made[0] != content:
                del self._made[key]  # the settings moved on: the old file is never handed out again

    def drawn_name(self, key: str) -> str | None:
        """The file name button ``key`` was last drawn with (None when it was not drawn, or without a name)."""
        with self._lock:
            drawn = self._drawn.get(key)
        return drawn.name if drawn is not None else None

    def file(self, key: str, *, name: str | None = None, wait: float = WAIT_SECONDS,
             poll: float = POLL_SECONDS) -> bytes:
        """The bytes of button ``key`` for the latest complete run, once the session is idle (at most ``wait``
        seconds). Called on a click, outside the script's thread; ``name`` is the file name of the button clicked
        (the browser saves the file under it).

        Raises
        ------
        NoFileError
            When the session is still busy after ``wait`` seconds, the latest run did not draw the button or drew it
            disabled, or drew it with another file name (the settings changed what the file is called: its content
            under the old name would mislead).
        """
        deadline = time.monotonic() + wait
        while self._busy():
            if time.monotonic() > deadline:
                raise NoFileError(f"the page is still running after {wait:.0f} s")
            time.sleep(poll)
        with self._lock:
            drawn, run = self._drawn.get(key), self._run
            made = self._made.get(key)
        if drawn is None or drawn.run != run or drawn.make is None:
            raise NoFileError("the page no longer offers this file")
        if drawn.name != name:
            raise NoFileError("the file is now called otherwise: click the button again")
        if made is not None and made[0] == drawn.content:
            return made[1]
        data = drawn.make()
        with self._lock:
            if self._drawn.get(key) is drawn:  # not replaced while it was being made
                self._made = {key: (drawn.content, data)}  # one file kept per session: files can be tens of MB
        return data


def session_busy(session_id: str) -> bool:
    """Whether session ``session_id``'s script is running, or a rerun of it has been requested.

    Streamlit keeps a session's script runner from the moment a run is requested until that run (and any rerun
    requested meanwhile) has finished, then drops it; a closed session is not busy.
    """
    from streamlit import runtime

    if not runtime.exists():
        return False
    session = runtime.get_instance().get_app_session(session_id)
    return session is not None and getattr(session, "_scriptrunner", None) is not None


def _session_files() -> SessionFiles:
    ctx = get_script_run_ctx()
    session_id = ctx.session_id if ctx is not None else ""
    return state.session_files(lambda: SessionFiles(lambda: bool(session_id) and session_busy(session_id)))


def begin_run() -> None:
    """Count a run of the session's script and draw the style that disables download buttons while it runs (the
    router calls this before every page)."""
    _session_files().begin_run()
    st.html(WHILE_RUNNING_CSS)


def download_button(where: Any, label: str, make: Callable[[], bytes], *, content: Hashable, key: str,
                    disabled: bool = False, **kwargs: Any) -> None:
    """``where.download_button(label, ...)`` (``where``: ``st`` or a container) whose file is ``make()``, made when
    clicked, for the settings of the latest complete run (see the module's docstring).

    ``content`` is a key of everything the file depends on (strings, bytes, numbers, tuples): a click on the button
    whose file was made last, with the same content, reuses it. A disabled button offers no file.
    """
    files = _session_files()
    name = kwargs.get("file_name")
    files.draw(key, content, None if disabled else make, name)
    where.download_button(label, lambda: files.file(key, name=name), key=key, disabled=disabled, on_click="ignore",
                          **kwargs)

