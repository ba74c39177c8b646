"""The heatmap's hover cards (HTML and CSS only) and the one way control characters are shown (``visible_token``).

The HTML is read back with the standard library's parser into a small tree, so the checks are about the document a
browser builds, not about substrings.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from html.parser import HTMLParser

import numpy as np
import pytest
from helpers import make_trace

pytest.importorskip("plotly")

from app.heatmap import HEATMAP_CSS, PARTIAL_ALTERNATIVE_NOTE, heatmap_html, legend_html, signal_values  # noqa: E402
from app.text import control_safe, visible_token  # noqa: E402
from trace_core import Trace, TraceMetadata, explain_trace  # noqa: E402

HOSTILE = "<img src=x onerror=alert(1)>"
VOID = {"br", "img", "hr", "input", "meta", "link"}


@dataclasses.dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list = dataclasses.field(default_factory=list)  # Nodes and str

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def find_all(self, predicate) -> list[Node]:
        out = [self] if predicate(self) else []
        for c in self.children:
            if isinstance(c, Node):
                out += c.find_all(predicate)
        return out

    def by_class(self, name: str) -> list[Node]:
        return self.find_all(lambda n: name in n.attrs.get("class", "").split())


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.tags.append(tag)
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(markup: str) -> tuple[Node, list[str]]:
    builder = _Builder()
    builder.feed(markup)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root, builder.tags


def tokens_of(markup: str) -> list[Node]:
    root, _ = parse(markup)
    return root.by_class("tr-tok")


def card_of(token: Node) -> Node:
    (card,) = [c for c in token.children if isinstance(c, Node) and "tr-card" in c.attrs.get("class", "").split()]
    return card


def shown_text(token: Node) -> str:
    """The token's own text on the page (its card is hidden until hovered or focused)."""
    return "".join(c if isinstance(c, str) else ("" if "tr-card" in c.attrs.get("class", "") else shown_text(c))
                   for c in token.children)


def _trace(tokens, *, entropy=True, ranks=True, k=3, top_tokens=None) -> Trace:
    n = len(tokens)
    rng = np.random.default_rng(n)
    s = rng.gamma(1.0, 1.0, n)
    top_lp = np.log(np.tile(np.array([0.5, 0.3, 0.15, 0.04, 0.01][:k]), (n, 1)))
    return Trace(prompt="p", answer="".join(tokens), token_ids=np.arange(n), tokens=tuple(tokens), surprisal=s,
                 entropy=s + 0.5 if entropy else None, top_ids=np.arange(n)[:, None] + np.arange(k),
                 top_logprobs=top_lp, ranks=np.arange(1, n + 1) if ranks else None, top_tokens=top_tokens,
                 metadata=TraceMetadata() if entropy else TraceMetadata(entropy_source="absent"))


# --- the card -------------------------------------------------------------------------------------------------------

def test_every_token_is_focusable_and_points_at_its_own_card():
    trace = make_trace([0.1, 2.0, 0.3, 0.2, 4.0])
    markup = heatmap_html(trace)
    assert "title=" not in markup  # no native tooltip any more
    tokens = tokens_of(markup)
    assert [t.attrs["data-index"] for t in tokens] == [str(i) for i in range(len(trace))]
    ids = []
    for token in tokens:
        card = card_of(token)
        assert token.attrs["tabindex"] == "0"
        assert card.attrs["role"] == "tooltip"
        assert token.attrs["aria-describedby"] == card.attrs["id"]
        ids.append(card.attrs["id"])
    assert len(set(ids)) == len(ids)


def test_ids_differ_between_answers_but_not_between_renders():
    a, b = make_trace([0.1, 2.0]), make_trace([0.3, 1.0])
    ids = lambda t: [card_of(x).attrs["id"] for x in tokens_of(heatmap_html(t))]  # noqa: E731
    assert ids(a) == ids(a)  # a rerun renders the same HTML
    assert not set(ids(a)) & set(ids(b))  # two heatmaps on one page never share an id


