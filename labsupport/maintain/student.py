"""Learner and solution copies of the course for a class (`make student`).

    python -m labsupport.maintain.student [--out build/classroom] [--without-outputs] [notebooks/NN_name.ipynb ...]

``learner/`` is a copy of the course for learners: every file git tracks except the tests and CI
(which run the solutions), with two changes. Its notebooks call ``hide_solutions()`` before they import
their exercises, and its exercise modules ``labsupport/exercises/nbNN.py`` pass ``solution_code=None``:
no solution text is in it, so none is reachable from it (not ``qN.solution()``, not ``qN.solution_code``,
not the modules' source). Hand it out: publish it as the repository learners clone, pull into a hub,
or build a Binder or Zero to JupyterHub image from it (it keeps ``binder/``). ``make hub`` gives each
learner a copy of it. ``--without-outputs`` also clears the notebooks' outputs.
``solutions/NN_name.ipynb`` is the teacher's key: each answer's ``____`` is replaced by the reference
solution, and the outputs of the answer and check cells are cleared; run it and every check prints
"Correct". tests/integration/test_student.py checks both.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from labsupport.course.paths import repo_root
from labsupport.exercises import Exercise, _solution_source

ROOT = repo_root()
DEFAULT_OUT = ROOT / "build" / "classroom"
SWITCH = [
    "from labsupport.exercises import hide_solutions",
    "hide_solutions()  # learner copy (make student): qN.solution() shows no solution",
]
EXERCISE_IMPORT = re.compile(r"^(from\s+labsupport\.exercises(\.\w+)?\s+import\b|import\s+labsupport\.exercises\b)")
ANSWER_START = re.compile(r"^(async\s+def\s+answer\b|def\s+answer\b|answer\s*=)")
CHECK = re.compile(r"\bq(\d+)\.check\(answer\)")
# left out of the learner copy: the tests and CI run the reference solutions
NOT_FOR_LEARNERS = ("tests/", ".ci/", ".github/")
EXERCISE_MODULE = re.compile(r"^labsupport/exercises/nb\d\d\.py$")


def exercises_of(path: Path) -> list[Exercise]:
    """The exercises of notebook ``NN_name.ipynb`` (``labsupport.exercises.nbNN.EXERCISES``)."""
    name = f"labsupport.exercises.nb{path.name[:2]}"
    try:
        return importlib.import_module(name).EXERCISES
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        raise ValueError(f"no exercises module {name}") from None


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", text).replace("'", '"')


def solution_lines(code: str) -> set[str]:
    """The lines of a solution that carry it, compacted (no spaces, one kind of quote).

    Left out: imports, comments, lines of brackets alone and ``answer = name`` (naming what the lines above defined).
    """
    lines = {_compact(line.split("  #")[0]) for line in code.splitlines()}
    return {
        line
        for line in lines
        if re.search(r"\w", line) and not line.startswith(("#", "import", "from")) and not re.fullmatch(r"answer=\w+", line)
    }


def reveals(text: str, code: str) -> bool:
    """True when ``text`` (a module, a hint, a cell) holds every line that carries solution ``code``."""
    lines, compact = solution_lines(code), _compact(text)
    return bool(lines) and all(line in compact for line in lines)


def _code_cells(notebook: NotebookNode) -> list[int]:
    return [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]


def _replace_lines(cell: NotebookNode, start: int, end: int, new: list[str]) -> None:
    """Replace lines ``start`` up to, not including, ``end`` of the cell's source (its final newline kept)."""
    lines = cell.source.splitlines()
    cell.source = "\n".join([*lines[:start], *new, *lines[end:]]) + ("\n" if cell.source.endswith("\n") else "")


def learner_copy(notebook: NotebookNode, *, without_outputs: bool = False) -> NotebookNode:
    """A copy whose first exercise import is preceded by the switch that hides the solutions."""
    learner = copy.deepcopy(notebook)
    if without_outputs:
        for index in _code_cells(learner):
            learner.cells[index].outputs, learner.cells[index].execution_count = [], None
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
        code = [f"# reference solution (what q{exercise.number}.solution() prints)", *_solution_source(exercise).splitlines()]
        _replace_lines(solved.cells[index], start, end + 1, code)
        for cell in (solved.cells[index], solved.cells[check_cell(solved, exercise.number)]):
            cell.outputs, cell.execution_count = [], None
    solved.metadata["onnx_lab"] = {"copy": "solutions"}
    return solved


