"""Typed registries of what the evaluation reports: the metrics and the methods.

One place says, for every metric, its direction and whether it is computed on a method's raw score or on its
calibrated probability; and, for every method, its family, what it needs (an input beyond the trace, the entropy) and
(TRACE+) its feature set. The protocol, the CLI table, the dashboard table and the plots all read these; no code slices
method names.

Kinds of method:

``trace_plus``
    TRACE+: a logistic regression on standardised trace features, fitted on each calibration part.
``trace``
    TRACE: a scalar score, calibrated like the baselines.
``baseline``
    The 20 scalar baselines (:data:`trace_core.methods.baselines.BASELINES`).
``fitted_baseline``
    The 3 baselines fitted on each calibration part (:data:`trace_core.methods.fitted_baselines.FITTED_BASELINES`: CES,
    WEPR, Trace Profile); they join the best-baseline choice like the scalar ones.
``reference``
    :data:`REFERENCE`, the supervised likelihood reference: TRACE+'s logistic regression on likelihood summaries only
    (mean surprisal, ``log T``, the logit of the min token probability ``exp(-max s)``). Never chosen as the best
    baseline: it is supervised, and it says whether TRACE+'s gain is more than length-aware likelihood.

On data without entropy (only the chosen tokens' log-probabilities) the methods with ``needs_entropy`` are skipped and
TRACE and TRACE+ run as ``"TRACE (surprisal-only)"`` and ``"TRACE+ (surprisal-only)"`` (their ``surprisal_only``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trace_core.checks import shorten
from trace_core.methods import features
from trace_core.methods.baselines import BASELINES, Baseline
from trace_core.methods.features import FEATURE_SETS
from trace_core.methods.fitted_baselines import FITTED_BASELINES, FittedBaseline

__all__ = ["METHODS", "METRICS", "REFERENCE", "Method", "MetricSpec", "flaggable_methods", "get_method", "method_names"]

#: The supervised likelihood reference's name (see the module docstring).
REFERENCE = "Likelihood LR (reference)"
#: TRACE+'s and TRACE's variants on surprisal only, for data without entropy.
_SURPRISAL_ONLY = {"TRACE+": "TRACE+ (surprisal-only)", "TRACE": "TRACE (surprisal-only)"}
_SURPRISAL_FEATURE_SET = "surprisal"  # the key of features.FEATURE_SETS that TRACE+ (surprisal-only) uses


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
    MetricSpec("prr", "PRR", True, "score"),
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
    kind : {"trace_plus", "trace", "baseline", "fitted_baseline", "reference"}
        TRACE+, the fitted baselines and the reference are fitted on feature vectors; TRACE and the scalar baselines
        are scores calibrated alike (see the module docstring).
    needs : {"trace", "beam", "embedding", "top_k"}
        Input beyond the answers' traces.
    feature_set : str or None
        TRACE+ only: the key of :data:`trace_core.methods.features.FEATURE_SETS`.
    extended : bool
        Listed only when the extended set of methods is asked for (the TRACE+ feature-set variants).
    baseline : Baseline or None
        Scalar baselines only: the :data:`trace_core.methods.baselines.BASELINES` entry (formula and scoring function).
    fitted : FittedBaseline or None
        Fitted baselines only: the :data:`trace_core.methods.fitted_baselines.FITTED_BASELINES` entry.
    transform : str
        Scalar methods: the monotone transform their scalar calibrator is fitted on (a key of
        :data:`trace_core.calibration.calibrators.SCORE_TRANSFORMS`); TRACE's ``exp(-R)`` is calibrated on ``log``, i.e.
        on ``-R``.
    needs_entropy : bool
        Reads the per-token entropy H; skipped (with that reason) on data that holds only chosen-token
        log-probabilities.
    surprisal_only : str or None
        TRACE and TRACE+: the variant that runs in their place on data without entropy.
    description : str
        One line for tables and tooltips.
    """

    name: str
    family: str
    kind: str
    needs: str = "trace"
    feature_set: str | None = None
    extended: bool = False
    baseline: Baseline | None = field(default=None, repr=False)
    fitted: FittedBaseline | None = field(default=None, repr=False)
    transform: str = "identity"
    needs_entropy: bool = True
    surprisal_only: str | None = None
    description: str = ""

    @property
    def is_trace(self) -> bool:
        return self.kind in ("trace_plus", "trace")

    @property
    def is_fitted(self) -> bool:
        """Fitted on feature vectors per calibration part (TRACE+, the fitted baselines and the reference) rather than
        a scalar score calibrated."""
        return self.kind in ("trace_plus", "fitted_baseline", "reference")

    @property
    def is_baseline(self) -> bool:
        """A baseline of the best-baseline choice (scalar or fitted)."""
        return self.kind in ("baseline", "fitted_baseline")


