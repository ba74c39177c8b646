"""Every ``st.session_state`` key the app uses, and typed accessors for them.

Pages and the other ``app`` modules read and write session state only through this module, so a key is spelled
once and each value has one type. Widget keys that code reads or sets (besides the widget itself) are named here too;
the other widget keys stay literal on their widgets.

The Calibrate page hands its kept rows to Flag & export as a :class:`CalibratedData` (frozen), never as a dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd
import streamlit as st

if TYPE_CHECKING:
    from trace_core import DecodingConfig, IsotonicCalibrator, LoadedModel, PlattCalibrator, Trace, TracePlus

    Calibrator = TracePlus | PlattCalibrator | IsotonicCalibrator

# Values the app stores (written by code).
MODEL = "lm"  # LoadedModel | None: the sidebar's model
MODEL_ERROR = "lm_error"  # str | None: why it could not be loaded
DECODING = "decoding"  # DecodingConfig from the sidebar
CALIBRATOR = "calibrator"  # fitted on Calibrate or uploaded on Flag & export
CALIBRATED_DATA = "flag_data"  # CalibratedData: the Calibrate page's rows for Flag & export
RECORDED = "recorded"  # {(data key, model id): {row position: Trace}}: traces recorded in this session
SCORED = "scored"  # {key: DataFrame}: the Flag page's scored rows (one entry)
INSPECT_TRACE = "inspect_trace"  # Trace | None: the Inspect page's last answer
EXAMPLE_USED = "example_used"  # int: the example prompt last copied into the prompt box

# Widget keys that code also sets.
PROMPT = "prompt"  # the Inspect page's prompt box (an example fills it)


@dataclass(frozen=True, eq=False)
class CalibratedData:
    """The rows the Calibrate page evaluated, handed to Flag & export.

    Attributes
    ----------
    frame : DataFrame
        The kept rows (index 0..n-1), with the file's row numbers in ``row_column``.
    traces : tuple of Trace, length n
        One non-empty trace per row.
    labels : ndarray of int, shape (n,)
        0/1 labels (read-only).
    name : str
        The dataset's file name.
    row_column : str
        Column of ``frame`` holding the file's row numbers.
    key : str
        Identifies the data and the traces (file digest and recording model): the Flag page's cache key.
    """

    frame: pd.DataFrame
    traces: tuple[Trace, ...]
    labels: np.ndarray
    name: str
    row_column: str
    key: str

    def __post_init__(self) -> None:
        if not (len(self.frame) == len(self.traces) == len(self.labels)):
            raise ValueError(f"got {len(self.frame)} rows, {len(self.traces)} traces and {len(self.labels)} labels")
        labels = np.array(self.labels, dtype=np.int64)  # a copy: the page's array stays the page's
        labels.setflags(write=False)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "traces", tuple(self.traces))


def _get(key: str, default: Any = None) -> Any:
    return st.session_state.get(key, default)


def _set(key: str, value: Any) -> None:
    st.session_state[key] = value


def model() -> LoadedModel | None:
    """The model chosen in the sidebar (None when there is none or it failed to load)."""
    return _get(MODEL)


def model_error() -> str | None:
    """Why the sidebar's model could not be loaded, if it could not."""
    return _get(MODEL_ERROR)


def set_model(lm: LoadedModel | None, error: str | None = None) -> None:
    _set(MODEL, lm)
    _set(MODEL_ERROR, error)


def decoding() -> DecodingConfig:
    """The sidebar's decoding settings (the sidebar runs before every page)."""
    return st.session_state[DECODING]


def set_decoding(config: DecodingConfig) -> None:
    _set(DECODING, config)


def calibrator() -> Calibrator | None:
    return _get(CALIBRATOR)


def set_calibrator(model: Calibrator) -> None:
    _set(CALIBRATOR, model)


def calibrated_data() -> CalibratedData | None:
    """What the Calibrate page handed to Flag & export, if it has run."""
    return _get(CALIBRATED_DATA)


def set_calibrated_data(data: CalibratedData) -> None:
    _set(CALIBRATED_DATA, data)


def recorded_traces(data_key: str, model_id: str | None) -> dict[int, Trace]:
    """The traces this session recorded for a dataset with a model, by row position; the live dict, to fill."""
    recorded: dict[tuple[str, str | None], dict[int, Trace]] = st.session_state.setdefault(RECORDED, {})
    return recorded.setdefault((data_key, model_id), {})


def scored(key: str, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """``compute()``'s result, kept for the session until ``key`` changes (one entry: tables can be large)."""
    cache: dict[str, pd.DataFrame] = st.session_state.setdefault(SCORED, {})
    if key not in cache:
        cache.clear()
        cache[key] = compute()
    return cache[key]


def inspect_trace() -> Trace | None:
    return _get(INSPECT_TRACE)


def set_inspect_trace(trace: Trace) -> None:
    _set(INSPECT_TRACE, trace)


def use_example(index: int, prompt: str) -> None:
    """Copy example ``index`` into the prompt box once (it must run before the box is drawn); later edits stay."""
    if index and _get(EXAMPLE_USED) != index:
        _set(PROMPT, prompt)
        _set(EXAMPLE_USED, index)
