"""The documents stay what they say (docs/DESIGN.md, Layout): the design at most 400 lines,
the README at most 120; history goes to CHANGELOG.md. Reads the tree, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMITS = {"docs/DESIGN.md": 400, "README.md": 120}


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_document_within_its_length(name: str) -> None:
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    assert len(lines) <= LIMITS[name], (
        f"{name} has {len(lines)} lines, over {LIMITS[name]}: condense it, or move history to "
        "CHANGELOG.md"
    )


def test_design_anchors_resolve() -> None:
    """Every link to a section of the design names a section it has."""
    design = (ROOT / "docs/DESIGN.md").read_text(encoding="utf-8")
    anchors = {
        "".join(c for c in line.lstrip("#").strip().lower() if c.isalnum() or c in " -_").replace(
            " ", "-"
        )
        for line in design.splitlines()
        if line.startswith("#")
    }
    links = [
        (doc.name, part.split(")")[0])
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for part in doc.read_text(encoding="utf-8").split("DESIGN.md#")[1:]
    ]
    assert ("crawl-dir.md", "the-crawl-directory") in links  # the scan sees the links
    assert [link for link in links if link[1] not in anchors] == []
