"""Generate the navigation that every notebook ends with, and the course map in notebook 00.

The README's course map (between the course-map markers) is the single source: each notebook's
last cell becomes "previous | course map | next", and notebook 00's cell tagged ``course-map``
gets the same table. ``--check`` changes nothing and exits 1 if a notebook is out of date
(tests/unit/test_consistency.py runs it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

from labsupport.course.paths import repo_root

ROOT = repo_root()
NOTEBOOKS = ROOT / "notebooks"
MAP_START, MAP_END = "<!-- course-map:start -->", "<!-- course-map:end -->"
NAV_TAG, MAP_TAG = "navigation", "course-map"
ROW = re.compile(r"^\| (\d\d) \| \[([\w.]+)\]\(notebooks/[\w.]+\) \| (.+) \|$")


def course_map(readme: Path = ROOT / "README.md") -> list[tuple[str, str, str]]:
    """``(number, file name, what it teaches)`` for each row of the README's course map."""
    text = readme.read_text(encoding="utf-8")
    if MAP_START not in text or MAP_END not in text:
        raise ValueError(f"README.md lacks the {MAP_START} ... {MAP_END} markers")
    block = text.split(MAP_START, 1)[1].split(MAP_END, 1)[0]
    return [match.groups() for line in block.splitlines() if (match := ROW.match(line.strip()))]


def _title(path: Path) -> str:
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("# "):
            return cell.source.lstrip().splitlines()[0][2:].strip()
    return path.stem


def navigation_text(entries: list[tuple[str, str, str]], index: int) -> str:
    """The markdown of the navigation cell of notebook ``entries[index]``."""
    parts = []
    if index > 0:
        previous = entries[index - 1][1]
        parts.append(f"← Previous: [{_title(NOTEBOOKS / previous)}]({previous})")
    parts.append("[Course map](../README.md#course-map)")
    if index + 1 < len(entries):
        following = entries[index + 1][1]
        parts.append(f"Next: [{_title(NOTEBOOKS / following)}]({following}) →")
    return "---\n" + " | ".join(parts)


def map_text(entries: list[tuple[str, str, str]]) -> str:
    """The course-map table of notebook 00, linking each notebook."""
    rows = [f"| {number} | [{name}]({name}) | {teaches} |" for number, name, teaches in entries]
    return "\n".join(["| # | notebook | teaches |", "| --- | --- | --- |", *rows])


def _set_tagged_cell(notebook, tag: str, text: str, append: bool) -> bool:
    for cell in notebook.cells:
        if tag in cell.get("metadata", {}).get("tags", []):
            changed = cell.source != text
            cell.source = text
            return changed
    if not append:
        raise ValueError(f"no cell tagged {tag!r}")
    notebook.cells.append(nbformat.v4.new_markdown_cell(text, metadata={"tags": [tag]}))
    return True


def sync(check: bool = False) -> list[str]:
    """Update (or, with check=True, only compare) every notebook; returns the names out of date."""
    entries = [entry for entry in course_map() if (NOTEBOOKS / entry[1]).exists()]
    stale = []
    for index, (number, name, _) in enumerate(entries):
        path = NOTEBOOKS / name
        notebook = nbformat.read(path, as_version=4)
        changed = _set_tagged_cell(notebook, NAV_TAG, navigation_text(entries, index), append=True)
        if number == "00":
            changed |= _set_tagged_cell(notebook, MAP_TAG, map_text(course_map()), append=False)
        last = notebook.cells[-1]
        if NAV_TAG not in last.get("metadata", {}).get("tags", []):
            raise ValueError(f"{name}: the navigation cell must be the last cell")
        if changed:
            stale.append(name)
            if not check:
                nbformat.write(notebook, path)
    return stale


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = sync(check=check)
    verb = "out of date" if check else "updated"
    for name in stale:
        print(f"{verb}: notebooks/{name}")
    if check and stale:
        print("run: python -m labsupport.maintain.navigation", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
