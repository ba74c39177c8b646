"""The sidebar's "Loaded:" caption names torch's CPU threads for a local model."""

from __future__ import annotations

import re

import pytest
from helpers import dashboard

pytest.importorskip("streamlit")
torch = pytest.importorskip("torch")


def test_the_loaded_caption_names_the_cpu_threads(tiny_model_dirs):
    before = torch.get_num_threads()
    at = dashboard(model=tiny_model_dirs["gpt2"])
    assert torch.get_num_threads() == before  # a load sets nothing for the process: each recording call does
    loaded = [c.value for c in at.sidebar.caption if c.value.startswith("Loaded: ")]
    assert len(loaded) == 1, [c.value for c in at.sidebar.caption]
    found = re.search(r" · (\d+) CPU thread(s?)$", loaded[0])
    assert found is not None, loaded[0]
    assert (found.group(2) == "s") == (int(found.group(1)) > 1)
