"""README.md and docs/*.md: every relative link resolves, every #anchor names a heading of its page,
the README stays short and indexes every page, and the Markdown keeps its code fences and tables
whole. Needs no build: it reads the Markdown files only (see conftest.py's `no_module` marker)."""
import collections
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

# The README is the first page a newcomer reads: the intro, Quick start, a short Usage, the Python
# example, the camera convention and the index of docs/ (about 110 lines). 160 leaves room for a few
# more lines of that kind, and fails when a whole section (the shortest, Fuzzing, is ~55 lines) or a
# long table is pasted back instead of going to a page under docs/.
README_MAX_LINES = 160

pytestmark = pytest.mark.no_module

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# An inline link or image: [text](target) / ![alt](target "title"); the text may hold `code`.
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose_lines(text: str):
    """(line number, line) of every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (links reduced to their text) lowercased, every
    character that is not a letter, digit, space, hyphen or underscore removed, spaces -> hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set:
    """Every heading anchor of a page; a repeated slug gets -1, -2, ... as on GitHub."""
    seen = collections.Counter()
    result = set()
    for _, line in prose_lines(page.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        result.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return result


def links(page: pathlib.Path):
    """(line number, target) of every inline link and image outside code blocks and code spans; a
    link's text may run over a line break."""
    lines = page.read_text().splitlines()
    prose = dict(prose_lines(page.read_text()))
    text = "\n".join(prose.get(number, "") for number in range(1, len(lines) + 1))
    # Code spans (paired left to right) are not links; blanking them keeps every offset, and a link
    # whose text is or holds a span still matches with blanks for text.
    text = re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), text)
    for match in LINK.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(2)


def test_slug_rule():
    assert github_slug("Viewer: `lingbot-map view`, `run --serve`") == "viewer-lingbot-map-view-run---serve"
    assert github_slug("Viewer frame format (`viewer/NNNNNN.bin`)") == "viewer-frame-format-viewernnnnnnbin"
    assert github_slug("Soak: 10,000 frames, bounded cost") == "soak-10000-frames-bounded-cost"
    assert github_slug("224 px, bf16, 400 frames | all *three* it's") == "224-px-bf16-400-frames--all-three-its"
    assert github_slug("See [the options](cli.md#x) snake_case") == "see-the-options-snake_case"


def test_every_page_has_links_and_headings():
    # Guards the parsers: a regex that silently matched nothing would pass every other test.
    assert len(PAGES) >= 10
    assert sum(1 for page in PAGES for _ in links(page)) >= 40
    assert "camera-convention" in anchors(DOCS / "accuracy.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    problems = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{number}: ({target})"
        if not resolved.exists():
            problems.append(f"{where}: {resolved} does not exist")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading with anchor #{anchor} in {resolved.relative_to(ROOT)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_is_whole(page):
    """Code fences are balanced and every table row has as many cells as its header."""
    lines = page.read_text().splitlines()
    fences = [n for n, line in enumerate(lines, 1) if FENCE.match(line)]
    assert len(fences) % 2 == 0, f"{page.name}: unbalanced code fence (fence lines {fences})"
    problems = []
    header = None
    for number, line in prose_lines(page.read_text()):
        if not line.startswith("|"):
            header = None
            continue
        # Cells: split on | that is not escaped (`\|`), as GitHub does, code spans included.
        cells = len(re.findall(r"(?<!\\)\|", line))
        if header is None:
            header = cells
        elif cells != header:
            problems.append(f"{page.name}:{number}: {cells - 1} cells, the table's header has {header - 1}")
    assert not problems, "\n".join(problems)


def test_readme_is_short_and_indexes_every_page():
    readme = ROOT / "README.md"
    count = len(readme.read_text().splitlines())
    assert count < README_MAX_LINES, f"README.md has {count} lines: move detail to a page under docs/"
    linked = {(readme.parent / target.partition("#")[0]).resolve() for _, target in links(readme)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_every_docs_page_links_back_to_the_readme():
    for page in sorted(DOCS.glob("*.md")):
        if page.name in ("golden-cases.md", "naming.md"):  # reference documents, linked from the index
            continue
        targets = {(page.parent / t.partition("#")[0]).resolve() for _, t in links(page)}
        assert (ROOT / "README.md").resolve() in targets, f"{page.name} has no link back to the README"


def python_blocks(page: pathlib.Path):
    return re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M)


def test_readme_python_example_is_the_python_page_s():
    # tests/python/test_examples.py runs the README's five-line example; docs/python.md opens with the
    # same one, so the two cannot drift apart.
    assert python_blocks(ROOT / "README.md")[0] == python_blocks(DOCS / "python.md")[0]
