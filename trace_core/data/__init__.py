"""Datasets: reading and validating labeled tables, labeling answers from references, importing API traces,
writing tables back, and exporting rows for people.

A labeled dataset is a table (CSV, JSON Lines or Parquet) with one answer per row:

==================  ==========================================================================================
column              meaning
==================  ==========================================================================================
``prompt``          the prompt (required, non-empty text)
``answer``          the answer to score (may be empty; when missing or empty, ``response`` gives it)
``label``           1 = the answer is correct, 0 = wrong; accepted spellings: see :func:`parse_label`
``reference``       the gold answer, used to label the answer with a matcher when there is no ``label`` column
trace columns       an optional pre-recorded trace: ``tokens``, ``surprisal`` (or ``logprobs``), ``entropy``, ...;
                    every one, with its meaning, is listed in :data:`trace_core.traces.columns.COLUMNS`. Without
                    ``entropy`` the trace's entropy is estimated from ``top_logprobs`` (``"top_k"``) or absent
                    (``"absent"``: chosen-token log-probabilities only, still scored by surprisal-only methods)
``response``        a raw model-server response with log-probabilities (:func:`trace_from_openai`: OpenAI-style,
                    llama.cpp, Ollama, TGI, vLLM ``prompt_logprobs`` with an ``answer_tokens`` cell; without
                    alternatives the trace has no entropy), used for a row's trace when all its trace cells
                    are empty (trace columns win)
==================  ==========================================================================================

Column names are matched ignoring case and surrounding spaces and are lower-cased in the returned frame; any other
column is kept as read. Every data row is numbered from 1 (CSV: the header is not counted, blank lines are skipped and
not counted; JSON Lines: the row's line in the file), and every rejected row is reported with that number, the column
and the reason -- nothing is dropped silently. Problems that leave nothing to read (an empty or binary file, missing
columns, ...) raise :class:`DatasetError`.

:func:`write_dataset` writes what :func:`read_dataset` reads back unchanged (floats as exact JSON reprs);
:func:`export_flagged` writes files for people, with spreadsheet formula injection neutralised (:func:`sanitize_cell`).

Modules: ``read`` (bytes -> raw rows: ``source`` and ``table`` hold the file and table checks, ``read_csv``,
``read_jsonl`` and ``read_parquet`` one format each; the trace columns <-> Trace are :mod:`trace_core.traces.columns`),
``fastread`` and ``fastparse`` (many rows' trace cells decoded at once), ``labels`` (labels and matchers),
``prompts`` (prompt files to generate from, and the generated answers' labels), ``responses`` (API responses ->
Trace), ``validate`` (rows checked one by one), ``dataset`` (:func:`read_dataset`: file -> :class:`LabeledDataset`),
``write``, ``export``.
"""

from trace_core.data.claim import claim_text
from trace_core.data.dataset import LabeledDataset, read_dataset
from trace_core.data.errors import DatasetError, DatasetWarning, RowError
from trace_core.data.export import export_flagged, sanitize_cell, token_table, with_trace_columns
from trace_core.data.labels import MATCHERS, label_from_reference, normalize_answer, parse_label
from trace_core.data.prompts import PromptsFile, label_answers, read_prompts
from trace_core.data.read import FORMATS
from trace_core.data.responses import trace_from_openai
from trace_core.data.review import FLIPPED_COLUMN, flip_labels, matched_span
from trace_core.data.write import write_dataset
from trace_core.traces.columns import TRACE_COLUMNS, parse_beam_logprobs
from trace_core.traces.logprobs import entropy_from_top_k
from trace_core.traces.table import traces_to_columns

__all__ = [
    "PromptsFile",
    "label_answers",
    "read_prompts",
    "DatasetError",
    "DatasetWarning",
    "FLIPPED_COLUMN",
    "FORMATS",
    "LabeledDataset",
    "MATCHERS",
    "RowError",
    "TRACE_COLUMNS",
    "claim_text",
    "entropy_from_top_k",
    "export_flagged",
    "flip_labels",
    "label_from_reference",
    "matched_span",
    "normalize_answer",
    "parse_beam_logprobs",
    "parse_label",
    "read_dataset",
    "sanitize_cell",
    "trace_from_openai",
    "token_table",
    "traces_to_columns",
    "with_trace_columns",
    "write_dataset",
]
