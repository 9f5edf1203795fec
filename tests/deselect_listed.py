"""The files of ``--deselect-listed`` (tests/conftest.py): test ids that a run leaves out."""

from __future__ import annotations

from pathlib import Path


def listed_tests(path: str | Path) -> set[str]:
    """The node ids of a ``--deselect-listed`` file (a node id may hold ``#``: only whole lines are comments)."""
    lines = (line.strip() for line in Path(path).read_text().splitlines())
    return {line for line in lines if line and not line.startswith("#")}