def _feature_set_needs_entropy(feature_set: str) -> bool:
    needs = getattr(features, "needs_entropy", None)
    return bool(needs(feature_set)) if needs is not None else feature_set != _SURPRISAL_FEATURE_SET


def _baseline_needs_entropy(baseline: Baseline) -> bool:
    needs = getattr(baseline, "needs_entropy", None)
    return bool(needs) if needs is not None else "H" in baseline.formula  # entropy formulas are written with H


def _methods() -> dict[str, Method]:
    out = [Method("TRACE+", "trace", "trace_plus", feature_set="paper", surprisal_only=_SURPRISAL_ONLY["TRACE+"],
                  description="logistic regression on the paper's 8 trace features, as published")]
    out += [Method(f"TRACE+ ({fs})", "trace", "trace_plus", feature_set=fs, extended=True,
                   needs_entropy=_feature_set_needs_entropy(fs), description=f"TRACE+ on the {fs!r} feature set")
            for fs in FEATURE_SETS if fs not in ("paper", _SURPRISAL_FEATURE_SET)]
    out.append(Method(_SURPRISAL_ONLY["TRACE+"], "trace", "trace_plus", feature_set=_SURPRISAL_FEATURE_SET,
                      extended=True, needs_entropy=False,
                      description="TRACE+ on surprisal-only features (for data without entropy)"))
    out.append(Method("TRACE", "trace", "trace", transform="log", surprisal_only=_SURPRISAL_ONLY["TRACE"],
                      description="exp(-R), R = 0.4 D_2(H) + 0.4 M_4(H) + 0.2 L_1/4(s)"))
    out.append(Method(_SURPRISAL_ONLY["TRACE"], "trace", "trace", transform="log", extended=True,
                      needs_entropy=False, description="TRACE's risk on surprisal only (for data without entropy)"))
    out += [Method(b.name, b.family, "baseline", needs=b.needs, baseline=b, transform=b.transform,
                   needs_entropy=_baseline_needs_entropy(b), description=b.formula)
            for b in BASELINES.values()]
    out += [Method(b.name, b.family, "fitted_baseline", needs=b.needs, fitted=b, needs_entropy=b.needs_entropy,
                   description=f"{b.formula} ({b.source})") for b in FITTED_BASELINES.values()]
    out.append(Method(REFERENCE, "reference", "reference", needs_entropy=False,
                      description="supervised reference: TRACE+'s logistic regression on mean surprisal, log T and "
                                  "the logit of the min token probability"))
    return {m.name: m for m in out}


METHODS: dict[str, Method] = _methods()


def get_method(name: str) -> Method:
    """The :class:`Method` called ``name``; ValueError naming the known ones otherwise."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):

        raise ValueError(f"unknown method {shorten(name)}; known: {', '.join(METHODS)}") from None


def method_names(*, extended: bool = False) -> list[str]:
    """The methods run by default: TRACE+, TRACE, the 23 baselines (20 scalar, 3 fitted) and the supervised likelihood
    reference.

    ``extended=True`` adds the TRACE+ feature-set variants and the surprisal-only variants (which
    :func:`trace_core.evaluation.run.evaluate` also runs in place of TRACE and TRACE+ on data without entropy).
    """
    return [m.name for m in METHODS.values() if extended or not m.extended]


def flaggable_methods() -> list[str]:
    """The methods a :class:`~trace_core.calibration.calibrators.ScoreCalibrator` can calibrate, in registry order:
    TRACE and its surprisal-only variant and the scalar baselines computed from a trace alone (the chosen tokens'
    log-probabilities, the entropy, the top-k alternatives). Beam and semantic baselines need more than a trace (beams,
    a sentence-embedding model), and the fitted baselines (CES, WEPR, trace profile) are not saved as calibrators;
    TRACE+ is :class:`~trace_core.calibration.calibrators.TracePlus`."""
    return [m.name for m in METHODS.values() if m.kind in ("trace", "baseline") and m.needs in ("trace", "top_k")]
