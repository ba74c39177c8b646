"""Entry point: ``streamlit run app/main.py`` (or ``make run``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # streamlit puts app/ on the path, the pages import app.*
    sys.path.insert(0, str(ROOT))

from trace_core.settings import openmp_passive_wait  # noqa: E402

# Before anything imports torch: OpenMP reads its wait policy once (docs/performance.md, "threads").
openmp_passive_wait()

import streamlit as st  # noqa: E402

from app import downloads, services, state  # noqa: E402
from app.sidebar import sidebar  # noqa: E402
from app.text import md_literal  # noqa: E402
from trace_core import settings  # noqa: E402

st.set_page_config(page_title="TRACE — where is the model unsure?", page_icon=":material/search:", layout="wide")

try:  # a misconfigured deployment gets one sentence naming the variable, not a traceback on some page
    for setting in settings.SETTINGS:
        settings.get(setting)
except settings.SettingError as exc:
    st.error(md_literal(str(exc)))
    st.stop()

services.preload_in_background()  # scipy, while the user picks a file
state.keep_widgets()  # before any page: what the user set on another page stays set
downloads.begin_run()  # a download clicked from now on gets the file this run draws, not an earlier run's
pages = st.navigation([
    st.Page(ROOT / "pages" / "inspect.py", title="Inspect", icon=":material/search:", default=True),
    st.Page(ROOT / "pages" / "calibrate.py", title="Calibrate", icon=":material/tune:"),
    st.Page(ROOT / "pages" / "compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page(ROOT / "pages" / "flag.py", title="Flag & export", icon=":material/flag:"),
])
sidebar()
pages.run()
