"""The README stays true: its Python examples run, its `trace-core` commands parse, its links (and the docs') resolve.

The Python blocks run in a temporary folder that holds a link to the bundled `assets/`, so they use the demo model and
datasets offline and write nothing into the repository. A block that cannot run here is skipped only when it says why
on its first line (``# readme-test: skip <reason>``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from trace_core.cli import build_parser
from trace_core.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_BYTES = 15_000
SKIP = "# readme-test: skip"

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^)\s]+)\)")


def blocks(path: Path, *languages: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(path.read_text(encoding="utf-8")) if m.group(1) in languages]


def python_blocks() -> list[str]:
    return blocks(README, "python")


def readme_commands() -> list[str]:
    """Every `trace-core ...` command of the README's bash/sh blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in blocks(README, "bash", "sh", "shell", "console"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "trace-core":
                commands.append(line)
    return commands


def test_readme_is_short():
    assert len(README.read_bytes()) <= MAX_README_BYTES


def test_readme_keeps_the_two_quick_start_commands():
    quick = blocks(README, "bash")[0].splitlines()
    assert [line.split("#")[0].strip() for line in quick] == ["make run", "make test"]


def test_readme_has_examples_to_check():
    assert python_blocks(), "the README has no ```python block"
    assert {shlex.split(c)[1] for c in readme_commands()} >= {"generate", "evaluate", "fit", "flag"}


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs(index, tmp_path, monkeypatch):
    code = python_blocks()[index]
    first = code.lstrip().splitlines()[0]
    if first.startswith(SKIP):
        reason = first[len(SKIP):].strip()
        assert reason, "a skipped README block must say why"
        pytest.skip(reason)
    (tmp_path / "assets").symlink_to(ROOT / "assets", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "__readme__"})


def test_readme_commands_parse():
    for command in readme_commands():
        try:
            build_parser().parse_args(shlex.split(command, comments=True)[1:])
        except SystemExit as exc:  # argparse reports a bad command line by exiting with status 2
            pytest.fail(f"`{command}` does not parse (exit status {exc.code})")


@pytest.mark.slow
def test_readme_commands_on_the_bundled_data_run(tmp_path, monkeypatch, capsys):
    """The commands whose inputs are all in the repository run, in order, in a temporary folder (the later ones read
    what the earlier ones wrote)."""
    (tmp_path / "assets").symlink_to(ROOT / "assets", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    ran = []
    for command in readme_commands():
        words = shlex.split(command, comments=True)[1:]
        # files by their extension; folders, patterns and addresses by their slash (a shard folder or a server)
        inputs = [w for w in words[1:] if not w.startswith("-") and (Path(w).suffix in (".csv", ".jsonl", ".txt")
                                                                     or "/" in w)]
        outputs = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--out", "--report", "--tokens")}
        if all((ROOT / w).exists() for w in inputs if w not in outputs):
            assert cli_main(words) == 0, f"`{command}` failed: {capsys.readouterr().err[-2000:]}"
            ran.append(words[0])
    assert ran[:3] == ["evaluate", "fit", "flag"]
    assert (tmp_path / "flagged.csv").stat().st_size > 0


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))  # links inside code blocks are code, not links
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than hyphens and spaces dropped, spaces as hyphens."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        base, n = slug, 1
        while slug in found:
            slug, n = f"{base}-{n}", n + 1
        found.add(slug)
    return found


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    broken = []
    for target in relative_links(path):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no such heading)")
    assert broken == [], f"{path.relative_to(ROOT)}: broken links"


def test_link_check_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# A heading: with `code`\n", encoding="utf-8")
    page.write_text("[ok](other.md#a-heading-with-code) [bad](missing.md) `[not](a-link.md)`\n"
                    "[web](https://example.com) [x](other.md#nowhere)\n", encoding="utf-8")
    assert relative_links(page) == ["other.md#a-heading-with-code", "missing.md", "other.md#nowhere"]
    assert "a-heading-with-code" in anchors(tmp_path / "other.md")


def test_the_docs_index_lists_every_page():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in DOCS if p.name != "README.md" and f"]({p.name})" not in index]
    assert missing == []

