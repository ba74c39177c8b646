"""Download buttons whose file is written with the page, once per content, so that a click finds it.

A button given a function (Streamlit's deferred file, written when clicked) gets a new file id on every run, and the
end of each run forgets the ids no button of that run holds. A click in the second after a setting changed, on the
button the browser still shows (the redrawn one has not reached it yet), asks for an id the change's run has just
forgotten: no download. A file given as bytes is stored under a digest of its content (and name and type): a run
that writes the same file keeps its id, and a file no run draws any more is deleted at the end of the second run
that does not draw it, not the first. So after a change, the button the browser still shows keeps its file.

The file a click gets is the one of the button the browser shows when clicked: right after a change, the file for
the settings before it or, once the redrawn button has arrived, for the new ones; always a whole file made for one
state of the settings, never a mix.

Runs cut short by the next change before they draw the button also count: after several quick changes a file can
go while the browser still shows its button. A fragment holding the settings and the button avoids that (its reruns
keep the files the page drew until it draws new ones), as :func:`app.recording.traces_download` does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import streamlit as st

#: How many files :func:`download_button` keeps, for every session together (files can be tens of MB).
FILES_KEPT = 16


@st.cache_resource(show_spinner=False, max_entries=FILES_KEPT)
def _file(key: str, content: Hashable, _make: Callable[[], bytes]) -> bytes:
    """``_make()``, once per button ``key`` and ``content``; shared by the sessions, as the other caches of work on
    a dataset's traces (``content`` holds the dataset's key)."""
    return _make()


def download_button(where: Any, label: str, make: Callable[[], bytes], *, content: Hashable, key: str,
                    disabled: bool = False, **kwargs: Any) -> None:
    """``where.download_button(label, ...)`` (``where``: ``st`` or a container) with the bytes ``make()`` returns,
    written again only when ``content`` (a key of everything the file depends on: strings, bytes, numbers, tuples)
    changes, and not at all while the button is disabled.

    A click does not rerun the page (``on_click="ignore"``): its rerun would be the second run without the file the
    browser still shows right after a change, and could delete it before the download starts.
    """
    data = b"" if disabled else _file(key, content, make)
    where.download_button(label, data, key=key, disabled=disabled, on_click="ignore", **kwargs)