def test_card_shows_number_text_probability_surprisal_entropy_rank_and_alternatives():
    trace = _trace(["The", " year", " 1852"], top_tokens=(("a", "b", "c"), (" 1862", " 1852", " 18"), ("x", "y", "z")))
    card = card_of(tokens_of(heatmap_html(trace, alternatives=lambda t, i: list(t.top_tokens[i])))[1])
    text = card.text()
    assert "Token 2" in text and " year" in text
    p = np.exp(-trace.surprisal[1])
    assert f"{p:.1%}" in text
    assert f"{trace.surprisal[1]:.2f} nats" in text and f"{trace.entropy[1]:.2f} nats" in text
    grid = [c.text() for c in card.by_class("tr-card-grid")[0].children]
    assert grid[grid.index("rank") + 1] == "2"
    rows = card.by_class("tr-card-grid")[1].children
    probabilities = [r.text() for r in rows[0::2]]
    labels = [r.find_all(lambda n: n.tag == "code")[0].text() for r in rows[1::2]]
    assert labels == [" 1862", " 1852", " 18"]
    assert probabilities == [f"{q:.1%}" for q in np.exp(trace.top_logprobs[1])] == ["50.0%", "30.0%", "15.0%"]
    # the chosen token's id is the first alternative's here (top_ids[1] = [1, 2, 3], token_ids[1] = 1)
    assert ["(chosen)" in r.text() for r in rows[1::2]] == [True, False, False]


def test_a_token_without_text_says_which_character_it_begins_and_partial_alternatives_are_explained():
    tokens = ["", "\u3053", "!"]
    trace = _trace(tokens, top_tokens=(("\ufffd", "\ufffd", "K"), ("\u3053", "\u306e", "\ufffd"), ("!", ".", "?")))
    cards = [card_of(t) for t in tokens_of(heatmap_html(trace, alternatives=lambda t, i: list(t.top_tokens[i])))]
    grid = [c.text() for c in cards[0].by_class("tr-card-grid")[0].children]
    assert grid[:2] == ["text", "bytes of '\u3053', which token 2 completes"]
    grids = [[c.text() for c in card.by_class("tr-card-grid")[0].children] for card in cards]
    assert "text" not in grids[1] and "text" not in grids[2]
    # the token that completes the character gives the character's probability: the two tokens' together
    together = np.exp(-(trace.surprisal[0] + trace.surprisal[1]))
    assert grids[1][grids[1].index("whole character") + 1] == f"'\u3053' (tokens 1\u20132): {together:.1%}"
    assert "whole character" not in grids[0] and "whole character" not in grids[2]
    notes = [[n.text() for n in c.by_class("tr-card-note")] for c in cards]
    assert notes == [[PARTIAL_ALTERNATIVE_NOTE], [PARTIAL_ALTERNATIVE_NOTE], []]


def test_an_arabic_answer_reads_right_to_left_and_its_cards_left_to_right():
    root, _ = parse(heatmap_html(_trace(["\u0645\u0631", "\u062d\u0628\u0627", "."])))
    (heatmap,) = root.by_class("tr-heatmap")
    assert heatmap.attrs["dir"] == "auto"  # the answer's first strong character sets the direction
    card_rule = HEATMAP_CSS[HEATMAP_CSS.index(".tr-card {"):]
    assert "direction: ltr; unicode-bidi: isolate;" in card_rule[:card_rule.index("}")]


def test_card_without_entropy_rank_or_alternatives_says_so():
    trace = _trace(["a", "b"], entropy=False, ranks=False, k=0)
    card = card_of(tokens_of(heatmap_html(trace))[0])
    text = card.text()
    assert "not recorded" in text and "rank" not in text and "alternatives" not in text


def test_alternatives_without_text_show_their_ids():
    trace = _trace(["a", "b"])
    card = card_of(tokens_of(heatmap_html(trace))[1])
    assert [c.text() for c in card.find_all(lambda n: n.tag == "code")][1:] == ["id 1", "id 2", "id 3"]


def test_alternatives_note_is_in_every_card_and_escaped():
    trace = _trace(["a", "b", "c"])
    note = f"ids only: recorded with another model {HOSTILE}"
    markup = heatmap_html(trace, alternatives_note=note)
    for token in tokens_of(markup):
        (line,) = card_of(token).by_class("tr-card-note")
        assert line.text() == note
    assert "<img" not in markup
    assert not parse(heatmap_html(trace))[0].by_class("tr-card-note")


