"""A prompts file whose only prompt is over the per-cell limit (``max_cell_chars``, TRACE_MAX_CELL_MB): the error names
the row and the limit, and does not say that the file has no prompt (a file without any prompt still does:
tests/trace_core/cli/test_cli_generate_labels.py)."""

from __future__ import annotations

import json

import pytest

from trace_core import DatasetError
from trace_core.data import read_prompts

HUGE = "Q: " + "x" * (2 * 2**20) + "\nA:"  # 2 MiB of prompt
LIMIT = 2**20
TOO_LONG = ("prompt: is 2,097,158 characters long; a cell may hold at most 1,048,576 (TRACE_MAX_CELL_MB, or "
            "read_dataset(max_cell_chars=...))")


def _jsonl(*prompts: str) -> bytes:
    return "".join(json.dumps({"prompt": p, "reference": "4"}) + "\n" for p in prompts).encode("utf-8")


def test_a_file_whose_only_prompt_is_over_the_limit_says_why_not_that_it_has_no_prompt():
    with pytest.raises(DatasetError) as caught:
        read_prompts(_jsonl(HUGE), name="big2mb.jsonl", max_cell_chars=LIMIT)
    assert str(caught.value) == f"no row has a prompt that can be read (row 1: {TOO_LONG})"

