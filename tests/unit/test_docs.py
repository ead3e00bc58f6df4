"""The README is a short front door and the docs pages hang together: every relative link resolves, every page
is reachable from the README. Text only (pathlib + re), no project imports."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
MAX_README_LINES = 250

# [text](target) or [text](target "title"); the text may hold backticks but not brackets. Images match too.
LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = ("http://", "https://", "mailto:")


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(path: Path) -> str:
    """The file without its fenced code blocks and inline code spans: links are only read in prose."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`\n]*`", "", line))
    return "\n".join(lines)


def relative_links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file, anchors stripped (pure #anchors and URLs skipped)."""
    targets = []
    for target in LINK.findall(prose(path)):
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_the_readme_is_at_most_250_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page: Path):
    broken = []
    for target in relative_links(page):
        resolved = (page.parent / target).resolve()
        if not resolved.is_relative_to(REPO_ROOT) or not resolved.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO_ROOT)}: links to missing files {broken}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / target).resolve() for target in relative_links(README)}
    unlinked = [page.name for page in sorted(DOCS.glob("*.md")) if page.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_the_link_reader_finds_links_and_skips_urls_anchors_and_code(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        'See [a](docs/a.md#part), [`b`](../b.md) and ![c](img/c.png "title").\n'
        "Not [web](https://example.org), [mail](mailto:x@y.z), [here](#anchor), `[code](nope.md)`.\n"
        "```\n[fenced](nope.md)\n```\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["docs/a.md", "../b.md", "img/c.png"]
