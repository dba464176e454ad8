"""Every relative link in the README and docs/ leads to a file that exists, and every page of docs/ is on its index."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")


FOLDERS = ("docs", "deploy", "tests", "examples", "benchmarks", "primus", "services")  # where the project's pages are


def _pages() -> list[Path]:
    return sorted(ROOT.glob("*.md")) + sorted(page for folder in FOLDERS for page in (ROOT / folder).rglob("*.md"))


def _broken(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            broken.append(f"{page.relative_to(ROOT)}: {target}")
    return broken


def test_every_relative_link_of_the_markdown_pages_leads_to_a_file() -> None:
    pages = _pages()
    assert any(p.name == "README.md" and p.parent == ROOT for p in pages)
    broken = [link for page in pages for link in _broken(page)]
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_the_docs_index_names_every_page() -> None:
    index = ROOT / "docs" / "README.md"
    linked = {(index.parent / target.split("#", 1)[0]).resolve() for target in LINK.findall(index.read_text())}
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md") if p != index}
    assert pages, "docs/ holds pages"
    missing = sorted(str(p.relative_to(ROOT)) for p in pages - linked)
    assert not missing, f"docs/README.md does not name: {missing}"
