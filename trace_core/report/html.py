"""One self-contained HTML file of an evaluation: what the data held, the metrics and paired tables, the verdict, the
figures as interactive Plotly (its JavaScript inline, so the file opens offline), the settings, the versions and, when
given, the calibrator's provenance. Written by ``trace-core evaluate --report out.html`` and the Calibrate page.

Every text from the data (method and group names, notes quoting values) is HTML-escaped; the figures' labels are
escaped for Plotly (:func:`trace_core.report.figures.plotly_text`). Needs plotly (``pip install 'trace-core[report]'``).
"""

from __future__ import annotations

import dataclasses
import html
import json
import platform
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from trace_core import __version__
from trace_core.evaluation.paired import BEST_BASELINE
from trace_core.evaluation.results import CALIBRATOR_NAMES, EvaluationResult
from trace_core.evaluation.small_sample import bold_caption
from trace_core.methods.registry import METHODS, METRICS, REFERENCE

__all__ = ["FIGURE_BASELINES", "figure_baselines", "report_html"]

#: Baselines drawn in the figures beside TRACE and TRACE+ (those that ran), after the best baselines the calibration
#: parts chose most often (:func:`figure_baselines`).
FIGURE_BASELINES = ("SeqLogP", "Mean Entropy")

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; line-height: 1.45; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.3rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05rem; margin-top: 1.4rem; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.6rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; white-space: nowrap; }
th:first-child, td:first-child, th:nth-child(2), td:nth-child(2) { text-align: left; }
table.paired td { white-space: normal; } .nw { white-space: nowrap; } .scroll { overflow-x: auto; }
td.best { font-weight: bold; } .note { background: #fff8e1; border-left: 4px solid #f0b400; padding: 0.4rem 0.7rem; }
.verdict { background: #e8f1fb; border-left: 4px solid #1f77b4; padding: 0.5rem 0.8rem; }
.small { color: #555; font-size: 0.85rem; } .figures { display: grid; grid-template-columns: 1fr; gap: 0.5rem; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2rem 1rem; font-size: 0.85rem; }
dt { color: #555; } dd { margin: 0; font-family: ui-monospace, monospace; white-space: pre-wrap; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text))


def _metrics_table(result: EvaluationResult, calibrator: str) -> str:
    table = result.metric_table(calibrator=calibrator)
    metrics = table.metrics
    bold = result.best_cells(table)
    head = "".join(f"<th>{_e(METRICS[m].title)}</th>" for m in metrics)
    rows = []
    for method in table.methods:
        cells = []
        for m in metrics:
            best = " class=best" if bold.at[method, m] else ""
            cells.append(f"<td{best}>{table.mean.at[method, m]:.3f} ± {table.std.at[method, m]:.3f}</td>")
        note = result.note(method)
        name = _e(method) + (f' <span class="small">({_e(note)})</span>' if note else "")
        rows.append(f"<tr><td>{name}</td><td>{_e(table.family[method])}</td>{''.join(cells)}</tr>")
    return f"<div class=\"scroll\"><table><tr><th>method</th><th>family</th>{head}</tr>{''.join(rows)}</table></div>"


def _paired_table(result: EvaluationResult, calibrator: str) -> str:
    if result.paired is None:
        return ""
    table = result.paired.table(calibrator=calibrator, versus=(BEST_BASELINE, REFERENCE))
    if table.empty:
        return ""
    head = "".join(f"<th>{_e(METRICS[c].title if c in METRICS else ('minus' if c == 'versus' else c))}</th>"
                   for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{_paired_cell(v)}</td>" for v in row) + "</tr>"
                   for row in table.itertuples(index=False))
    # a cell may break before its wins, so that the table fits a laptop's window (a value never breaks)
    return f'<div class="scroll"><table class="paired"><tr>{head}</tr>{body}</table></div>'


def _paired_cell(value: Any) -> str:
    """A paired-table cell: "mean ± std" kept on one line, "(wins/splits)" free to go to the next."""
    text = str(value)
    value_part, wins, rest = text.rpartition(" (")
    if not wins or not rest.endswith(")"):
        return f'<span class="nw">{_e(text)}</span>'
    return f'<span class="nw">{_e(value_part)}</span> <span class="nw">({_e(rest)}</span>'


def figure_baselines(result: EvaluationResult, calibrator: str = "platt") -> list[str]:
    """The baselines the figures show beside TRACE and TRACE+ (the report's, and the Calibrate page's by default):
    for Brier (after ``calibrator``) and AUROC, the verdict's metrics, the baseline that the calibration parts chose
    most often as the best baseline (the one the verdict names first; the same for every method compared with it);
    then :data:`FIGURE_BASELINES`; only those that ran, each once."""
    chosen: list[str] = []
    paired = result.paired
    if paired is not None:
        subjects = list(dict.fromkeys(paired.summary["method"]))  # TRACE+ first when it ran
        for metric in ("brier", "auroc"):  # every subject is compared with the same choice on each split
            rows = (paired.get(m, BEST_BASELINE, metric, calibrator) for m in subjects)
            counts = next((r["chosen_counts"] for r in rows if r is not None and r["chosen_counts"]), None)
            if counts:
                chosen.append(next(iter(counts)))  # most often first
    return list(dict.fromkeys(m for m in (*chosen, *FIGURE_BASELINES) if m in result.methods))


def _figure_methods(result: EvaluationResult, calibrator: str) -> list[str]:
    return [m for m in result.methods if METHODS[m].is_trace][:4] + figure_baselines(result, calibrator)


def _figures(result: EvaluationResult, calibrator: str, title: str, first: bool) -> tuple[str, bool]:
    """The reliability diagram, risk–coverage and ROC curves of the first held-out split, as HTML divs; plotly.js
    inline with the first figure of the report only."""
    from trace_core.report.figures import legend_stats, reliability_figure, risk_coverage_figure, roc_figure

    held = result.held_out
    if held is None or not len(held):
        return "", first
    y = held.labels
    shown = _figure_methods(result, calibrator)
    probabilities = held.probabilities(calibrator, shown)
    scores = held.scores(shown)
    subtitle = f"{title}: first held-out split" if title else "First held-out split"
    figures = [reliability_figure(y, probabilities, legend_stats=legend_stats(result, "ece", calibrator),
                                  subtitle=subtitle),
               risk_coverage_figure(y, scores, legend_stats=legend_stats(result, "aurc", calibrator),
                                    subtitle=subtitle),
               roc_figure(y, scores, legend_stats=legend_stats(result, "auroc", calibrator), subtitle=subtitle)]
    parts = []
    for figure in figures:
        parts.append(figure.to_html(full_html=False, include_plotlyjs=bool(first), config={"displaylogo": False}))
        first = False
    return f'<div class="figures">{"".join(parts)}</div>', first


def _section(title: str, result: EvaluationResult, calibrator: str, first: bool) -> tuple[str, bool]:
    out = [f"<h2>{_e(title or 'Results')}</h2>"]
    if result.group_note:
        out.append(f'<p class="small">{_e(result.group_note)}</p>')
    out.append(f"<p>{_e(result.data_note)}; {result.n_answers:,} answers, {result.accuracy:.1%} correct. "
                f"{_e(result.skill_note(calibrator=calibrator))}</p>")
    out += [f'<p class="note">{_e(note)}</p>' for note in result.notes]
    out.append("<h3>Metrics (mean ± std over held-out splits)</h3>")
    out.append(_metrics_table(result, calibrator))
    out.append(f'<p class="small">{_e(result.caption(calibrator=calibrator))} '
               f'{_e(bold_caption([result.small_sample]))}</p>')
    paired = _paired_table(result, calibrator)
    if paired and result.paired is not None:  # a table only when there is a comparison
        out.append("<h3>Paired differences (method minus the other, per split: mean ± std, wins/splits)</h3>")
        out.append(paired)
        out.append(f'<p class="small">Best baseline chosen on calibration: '
                   f"{_e(result.paired.chosen_note(calibrator=calibrator))}.</p>")
    found = result.verdict(calibrator=calibrator)
    if found is not None:
        text = found.paragraph()
        out.append(f'<p class="verdict">{_e(text)}</p><p class="small">{_e(found.rule())}</p>')
    no_skill = result.no_skill_sentence()
    if no_skill:
        out.append(f'<p class="note">{_e(no_skill)}</p>')
    if result.skipped:
        out.append('<p class="small">Not run: ' + "; ".join(f"{_e(m)} ({_e(why)})" for m, why in
                                                             result.skipped.items()) + "</p>")
    if title != "average":
        figures, first = _figures(result, calibrator, title, first)
        out.append(figures)
    return "\n".join(out), first


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"trace-core": __version__, "python": platform.python_version()}
    for package in ("numpy", "pandas", "scikit-learn", "scipy", "plotly"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def _definition_list(items: Mapping[str, Any]) -> str:
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items.items()) + "</dl>"


def report_html(results: Mapping[str, EvaluationResult], *, title: str = "TRACE evaluation report",
                data: Mapping[str, Any] | None = None, calibrator: str | None = None,
                provenance: Mapping[str, Any] | None = None) -> str:
    """The report as one HTML document.

    Parameters
    ----------
    results : mapping of str to EvaluationResult
        ``{"": result}`` for one dataset, or each group titled (``"family = arithmetic"``) and their ``"average"``,
        as :func:`trace_core.evaluation.results.report_markdown` takes them.
    title : str
        The document's title.
    data : mapping, optional
        What was evaluated, shown as given (file name, rows, how labels were made).
    calibrator : {"platt", "isotonic"}, optional
        The scalar calibrator the tables and figures show; default: the evaluation's.
    provenance : mapping, optional
        A calibrator's provenance (``TracePlus.provenance_``), shown in its own section.

    Returns
    -------
    str
        HTML with its styles and plotly.js inline (about 4 MB with figures): nothing is fetched when it opens.
    """
    if not results:
        raise ValueError("`results` is empty: there is nothing to report")
    last = list(results.values())[-1]
    calibrator = calibrator or last.config.scalar_calibrator
    if calibrator not in CALIBRATOR_NAMES:
        raise ValueError(f"`calibrator` must be one of {list(CALIBRATOR_NAMES)}, got {calibrator!r}")
    made = datetime.now(timezone.utc).isoformat(timespec="seconds")
    body = [f"<h1>{_e(title)}</h1>", f'<p class="small">Made {made} by trace-core {_e(_versions()["trace-core"])}. '
            f"Tables and figures: Brier and ECE after {_e(CALIBRATOR_NAMES[calibrator])} for TRACE and the scalar "
            "baselines.</p>"]
    if data:
        body.append("<h2>Data</h2>" + _definition_list(data))
    first = True
    for section_title, result in results.items():
        text, first = _section(section_title, result, calibrator, first)
        body.append(text)
    config = dataclasses.asdict(last.config)
    body.append("<h2>Settings</h2>" + _definition_list({k: json.dumps(v) if not isinstance(v, str) else v
                                                         for k, v in config.items()}))
    if provenance:
        body.append("<h2>Calibrator provenance</h2>" + _definition_list(
            {k: ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in provenance.items()}))
    body.append("<h2>Versions</h2>" + _definition_list(_versions()))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