def test_hostile_tokens_and_alternatives_show_literally():
    tokens = [HOSTILE, "<script>alert(2)</script>", 'x" onmouseover="alert(3)', "&amp;"]
    trace = _trace(tokens, top_tokens=tuple((HOSTILE, "<b>alt</b>", "&lt;") for _ in tokens))
    markup = heatmap_html(trace, alternatives=lambda t, i: list(t.top_tokens[i]), alternatives_note="<i>n</i>")
    root, tags = parse(markup)
    assert not {"img", "script", "b", "i"} & set(tags)
    nodes = root.by_class("tr-tok")
    assert [shown_text(t) for t in nodes] == tokens  # the page shows exactly what the model wrote
    for token, node in zip(tokens, nodes, strict=True):
        assert set(node.attrs) == {"class", "style", "data-index", "tabindex", "aria-describedby"}
        codes = [c.text() for c in card_of(node).find_all(lambda n: n.tag == "code")]
        assert codes == [token, HOSTILE, "<b>alt</b>", "&lt;"]


def test_spike_and_peak_window_are_named_in_the_card():
    trace = make_trace([0.1, 0.1, 5.0, 0.1, 0.1, 0.1], [0.1, 0.1, 3.0, 0.1, 0.1, 0.1])
    exp = explain_trace(trace)
    nodes = tokens_of(heatmap_html(trace, explanation=exp))
    start, stop = exp.peak_window
    for i, node in enumerate(nodes):
        marks = " ".join(m.text() for m in card_of(node).by_class("tr-card-marks"))
        assert ("spike" in marks) == (i in set(exp.spikes.tolist())) == ("tr-spike" in node.attrs["class"])
        assert ("peak window" in marks) == (start <= i < stop)


def test_no_spike_is_marked_when_the_explanation_has_none():
    trace = make_trace([0.1, 0.2, 0.1])
    exp = dataclasses.replace(explain_trace(trace), spikes=np.array([], dtype=np.int64))
    markup = heatmap_html(trace, explanation=exp)
    assert "tr-spike" not in markup and len(tokens_of(markup)) == 3


def test_risk_colouring_puts_the_risk_share_in_the_card():
    trace = make_trace([0.1, 2.0, 0.3])
    exp = explain_trace(trace)
    for i, node in enumerate(tokens_of(heatmap_html(trace, signal="risk", explanation=exp))):
        grid = [c.text() for c in card_of(node).by_class("tr-card-grid")[0].children]
        assert grid[grid.index("risk share") + 1] == f"{exp.contributions[i]:.3f}"
    assert "risk share" not in heatmap_html(trace)


def test_long_tokens_are_shortened_in_the_span_and_the_card():
    trace = _trace(["x" * 1000, "ok"])
    (node, _) = tokens_of(heatmap_html(trace, max_token_chars=50))
    assert shown_text(node) == "x" * 50 + "… (+950 chars)"
    assert card_of(node).find_all(lambda n: n.tag == "code")[0].text() == "x" * 50 + "… (+950 chars)"
    with pytest.raises(ValueError, match="max_token_chars"):
        heatmap_html(trace, max_token_chars=0)


def test_css_opens_the_card_on_hover_focus_and_focus_within_only():
    css = HEATMAP_CSS
    assert "<script" not in css
    base = re.search(r"\.tr-card \{([^}]*)\}", css).group(1)
    assert "display: none" in base and "position: absolute" in base and "max-width" in base
    shown = re.search(r"([^}\n]*)\{display: block;\}", css).group(1)
    assert {s.strip() for s in shown.split(",")} == {".tr-tok:hover > .tr-card", ".tr-tok:focus > .tr-card",
                                                     ".tr-tok:focus-within > .tr-card"}


# --- visible_token and control_safe --------------------------------------------------------------------------------

BIDI = [0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x200E, 0x200F, 0x061C]
ZERO_WIDTH = [0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF]
SEPARATORS = [0x2028, 0x2029]
CONTROLS = [c for c in range(0x20) if chr(c) not in "\t\n\r"] + list(range(0x7F, 0xA0))
ESCAPED = CONTROLS + BIDI + ZERO_WIDTH + SEPARATORS


@pytest.mark.parametrize("token, expected", [
    ("", "∅"), (" ", " "), ("  a b ", "  a b "), ("\n", "↵"), ("\r\n", "↵"), ("\r", "↵"), ("\n\n", "↵↵"),
    ("\r\r\n", "↵↵"), ("\t", "⇥"), ("a\tb\nc", "a⇥b↵c"), ("a\u202eb", "a\\u202eb"), ("\x00", "\\u0000"),
    ("\x7f", "\\u007f"), ("\x85", "\\u0085"), ("\u200b", "\\u200b"), ("\ufeffx", "\\ufeffx"), ("é漢🙂", "é漢🙂"),
    ("\\u202e", "\\u202e"), (HOSTILE, HOSTILE),  # plain text: escaping HTML is the caller's job
])
def test_visible_token(token, expected):
    assert visible_token(token) == expected


