"""Small builders shared by the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trace_core import Trace

APP = str(Path(__file__).resolve().parents[1] / "app" / "main.py")


def make_trace(surprisal, entropy=None, *, k: int = 2, prompt: str = "p") -> Trace:
    """A Trace with the given per-token surprisal and entropy (entropy defaults to surprisal + 0.5)."""
    s = np.asarray(surprisal, dtype=np.float64)
    h = s + 0.5 if entropy is None else np.asarray(entropy, dtype=np.float64)
    n = s.shape[0]
    tokens = tuple(f"t{i} " for i in range(n))
    top_lp = np.sort(-np.abs(np.random.default_rng(n).normal(size=(n, k))), axis=1)[:, ::-1] - np.log(max(k, 1))
    return Trace(prompt=prompt, answer="".join(tokens), token_ids=np.arange(n), tokens=tokens, surprisal=s,
                 entropy=h, top_ids=np.arange(n)[:, None] + np.arange(k), top_logprobs=top_lp,
                 ranks=np.ones(n, dtype=np.int64))


def random_traces(n: int, *, seed: int = 0, min_len: int = 1, max_len: int = 40) -> list[Trace]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        out.append(make_trace(rng.gamma(1.0, 1.0, size=length), rng.gamma(2.0, 1.0, size=length)))
    return out


def labeled_answers(n: int, *, seed: int, prompt: str = "Q{i}") -> tuple[pd.DataFrame, list[Trace]]:
    """``n`` random traces (:func:`random_traces`) and a table of their prompts (``prompt`` with the row number as
    ``{i}``), answers and labels: every third answer (rows 0, 3, 6, ...) wrong, the others right."""
    traces = random_traces(n, seed=seed)
    frame = pd.DataFrame({"prompt": [prompt.format(i=i) for i in range(n)], "answer": [t.answer for t in traces],
                          "label": (np.arange(n) % 3 != 0).astype(int)})
    return frame, traces


def synthetic_trace_objects(n: int = 40, *, seed: int = 0, mean_length: float = 10) -> tuple[list[Trace], np.ndarray]:
    """``n`` Trace objects (no alternatives) from :func:`trace_core.synthetic_traces` ("spike"), and their labels."""
    from trace_core import synthetic_traces

    s, h, y = synthetic_traces(n, kind="spike", seed=seed, mean_length=mean_length)
    traces = []
    for i, (si, hi) in enumerate(zip(s.split(), h.split(), strict=True)):
        tokens = tuple(f" w{j}" for j in range(len(si)))
        traces.append(Trace(prompt=f"q{i}", answer="".join(tokens), token_ids=np.arange(len(si)), tokens=tokens,
                            surprisal=si, entropy=hi, top_ids=np.zeros((len(si), 0)),
                            top_logprobs=np.zeros((len(si), 0))))
    return traces, y


def dashboard(page: str | None = None, *, model: str | Path | None = None, no_model: bool = False, timeout: float = 120):
    """An AppTest of the dashboard, run once: with ``model`` (a local folder or model id) typed in the sidebar, or with
    ``no_model`` the sidebar on a local model not yet named (so none is loaded); then on ``page`` (such as
    ``"../pages/calibrate.py"``) when given. The script must not have raised."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=timeout)
    if no_model:
        at.session_state["model_source"] = "Local folder or cached model id"
    at.run()
    if model is not None:
        at.sidebar.radio(key="model_source").set_value("Local folder or cached model id").run()
        at.sidebar.text_input(key="model_name").set_value(str(model)).run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def server_dashboard(url: str, tokenizer: str | Path, page: str | None = None, *, served: str = "tiny"):
    """An AppTest of the dashboard whose sidebar model is the server at ``url`` (serving ``served``, its tokenizer the
    local folder ``tokenizer``), on ``page`` (default Inspect); the sidebar must have connected without an error."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.sidebar.radio(key="model_source").set_value("Model server (OpenAI-compatible)").run()
    at.sidebar.text_input(key="server_url").set_value(url)
    at.sidebar.text_input(key="server_model").set_value(served)
    at.sidebar.text_input(key="server_tokenizer").set_value(str(tokenizer)).run()
    if page:
        at.switch_page(page).run()
    assert not at.exception and not at.sidebar.error, ([e.value for e in at.exception], list(at.sidebar.error))
    return at


def calibrate_by_path(path: Path, monkeypatch, timeout: float = 300):
    """An AppTest of the dashboard on the Calibrate page with the file ``path`` given by path (TRACE_LOCAL_FILES on,
    its folder the data folder). The script must not have raised."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TRACE_LOCAL_FILES", "1")
    monkeypatch.setenv("TRACE_DATA_DIR", str(path.parent))
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    at.switch_page("../pages/calibrate.py").run()
    at.radio(key="data_source").set_value("File path").run()
    at.text_input(key="data_path").set_value(str(path)).run()
    assert not at.exception
    return at


def downloaded(at, key: str) -> bytes:
    """The file download button ``key`` gives when clicked now (:class:`app.downloads.SessionFiles`: an AppTest has no
    server to ask)."""
    files = at.session_state["session_files"]
    return files.file(key, name=files.drawn_name(key), wait=0)


def flag_page_after_calibrate():
    """An AppTest of the dashboard on the Flag & export page, after Calibrate evaluated the demo validation split
    (3 splits) and made its calibrator active."""
    at = dashboard("../pages/calibrate.py", timeout=300)
    at.selectbox(key="demo_dataset").set_value("demo_validation").run()
    at.slider(key="n_splits").set_value(3)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error
    at.switch_page("../pages/flag.py").run()
    return at
