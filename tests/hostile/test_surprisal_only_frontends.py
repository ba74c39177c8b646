"""The command line and the Calibrate page on saved runs that hold only the chosen tokens' log-probabilities."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pytest

from trace_core.cli import main


def _runs(path: Path, n: int = 240, seed: int = 0) -> Path:
    """Chain answers of 50-130 tokens, 50-60% of probabilities exactly 1.0, no entropy and no top-k."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            k = int(rng.integers(50, 131))
            lp = -rng.gamma(0.6, 0.8, size=k)
            lp[rng.permutation(k)[: int(rng.uniform(0.5, 0.6) * k)]] = 0.0
            wrong = rng.random() < 0.3
            if wrong:
                lp[int(rng.integers(5, k)):][:4] -= 2.0  # a local burst
            tokens = [f" w{j}" for j in range(k)]
            f.write(json.dumps({"prompt": f"Q{i}", "answer": "".join(tokens), "label": int(not wrong),
                                "tokens": tokens, "logprobs": lp.round(5).tolist()}) + "\n")
    return path


def test_fit_uses_the_surprisal_only_features_and_says_so(tmp_path, capsys) -> None:
    data = _runs(tmp_path / "runs.jsonl")
    assert main(["fit", str(data), "--out", str(tmp_path / "cal.json"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "fitting TRACE+ (surprisal-only)" in err and "fitted TRACE+ (surprisal)" in err
    assert json.loads((tmp_path / "cal.json").read_text())["params"]["feature_set"] == "surprisal"
    assert main(["fit", str(data), "--feature-set", "paper", "--out", str(tmp_path / "x.json"), "--quiet"]) == 1
    assert "--feature-set paper needs token entropy" in capsys.readouterr().err


@pytest.mark.slow
def test_calibrate_page_runs_the_surprisal_only_variants(tmp_path, monkeypatch) -> None:
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    data = _runs(tmp_path / "runs.jsonl")
    monkeypatch.setenv("TRACE_LOCAL_FILES", "on")
    monkeypatch.setenv("TRACE_DATA_DIR", str(tmp_path))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "pages" / "calibrate.py"), default_timeout=120)
    at.session_state["lm"] = None
    at.run()
    at.radio(key="data_source").set_value("File path").run()
    at.text_input(key="data_path").set_value(str(data)).run()
    at.slider(key="n_splits").set_value(3)
    at.get("form_submit_button")[0].click().run()
    assert not at.exception and not at.error
    methods = set(at.dataframe[0].value["method"])
    assert {"TRACE (surprisal-only)", "TRACE+ (surprisal-only)", "SeqLogP"} <= methods
    assert "Mean Entropy" not in methods
    captions = html.unescape(" ".join(c.value for c in at.caption))  # file-derived text is shown escaped
    assert "chosen-token log-probabilities only" in captions
    # only scores these traces can give are offered for the production calibrator
    options = [o.split(" — ")[0] for o in at.selectbox(key="flag_score").options]
    assert "TRACE+ (surprisal-only)" in options and "SeqLogP with Platt scaling" in options
    assert not [o for o in options if "Entropy" in o or o == "TRACE+" or o.startswith("TRACE+ (extended")]
    at.selectbox(key="flag_score").set_value("TRACE+ (surprisal-only)").run()
    captions = html.unescape(" ".join(c.value for c in at.caption))
    assert "TRACE+ (surprisal-only) fitted on all 240 labeled answers" in captions


def test_flag_page_says_when_a_calibrator_needs_entropy_the_answers_lack(tmp_path, monkeypatch) -> None:
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from app.state import CALIBRATED_DATA, CALIBRATOR, ActiveCalibrator, Answers
    from trace_core import TracePlus, read_dataset, synthetic_traces
    from trace_core.traces.trace import Trace

    surprisal, entropy, y = synthetic_traces(200, seed=1)
    with_entropy = [Trace(prompt="q", answer="a" * len(s), token_ids=np.full(len(s), -1), tokens=("a",) * len(s),
                          surprisal=s, entropy=h, top_ids=[], top_logprobs=[])
                    for s, h in zip(surprisal.split(), entropy.split(), strict=True)]
    paper = TracePlus().fit(with_entropy, y)
    dataset = read_dataset(_runs(tmp_path / "runs.jsonl", n=40))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "pages" / "flag.py"), default_timeout=60)
    at.session_state[CALIBRATOR] = ActiveCalibrator(paper, origin="fitted in a test", data=None, key="t")
    at.session_state[CALIBRATED_DATA] = Answers(frame=dataset.frame, traces=tuple(dataset.traces),
                                                labels=dataset.labels, name="runs.jsonl",
                                                row_column=dataset.row_column, key="k")
    at.run()
    assert not at.exception
    assert any("cannot score these answers" in e.value for e in at.error)
