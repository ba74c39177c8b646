"""Evaluation metrics for confidence scores of LLM answers.

Conventions shared by every function in this package:

- ``y_true`` is a 1-D array of binary labels, ``1`` meaning *the answer is correct*.
  Booleans and the numbers 0/1 (of any numeric dtype) are accepted; anything else is rejected.
- Confidence scores are *higher = more likely correct*. Ranking metrics (AUROC, AUPRC, ROC curve,
  AURC, PRR, risk at coverage) accept any finite real score; calibration metrics (Brier, ECE, reliability
  table) take probabilities ``y_prob`` that must be finite and lie in ``[0, 1]`` -- out-of-range values
  raise instead of being clipped.
- A ranking metric that is undefined because ``y_true`` holds a single class (AUROC, AUPRC, PRR) emits
  :class:`UndefinedMetricWarning` and returns ``nan``.

One module per kind, as in ``sklearn.metrics``; import every name from here:

=================  ===========================================================================================
``calibration``    :func:`brier_score`, :func:`bin_probabilities` (the one binning), :func:`expected_calibration_error`,
                   :func:`reliability_table`
``ranking``        :func:`auroc`, :func:`roc_curve`, :func:`tpr_at_fpr`, :func:`auprc`, :class:`RankGroups`
``selective``      :func:`risk_coverage_curve`, :func:`aurc`, :func:`prr`, :func:`risk_at_coverage`
``intervals``      :func:`wilson_interval`, :func:`bootstrap_ci`
=================  ===========================================================================================
"""

from trace_core.metrics._common import UndefinedMetricWarning
from trace_core.metrics.calibration import bin_probabilities, brier_score, expected_calibration_error, reliability_table
from trace_core.metrics.intervals import bootstrap_ci, wilson_interval
from trace_core.metrics.ranking import RankGroups, auprc, auroc, roc_curve, tpr_at_fpr
from trace_core.metrics.selective import aurc, prr, risk_at_coverage, risk_coverage_curve

__all__ = [
    "RankGroups",
    "UndefinedMetricWarning",
    "auprc",
    "aurc",
    "auroc",
    "bin_probabilities",
    "bootstrap_ci",
    "brier_score",
    "expected_calibration_error",
    "prr",
    "reliability_table",
    "risk_at_coverage",
    "risk_coverage_curve",
    "roc_curve",
    "tpr_at_fpr",
    "wilson_interval",
]
