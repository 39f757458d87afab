"""Every link in the README and docs/ points at a file (and heading) of this repository:
the docs must read offline, from a checkout, and never send a reader to a page that moved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "bench").rglob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'."""
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves_inside_the_repository(page):
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            bad.append(f"{target}: outside the repository")
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not bad, f"{page.relative_to(REPO)}:\n" + "\n".join(bad)


def test_the_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n[a](missing.md) [b](#top) [c](#nope) [d](https://x.org)\n")
    found = links(page)
    assert found == ["missing.md", "#top", "#nope", "https://x.org"]
    assert anchors(page) == {"top"}
