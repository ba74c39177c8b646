"""When a sample is too small to read: fewer than :data:`SMALL_SAMPLE` answers, or fewer than :data:`SMALL_CLASS` of
either class. Its tables bold nothing, the result carries :func:`small_sample_note`, its captions say so
(:func:`bold_caption`), and ``trace-core fit`` warns on a calibrator fitted on such answers."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SMALL_CLASS", "SMALL_SAMPLE", "bold_caption", "small_sample_note"]


#: Fewer answers than this, or fewer than :data:`SMALL_CLASS` of either class, and the figures are unreliable: a
#: split's evaluation part holds about 65% of them, so one answer moves an AUROC by several points; the table then
#: bolds nothing and the result carries :func:`small_sample_note`.
SMALL_SAMPLE = 100
SMALL_CLASS = 10


def small_sample_note(n: int, positives: int | None) -> str:
    """The note on a sample too small to read (see :data:`SMALL_SAMPLE`); "" otherwise. ``positives`` None: the
    share correct is unknown, and only the number of answers decides.

    >>> small_sample_note(16, 5).split(":")[0]
    'Only 16 answers (5 correct, 11 wrong)'
    >>> small_sample_note(400, 120)
    ''
    """
    if positives is None:
        if n >= SMALL_SAMPLE:
            return ""
        counts = ""
    else:
        negatives = n - positives
        if n >= SMALL_SAMPLE and min(positives, negatives) >= SMALL_CLASS:
            return ""
        counts = f" ({positives:,} correct, {negatives:,} wrong)"
    return (f"Only {n:,} answers{counts}: with fewer than {SMALL_SAMPLE} answers "
            f"or fewer than {SMALL_CLASS} of either class the figures are unreliable (one answer moves a split's "
            "AUROC by several points), so nothing is bolded as best; read the intervals and the verdict, and label "
            "more answers")


def bold_caption(small: Sequence[bool]) -> str:
    """What the bold cells of tables mean, for tables of results of which ``small`` say which are too small to read
    (:attr:`trace_core.evaluation.results.EvaluationResult.small_sample`: nothing is bolded in those).

    >>> bold_caption([False]), bold_caption([True])[:17]
    ('Bold: the best mean per column (uninformative scores excluded).', 'Nothing is bolded')
    """
    if small and all(small):
        return "Nothing is bolded: too few answers to tell the best (see the note)."
    return ("Bold: the best mean per column (uninformative scores excluded"
            + ("; none in a table of too few answers" if any(small) else "") + ").")
