"""How long a notebook takes a learner, from a stated rule, and which of its cells a first reading skips.

The rule (the README's "Reading times and the fast track" says it to learners): 200 words of markdown a
minute, 8 non-blank code lines a minute, 6 minutes an exercise, rounded up to 5 minutes. The *first
reading* leaves out the "Going deeper" parts: a markdown heading that starts with ``Going deeper`` opens
one, and it runs until the next heading of the same or a higher level. ``navigation.sync`` writes both
times into each notebook's opening and into the course map; tests/unit/test_consistency.py recomputes them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 8
MINUTES_PER_EXERCISE = 6
ROUND_TO_MINUTES = 5
DEEPER_TAG = "going-deeper"
GENERATED_TAGS = {"navigation", "course-map"}  # cells navigation.sync writes: not counted
COLLAPSED = "jp-MarkdownHeadingCollapsed"  # JupyterLab 4 opens such a heading's section collapsed

TIME_LINE = re.compile(r"^\*\*Time:?\*\*:?.*$", re.M)  # written from this count, so not part of it
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
WORD = re.compile(r"[^\W_][\w'\u2019.-]*")
EXERCISE_CHECK = re.compile(r"\b(q\d+)\.check\(")


@dataclass(frozen=True)
class ReadingTime:
    """Minutes for a first reading (no Going deeper parts) and for everything."""

    first: int
    full: int

    def __str__(self) -> str:
        return f"first reading about {self.first} min, everything about {self.full} min"


def heading(cell) -> tuple[int, str] | None:
    """``(level, text)`` of a markdown cell that starts with a heading, else None."""
    if cell.cell_type != "markdown":
        return None
    match = HEADING.match(cell.source.lstrip().split("\n", 1)[0])
    return (len(match.group(1)), match.group(2).strip()) if match else None


def is_deeper_heading(cell) -> bool:
    """A markdown cell whose heading opens a Going deeper part."""
    found = heading(cell)
    return found is not None and found[1].startswith("Going deeper")


def going_deeper(cells) -> list[bool]:
    """For each cell, whether it belongs to a Going deeper part (its heading included).

    A cell belongs where its first line stands; a heading further down a markdown cell opens or closes a part
    for the cells after it (tests/unit/test_learner_path.py asks for such headings to start a cell of their own).
    """
    inside, opened_at = [], None
    for cell in cells:
        belongs = None
        for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
            if match := HEADING.match(line):
                level, text = len(match.group(1)), match.group(2).strip()
                if opened_at is not None and level <= opened_at:
                    opened_at = None
                if opened_at is None and text.startswith("Going deeper"):
                    opened_at = level
            if belongs is None and line.strip():
                belongs = opened_at is not None
        inside.append(opened_at is not None if belongs is None else belongs)
    return inside


def _words(text: str) -> int:
    return len(WORD.findall(LINK_TARGET.sub("]", text)))


def _minutes(cells) -> float:
    words = sum(_words(TIME_LINE.sub("", cell.source)) for cell in cells if cell.cell_type == "markdown")
    lines = sum(1 for cell in cells if cell.cell_type == "code" for line in cell.source.splitlines() if line.strip())
    exercises = {name for cell in cells if cell.cell_type == "code" for name in EXERCISE_CHECK.findall(cell.source)}
    return words / WORDS_PER_MINUTE + lines / CODE_LINES_PER_MINUTE + len(exercises) * MINUTES_PER_EXERCISE


def _rounded(minutes: float) -> int:
    return ROUND_TO_MINUTES * max(1, math.ceil(minutes / ROUND_TO_MINUTES - 1e-9))


def reading_time(notebook) -> ReadingTime:
    """The rule applied to a notebook (an nbformat node or a path); generated cells and the time line are not counted."""
    if isinstance(notebook, str | Path):
        notebook = nbformat.read(notebook, as_version=4)
    cells = [cell for cell in notebook.cells if not GENERATED_TAGS & set(cell.get("metadata", {}).get("tags", []))]
    first = [cell for cell, deeper in zip(cells, going_deeper(cells), strict=True) if not deeper]
    return ReadingTime(first=_rounded(_minutes(first)), full=_rounded(_minutes(cells)))
