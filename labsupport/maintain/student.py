"""Learner and solution copies of the course notebooks for a class (`make student`).

    python -m labsupport.maintain.student [--out build/classroom] [notebooks/NN_name.ipynb ...]

``learner/NN_name.ipynb`` is the committed notebook (exercises unattempted, outputs kept) with one
change: two lines before its first exercise import switch ``qN.solution()`` off
(``labsupport.exercises.hide_solutions``). Hand these out.
``solutions/NN_name.ipynb`` is the teacher's key: each answer's ``____`` is replaced by the reference
solution (what ``qN.solution()`` prints), and the outputs of the answer and check cells are cleared;
run it and every check prints "Correct". tests/integration/test_student.py checks both.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import re
import sys
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from labsupport.course.paths import repo_root
from labsupport.exercises import Exercise

ROOT = repo_root()
DEFAULT_OUT = ROOT / "build" / "classroom"
SWITCH = [
    "from labsupport.exercises import hide_solutions",
    "hide_solutions()  # learner copy (make student): qN.solution() shows no solution",
]
EXERCISE_IMPORT = re.compile(r"^(from\s+labsupport\.exercises(\.\w+)?\s+import\b|import\s+labsupport\.exercises\b)")
ANSWER_START = re.compile(r"^(async\s+def\s+answer\b|def\s+answer\b|answer\s*=)")
CHECK = re.compile(r"\bq(\d+)\.check\(answer\)")


def exercises_of(path: Path) -> list[Exercise]:
    """The exercises of notebook ``NN_name.ipynb`` (``labsupport.exercises.nbNN.EXERCISES``)."""
    name = f"labsupport.exercises.nb{path.name[:2]}"
    try:
        return importlib.import_module(name).EXERCISES
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        raise ValueError(f"no exercises module {name}") from None


def _code_cells(notebook: NotebookNode) -> list[int]:
    return [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]


def _replace_lines(cell: NotebookNode, start: int, end: int, new: list[str]) -> None:
    """Replace lines ``start`` up to, not including, ``end`` of the cell's source (its final newline kept)."""
    lines = cell.source.splitlines()
    cell.source = "\n".join([*lines[:start], *new, *lines[end:]]) + ("\n" if cell.source.endswith("\n") else "")


def learner_copy(notebook: NotebookNode) -> NotebookNode:
    """A copy whose first exercise import is preceded by the switch that hides the solutions."""
    learner = copy.deepcopy(notebook)
    for index in _code_cells(learner):
        lines = learner.cells[index].source.splitlines()
        first = next((number for number, line in enumerate(lines) if EXERCISE_IMPORT.match(line)), None)
        if first is not None:
            _replace_lines(learner.cells[index], first, first, SWITCH)
            learner.metadata["onnx_lab"] = {"copy": "learner"}
            return learner
    raise ValueError("no cell imports labsupport.exercises: nothing to switch off")


def check_cell(notebook: NotebookNode, number: int) -> int:
    """Index of the cell that runs ``qN.check(answer)`` for exercise ``number``."""
    for index in _code_cells(notebook):
        if str(number) in CHECK.findall(notebook.cells[index].source):
            return index
    raise ValueError(f"no cell runs q{number}.check(answer)")


def answer_block(notebook: NotebookNode, number: int) -> tuple[int, int, int]:
    """``(cell index, first line, last line)`` of exercise ``number``'s answer: from ``answer = ``/``def answer`` to ``____``.

    It is in the check cell or in the closest code cell above it that holds one.
    """
    check = check_cell(notebook, number)
    for index in reversed([index for index in _code_cells(notebook) if index <= check]):
        lines = notebook.cells[index].source.splitlines()
        for start in (line for line, text in enumerate(lines) if ANSWER_START.match(text)):
            end = next((line for line in range(start, len(lines)) if "____" in lines[line]), None)
            if end is not None:
                return index, start, end
        if index != check and CHECK.search(notebook.cells[index].source):
            break  # the previous exercise's check: this one's answer is missing
    raise ValueError(f"no answer with ____ above q{number}.check(answer)")


def solution_copy(notebook: NotebookNode, exercises: list[Exercise]) -> NotebookNode:
    """A copy whose answer blocks hold the reference solutions; the stale outputs of answer and check cells are cleared."""
    solved = copy.deepcopy(notebook)
    for exercise in exercises:
        index, start, end = answer_block(solved, exercise.number)
        code = [f"# reference solution (what q{exercise.number}.solution() prints)", *exercise.solution_code.splitlines()]
        _replace_lines(solved.cells[index], start, end + 1, code)
        for cell in (solved.cells[index], solved.cells[check_cell(solved, exercise.number)]):
            cell.outputs, cell.execution_count = [], None
    solved.metadata["onnx_lab"] = {"copy": "solutions"}
    return solved


def write_copies(paths: list[Path], out: Path) -> dict[str, list[Path]]:
    """Write ``out/learner/*.ipynb`` and ``out/solutions/*.ipynb`` for ``paths``; returns what was written."""
    written: dict[str, list[Path]] = {"learner": [], "solutions": []}
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        try:
            versions = {"learner": learner_copy(notebook), "solutions": solution_copy(notebook, exercises_of(path))}
        except ValueError as error:
            raise ValueError(f"{path.name}: {error}") from None
        for kind, version in versions.items():
            target = out / kind / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(version, target)
            written[kind].append(target)
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for learner/ and solutions/ (default build/classroom)")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook under notebooks/")
    options = parser.parse_args(argv)
    paths = options.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    try:
        written = write_copies(paths, options.out)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for kind, files in written.items():
        print(f"{kind}: {len(files)} notebooks in {options.out / kind}")
    print("Hand out learner/ (qN.solution() is switched off there); solutions/ is the teacher's key.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
