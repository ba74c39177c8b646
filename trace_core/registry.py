"""Typed registries of what the evaluation reports: the metrics and the methods.

One place says, for every metric, its direction and whether it is computed on a method's raw score or on its
calibrated probability; and, for every method, its family, what it needs and (TRACE+) its feature set. The protocol,
the CLI table, the dashboard table and the plots all read these; no code slices method names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .baselines import BASELINES, Baseline
from .features import FEATURE_SETS

__all__ = ["METHODS", "METRICS", "Method", "MetricSpec", "get_method", "method_names"]


@dataclass(frozen=True)
class MetricSpec:
    """A metric of the comparison table.

    Attributes
    ----------
    name : str
        Key in results (``"auroc"``).
    label : str
        Display name (``"AUROC"``).
    higher_is_better : bool
    on : {"score", "probability"}
        Ranking metrics use each method's raw score; calibration metrics its calibrated probability.
    """

    name: str
    label: str
    higher_is_better: bool
    on: str

    @property
    def arrow(self) -> str:
        return "↑" if self.higher_is_better else "↓"

    @property
    def title(self) -> str:
        """Label with its direction, for table headers: ``"AUROC ↑"``."""
        return f"{self.label} {self.arrow}"

    def best(self, values: Any) -> Any:
        """The best of ``values`` (a pandas Series or numpy array) in this metric's direction."""
        return values.max() if self.higher_is_better else values.min()


METRICS: dict[str, MetricSpec] = {m.name: m for m in [
    MetricSpec("brier", "Brier", False, "probability"),
    MetricSpec("ece", "ECE", False, "probability"),
    MetricSpec("auroc", "AUROC", True, "score"),
    MetricSpec("auprc", "AUPRC", True, "score"),
    MetricSpec("aurc", "AURC", False, "score"),
]}


@dataclass(frozen=True)
class Method:
    """A method of the comparison.

    Attributes
    ----------
    name : str
        Display name, also the key in results (``"TRACE+"``, ``"TRACE+ (extended)"``, ``"SeqLogP"``).
    family : str
        ``"trace"`` for TRACE and TRACE+, else the baseline's family (likelihood, entropy, ...).
    kind : {"trace_plus", "trace", "baseline"}
        TRACE+ is fitted on feature vectors; TRACE and the baselines are scalar scores calibrated alike.
    needs : {"trace", "beam", "embedding"}
        Input beyond the answers' traces.
    feature_set : str or None
        TRACE+ only: the key of :data:`trace_core.features.FEATURE_SETS`.
    extended : bool
        Listed only when the extended set of methods is asked for (the TRACE+ feature-set variants).
    baseline : Baseline or None
        Baselines only: the :data:`trace_core.baselines.BASELINES` entry (formula and scoring function).
    transform : str
        Scalar methods: the monotone transform their scalar calibrator is fitted on (a key of
        :data:`trace_core.calibrate.SCORE_TRANSFORMS`); TRACE's ``exp(-R)`` is calibrated on ``log``, i.e. on ``-R``.
    """

    name: str
    family: str
    kind: str
    needs: str = "trace"
    feature_set: str | None = None
    extended: bool = False
    baseline: Baseline | None = field(default=None, repr=False)
    transform: str = "identity"

    @property
    def is_trace(self) -> bool:
        return self.kind in ("trace_plus", "trace")


def _methods() -> dict[str, Method]:
    out = [Method("TRACE+", "trace", "trace_plus", feature_set="paper")]
    out += [Method(f"TRACE+ ({fs})", "trace", "trace_plus", feature_set=fs, extended=True)
            for fs in FEATURE_SETS if fs != "paper"]
    out.append(Method("TRACE", "trace", "trace", transform="log"))
    out += [Method(b.name, b.family, "baseline", needs=b.needs, baseline=b, transform=b.transform)
            for b in BASELINES.values()]
    return {m.name: m for m in out}


METHODS: dict[str, Method] = _methods()


def get_method(name: str) -> Method:
    """The :class:`Method` called ``name``; ValueError naming the known ones otherwise."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        from ._checks import shorten

        raise ValueError(f"unknown method {shorten(name)}; known: {', '.join(METHODS)}") from None


def method_names(*, extended: bool = False) -> list[str]:
    """All method names: TRACE+, TRACE and the 19 baselines (plus the TRACE+ feature-set variants if asked)."""
    return [m.name for m in METHODS.values() if extended or not m.extended]
