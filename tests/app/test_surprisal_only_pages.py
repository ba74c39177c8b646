"""The dashboard's renderers on traces whose data held only the chosen tokens' log-probabilities (no entropy)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("plotly")

from app.explain import explain_risk  # noqa: E402
from app.figures import trace_figure  # noqa: E402
from app.heatmap import heatmap_html, signal_values, token_tooltip  # noqa: E402
from trace_core import Trace, TraceMetadata, explain_trace  # noqa: E402


def _absent(n: int = 12) -> Trace:
    rng = np.random.default_rng(0)
    surprisal = np.where(rng.random(n) < 0.55, 0.0, rng.exponential(0.4, n))
    surprisal[7] = 3.0  # one wrong digit inside a confident chain
    tokens = tuple(f" t{i}" for i in range(n))
    return Trace(prompt="Q: 12 + 7 * 3 = ?", answer="".join(tokens), token_ids=np.full(n, -1), tokens=tokens,
                 surprisal=surprisal, entropy=None, top_ids=[], top_logprobs=[],
                 metadata=TraceMetadata(source="imported", entropy_source="absent"))


def test_heatmap_tooltip_and_figure_render_without_entropy() -> None:
    trace = _absent()
    html = heatmap_html(trace, signal="surprisal")
    assert html.count('class="tr-tok') == len(trace)
    assert "entropy not recorded" in token_tooltip(trace, 0, None)
    names = [t.name for t in trace_figure(trace).data]
    assert "surprisal" in names and "entropy" not in names


def test_entropy_colouring_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="no entropy"):
        signal_values(_absent(), "entropy")


def test_explanation_names_the_surprisal_only_variant_and_points_at_the_spike() -> None:
    trace = _absent()
    exp = explain_trace(trace)
    assert exp.variant == "TRACE (surprisal-only)"
    text = explain_risk(trace, exp)
    assert "TRACE (surprisal-only)" in text and "most surprising stretch" in text
    assert 7 in list(exp.spikes)