def test_visible_token_escapes_exactly_the_listed_characters():
    for code in ESCAPED:
        assert visible_token(chr(code)) == f"\\u{code:04x}", hex(code)
    # Every other character below U+3000 (and a few beyond) is kept as it is, whatever its category.
    listed = set(ESCAPED) | {ord(c) for c in "\t\n\r"}
    for code in [*range(0x20, 0x3000), 0xFE0F, 0x1F642, 0x10FFFD]:
        if code in listed or 0xD800 <= code <= 0xDFFF:
            continue
        assert visible_token(chr(code)) == chr(code), hex(code)
    # Independent check of the listed set: every C0/C1 control is there, and every listed format character is Cf
    # (separators are Zl/Zp).
    assert {c for c in range(0x100) if unicodedata.category(chr(c)) == "Cc"} - {9, 10, 13} <= set(ESCAPED)
    assert all(unicodedata.category(chr(c)) == "Cf" for c in BIDI + ZERO_WIDTH)


def test_visible_token_refuses_a_non_string():
    with pytest.raises(TypeError, match="token"):
        visible_token(None)


def test_control_safe_agrees_with_visible_token_and_keeps_lines():
    for code in ESCAPED:
        assert control_safe(chr(code)) == visible_token(chr(code)), hex(code)
    assert control_safe("a\nb\tc") == "a\nb\tc"  # whole texts keep their lines and tabs
    assert control_safe("a\r\nb\rc") == "a\nb\nc"
    assert control_safe("x\u202ey\u200bz") == "x\\u202ey\\u200bz"
    text = "".join(chr(c) for c in ESCAPED) + "plain"
    assert control_safe(text) == visible_token(text)


def test_heatmap_shows_newlines_and_tabs_with_their_marks_and_keeps_the_layout():
    trace = _trace(["a\r\n", "\tb", "c\nd", "", "\u200b"])
    root, _ = parse(heatmap_html(trace))
    nodes = root.by_class("tr-tok")
    assert [shown_text(n) for n in nodes] == ["a↵", "⇥\u2003b", "c↵d", "", "\\u200b"]
    # a token without text is a slim bar, no glyph that would break the shaping of the text around it
    assert ["tr-bytes" in n.attrs["class"].split() for n in nodes] == [False, False, False, True, False]
    assert ".tr-bytes {padding: 1px 0.25em;}" in HEATMAP_CSS
    scale = signal_values(trace, "surprisal")
    assert "bytes of the next character" in legend_html(scale, pieces=True)
    assert "bytes of the next character" not in legend_html(scale)
    assert [len(n.find_all(lambda x: x.tag == "br")) for n in nodes] == [1, 0, 1, 0, 0]  # a newline breaks the line
    # the card shows the token the same way, without the layout
    assert [card_of(n).find_all(lambda x: x.tag == "code")[0].text() for n in nodes] == [
        "a↵", "⇥b", "c↵d", "∅", "\\u200b"]


def test_card_shows_the_entropy_bounds_of_a_top_k_estimate():
    import dataclasses

    from helpers import make_trace

    from app.heatmap import heatmap_html
    from trace_core.traces.trace import TraceMetadata

    trace = make_trace([0.1, 2.0, 0.3], [0.5, 1.5, 0.4])
    meta = TraceMetadata(entropy_source="top_k", entropy_k=5,
                         extra={"entropy_lower": [0.5, 1.5, 0.4], "entropy_upper": [0.9, 3.25, 0.7]})
    out = heatmap_html(dataclasses.replace(trace, metadata=meta))
    assert "1.50 – 3.25 nats (top-5)" in out and out.count("entropy bounds") == 3
    assert "entropy bounds" not in heatmap_html(trace)  # exact entropy: no bounds
    broken = TraceMetadata(entropy_source="top_k", entropy_k=5, extra={"entropy_lower": [0.5], "entropy_upper": "x"})
    assert "entropy bounds" not in heatmap_html(dataclasses.replace(trace, metadata=broken))
