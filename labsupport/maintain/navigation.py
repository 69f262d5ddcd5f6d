"""Generate the navigation that every notebook ends with, the course map in notebook 00, and the reading times.

The README's course map (between the course-map markers) is the single source: each notebook's
last cell becomes "previous | course map | next", and notebook 00's cell tagged ``course-map``
gets the same table. Each notebook's ``**Time:**`` line, the map's time column and the fast track
(README and notebook 00) are computed by ``reading_time``'s rule. ``--check`` changes nothing and exits 1
if a notebook or the README is out of date (tests/unit/test_consistency.py runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from labsupport.course.paths import repo_root
from labsupport.maintain.reading_time import TIME_LINE, ReadingTime, reading_time

ROOT = repo_root()
NOTEBOOKS = ROOT / "notebooks"
MAP_START, MAP_END = "<!-- course-map:start -->", "<!-- course-map:end -->"
TRACK_START, TRACK_END = "<!-- fast-track:start -->", "<!-- fast-track:end -->"
NAV_TAG, MAP_TAG = "navigation", "course-map"
ROW = re.compile(r"^\| (\d\d) \| \[([\w.]+)\]\(notebooks/[\w.]+\) \| (.+?) \|(?: [^|]* \|)?$")
RULE_LINK = "../README.md#reading-times-and-the-fast-track"
# shipping one model next week: how the course works, one converter, the runtime, the service
FAST_TRACK_START, FAST_TRACK_CONVERTERS, FAST_TRACK_END = ["00"], ["02", "03", "04"], ["05", "08"]


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


def times() -> dict[str, ReadingTime]:
    """Each notebook's reading time by its number, from the rule in ``reading_time``."""
    return {number: reading_time(NOTEBOOKS / name) for number, name, _ in course_map() if (NOTEBOOKS / name).exists()}


def map_text(entries: list[tuple[str, str, str]], known: dict[str, ReadingTime], prefix: str = "") -> str:
    """The course-map table with the reading times (README: ``prefix="notebooks/"``; notebook 00: none)."""
    rows = [
        f"| {number} | [{name}]({prefix}{name}) | {teaches} | {known[number].first} / {known[number].full} |"
        for number, name, teaches in entries
    ]
    header = ["| # | notebook | teaches | minutes: first reading / everything |", "| --- | --- | --- | --- |"]
    return "\n".join([*header, *rows])


def fast_track_text(entries: list[tuple[str, str, str]], known: dict[str, ReadingTime], prefix: str = "") -> str:
    """The fast track through the course for someone shipping one model next week, with its time."""
    names = {number: name for number, name, _ in entries}
    fixed = sum(known[number].first for number in FAST_TRACK_START + FAST_TRACK_END)
    converters = [known[number].first for number in FAST_TRACK_CONVERTERS]

    def link(number: str) -> str:
        return f"[{number}]({prefix}{names[number]})"

    return (
        f"**Fast track** (one model to ship next week): {link('00')}, then the converter of your framework "
        f"({link('02')} PyTorch, {link('03')} Keras or {link('04')} scikit-learn), then {link('05')} (the runtime) and "
        f"{link('08')} (the service), each as a first reading: the recipe at the top, the sections and the exercises, "
        f"without the Going deeper parts. About {fixed + min(converters)}-{fixed + max(converters)} minutes. "
        f"Add {link('06')} when the model must be smaller or faster, and come back to a Going deeper part when "
        "your model meets the problem it describes."
    )


def time_line(time: ReadingTime) -> str:
    """The ``**Time:**`` line of a notebook's opening cell."""
    return f"**Time:** {time} ([how this is counted]({RULE_LINK}))."


def readme_text(text: str, entries: list[tuple[str, str, str]], known: dict[str, ReadingTime]) -> str:
    """The README's text with its course map and fast track regenerated."""
    text = _between(text, MAP_START, MAP_END, map_text(entries, known, prefix="notebooks/"))
    return _between(text, TRACK_START, TRACK_END, fast_track_text(entries, known, prefix="notebooks/"))


def _between(text: str, start: str, end: str, block: str) -> str:
    if start not in text or end not in text:
        raise ValueError(f"README.md lacks the {start} ... {end} markers")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{block}\n{end}{rest.split(end, 1)[1]}"


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


def _set_time_line(notebook, time: ReadingTime, name: str) -> bool:
    opening = notebook.cells[0]
    if not TIME_LINE.search(opening.source):
        raise ValueError(f"{name}: the opening cell has no '**Time:**' line")
    text = TIME_LINE.sub(lambda _: time_line(time), opening.source, count=1)
    changed = text != opening.source
    opening.source = text
    return changed


def _sync_readme(entries: list[tuple[str, str, str]], known: dict[str, ReadingTime], check: bool) -> bool:
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    new = readme_text(text, entries, known)
    if new != text and not check:
        readme.write_text(new, encoding="utf-8")
    return new != text


def sync(check: bool = False) -> list[str]:
    """Update (or, with check=True, only compare) every notebook and the README; returns the names out of date."""
    entries = [entry for entry in course_map() if (NOTEBOOKS / entry[1]).exists()]
    known = times()
    stale = ["../README.md"] if _sync_readme(entries, known, check) else []
    for index, (number, name, _) in enumerate(entries):
        path = NOTEBOOKS / name
        notebook = nbformat.read(path, as_version=4)
        changed = _set_tagged_cell(notebook, NAV_TAG, navigation_text(entries, index), append=True)
        changed |= _set_time_line(notebook, known[number], name)
        if number == "00":
            overview = f"{map_text(entries, known)}\n\n{fast_track_text(entries, known)}"
            changed |= _set_tagged_cell(notebook, MAP_TAG, overview, append=False)
        last = notebook.cells[-1]
        if NAV_TAG not in last.get("metadata", {}).get("tags", []):
            raise ValueError(f"{name}: the navigation cell must be the last cell")
        if changed:
            stale.append(name)
            if not check:
                nbformat.write(notebook, path)
    return stale


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook or the README is out of date")
    check = parser.parse_args(argv).check
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