def _solution_arguments(tree: ast.Module) -> list[ast.expr]:
    """The ``solution_code`` argument of every ``Exercise(...)`` call in a module (keyword or fifth positional)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Exercise":
            found += [keyword.value for keyword in node.keywords if keyword.arg == "solution_code"] + node.args[4:5]
    return found


def without_solutions(source: str, exercises: list[Exercise]) -> str:
    """An exercise module's source with ``solution_code=None`` in every ``Exercise(...)``; refuses to leave any solution line in it."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line.encode("utf-8")))
    data = source.encode("utf-8")
    arguments = sorted(_solution_arguments(ast.parse(source)), key=lambda node: (node.lineno, node.col_offset), reverse=True)
    for node in arguments:  # from the end, so that earlier offsets stay valid
        begin = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset
        data = data[:begin] + b"None" + data[end:]
    stripped = data.decode("utf-8")
    for exercise in exercises:
        if reveals(stripped, _solution_source(exercise)):
            raise ValueError(
                f"q{exercise.number}: its solution is also written outside Exercise(solution_code=...) and would reach learners"
            )
    return stripped


def course_files(root: Path) -> list[str]:
    """The files of the course that learners get: what git tracks (and new files it does not ignore), tests and CI left out."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise ValueError(f"make student copies the files git tracks, and {root} is not a git checkout ({error})") from None
    names = sorted({name for name in listed.split("\0") if name})
    return [name for name in names if not name.startswith(NOT_FOR_LEARNERS) and (root / name).is_file()]


def _exercise_module(name: str) -> list[Exercise]:
    return importlib.import_module(name.removesuffix(".py").replace("/", ".")).EXERCISES


def write_learner_course(paths: list[Path], out: Path, *, without_outputs: bool = False) -> list[Path]:
    """Write the learner copy of the course into ``out`` (replaced): returns the learner notebooks written."""
    if out.exists():
        shutil.rmtree(out)
    for name in course_files(ROOT):
        if name.startswith("notebooks/") and name.endswith(".ipynb"):
            continue
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if EXERCISE_MODULE.match(name):
            try:
                text = without_solutions((ROOT / name).read_text(encoding="utf-8"), _exercise_module(name))
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
            target.write_text(text, encoding="utf-8")
        else:
            shutil.copy2(ROOT / name, target)
    written = []
    for path in paths:
        target = out / "notebooks" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            nbformat.write(learner_copy(nbformat.read(path, as_version=4), without_outputs=without_outputs), target)
        except ValueError as error:
            raise ValueError(f"{path.name}: {error}") from None
        written.append(target)
    return written


def write_copies(paths: list[Path], out: Path, *, without_outputs: bool = False) -> dict[str, list[Path]]:
    """Write the learner course ``out/learner/`` and the teacher's key ``out/solutions/*.ipynb`` for ``paths``."""
    solutions = []
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        try:
            solved = solution_copy(notebook, exercises_of(path))
        except ValueError as error:
            raise ValueError(f"{path.name}: {error}") from None
        target = out / "solutions" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(solved, target)
        solutions.append(target)
    learner = write_learner_course(paths, out / "learner", without_outputs=without_outputs)
    return {"learner": learner, "solutions": solutions}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for learner/ and solutions/ (default build/classroom)")
    parser.add_argument("--without-outputs", action="store_true", help="clear every output of the learner notebooks")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook under notebooks/")
    options = parser.parse_args(argv)
    paths = options.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    try:
        written = write_copies(paths, options.out, without_outputs=options.without_outputs)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"learner: the course with {len(written['learner'])} notebooks and no solutions in {options.out / 'learner'}")
    print(f"solutions: {len(written['solutions'])} notebooks in {options.out / 'solutions'} (the teacher's key)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
