"""Every relative link in README.md, benchmarks/README.md and docs/ names a file of the repository, and every
``docs/evidence/NAME`` a page mentions exists: a figure's raw file is found from the page that quotes it.

The raw files under docs/evidence/ are kept byte for byte as they came back, so only the indexes there
(README.md) are read; links inside a run's own output are not the documentation's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "docs" / "evidence"

# [text](target) and [text](target "title"); images too.  Targets with a scheme or only an anchor are not files.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# docs/evidence/NAME in prose or code: a glob such as h200-scale-2gpu*.txt is no single file and is not matched.
EVIDENCE_MENTION = re.compile(r"docs/evidence/((?:archive/)?[\w.+-]+\.\w+)(?![\w*])")
# A raw file's own name, as the evidence index and tables of runs give it: the card (or cpu), then the run.
RAW_NAME = re.compile(r"(?<![\w/*-])((?:h100|h200|cpu)-[\w.+-]*?\.(?:txt|md|json|jsonl|tsv|csv))(?![\w*])")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)


def pages() -> list[Path]:
    found = [REPO / "README.md", REPO / "benchmarks" / "README.md"]
    for page in sorted((REPO / "docs").rglob("*.md")):
        if EVIDENCE in page.parents and page.name != "README.md":
            continue  # a run's raw output, not a page
        found.append(page)
    return found


def links(text: str) -> list[str]:
    """The link targets of a markdown text outside fenced code blocks."""
    return LINK.findall(FENCE.sub("", text))


def broken_links(page: Path, repo: Path = REPO) -> list[str]:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # https:, mailto:, an anchor on this page
        path = target.split("#", 1)[0]
        resolved = (page.parent / path).resolve()
        if repo not in resolved.parents and resolved != repo:
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(target)
    return broken


def missing_evidence(page: Path, evidence: Path = EVIDENCE) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return sorted({name for name in EVIDENCE_MENTION.findall(text) if not (evidence / name).is_file()})


def unknown_raw_names(page: Path, evidence: Path = EVIDENCE) -> list[str]:
    """Raw-file names a page mentions that are neither in docs/evidence/ nor in its archive/."""
    kept = {path.name for path in evidence.rglob("*") if path.is_file()}
    return sorted(set(RAW_NAME.findall(page.read_text(encoding="utf-8"))) - kept)


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_names_a_file_that_exists(page: Path) -> None:
    assert broken_links(page) == [], f"{page.relative_to(REPO)} links to files that do not exist"


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(REPO)))
def test_every_evidence_file_a_page_names_exists(page: Path) -> None:
    assert missing_evidence(page) == [], f"{page.relative_to(REPO)} names evidence files that do not exist"
    assert unknown_raw_names(page) == [], f"{page.relative_to(REPO)} names raw runs kept nowhere under docs/evidence/"


def test_a_broken_link_and_a_missing_evidence_file_are_found(tmp_path: Path) -> None:
    """The checks can fail: a page linking a file that is not there, one outside the tree, and naming one."""
    (tmp_path / "docs" / "evidence").mkdir(parents=True)
    (tmp_path / "docs" / "index.md").write_text("# index\n", encoding="utf-8")
    (tmp_path / "docs" / "evidence" / "run.txt").write_text("raw\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text("[gone](evidence/no-such-run.txt), [here](index.md#top), [raw](evidence/run.txt),\n"
                    "[web](https://example.org/x.md), [anchor](#top), [out](../../elsewhere.md),\n"
                    "`docs/evidence/no-such-run.txt`, `docs/evidence/run.txt`, `docs/evidence/h200-scale-2gpu*.txt`\n"
                    "a run by its name: h200-gone-run.txt, h200-run*.txt\n"
                    "```\n[in a fence](nowhere.md)\n```\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == ["evidence/no-such-run.txt", "../../elsewhere.md (outside the repository)"]
    assert missing_evidence(page, tmp_path / "docs" / "evidence") == ["no-such-run.txt"]
    assert unknown_raw_names(page, tmp_path / "docs" / "evidence") == ["h200-gone-run.txt"]
