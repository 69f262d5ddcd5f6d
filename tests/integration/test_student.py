"""Learner and solution copies (`make student`, python -m labsupport.maintain.student).

Every notebook is copied and checked statically: the learner copy differs from the committed notebook
only by the switch that hides the solutions and holds no solution text; the solution copy holds every
reference solution in place of ``____``. Executing copies takes a kernel each, so only a fast subset
(EXECUTED) runs in both versions, with every check cell's verdict read from the outputs.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import nbformat
import pytest

from labsupport.course.paths import repo_root
from labsupport.maintain import student

ROOT = repo_root()

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = ["00_start_here.ipynb", "01_graphs_by_hand.ipynb"]  # the fastest two: a few seconds each
SOLUTION_HEADER = "Solution:\n"  # what q.solution() prints first when solutions are shown


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("classroom")
    assert student.main(["--out", str(out)]) == 0
    return out


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def _marker(exercise) -> str:
    return f"# reference solution (what q{exercise.number}.solution() prints)"


def _answer_cell(notebook, exercise) -> str:
    """The source of the cell that holds the exercise's answer, in a learner or a solution copy."""
    solved = [cell.source for cell in notebook.cells if _marker(exercise) in cell.source]
    return solved[0] if solved else notebook.cells[student.answer_block(notebook, exercise.number)[0]].source


def _revealed(notebook, exercise, committed) -> list[str]:
    """Lines of the exercise's reference solution in its answer cell, other than imports, comments and
    the committed answer's own lines (such as ``def answer(pixels):``)."""
    index, start, end = student.answer_block(committed, exercise.number)
    template = {line.strip() for line in committed.cells[index].source.splitlines()[start : end + 1]}
    solution = {line.strip() for line in exercise.solution_code.splitlines()} - template
    meaningful = {line for line in solution if line and not line.startswith(("#", "import ", "from "))}
    return sorted(meaningful & {line.strip() for line in _answer_cell(notebook, exercise).splitlines()})


def _unattempted(notebook, exercise) -> bool:
    try:
        student.answer_block(notebook, exercise.number)
    except ValueError:
        return False
    return True


def test_every_notebook_gets_both_copies(copies):
    for kind in ("learner", "solutions"):
        assert sorted(path.name for path in (copies / kind).glob("*.ipynb")) == [path.name for path in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name[:2])
def test_learner_copy_changes_nothing_but_the_switch(copies, path):
    original, learner = _read(path), _read(copies / "learner" / path.name)
    assert learner.metadata.pop("onnx_lab") == {"copy": "learner"}
    assert learner.metadata == original.metadata and len(learner.cells) == len(original.cells)
    changed = [index for index, (a, b) in enumerate(zip(original.cells, learner.cells, strict=True)) if a != b]
    assert len(changed) == 1, "exactly one cell gets the switch"
    before, after = original.cells[changed[0]], copy.deepcopy(learner.cells[changed[0]])
    lines = after.source.splitlines()
    at = lines.index(student.SWITCH[0])
    assert lines[at : at + len(student.SWITCH)] == student.SWITCH
    after.source = "\n".join(lines[:at] + lines[at + len(student.SWITCH) :])
    assert after == before
    assert student.EXERCISE_IMPORT.match(lines[at + len(student.SWITCH)]), "the switch comes before the exercises are imported"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name[:2])
def test_learner_copy_holds_no_solution_and_the_solution_copy_every_one(copies, path):
    committed = _read(path)
    learner, solved = _read(copies / "learner" / path.name), _read(copies / "solutions" / path.name)
    assert SOLUTION_HEADER not in json.dumps(nbformat.writes(learner)), "a committed output shows a solution"
    for exercise in student.exercises_of(path):
        assert _unattempted(learner, exercise), f"q{exercise.number}: the learner's answer is not ____ any more"
        assert _revealed(learner, exercise, committed) == [], f"q{exercise.number}: the learner copy shows solution lines"
        # the same checks see the solutions where they are: they can fail
        assert not _unattempted(solved, exercise)
        assert exercise.solution_code in _answer_cell(solved, exercise)
        assert _revealed(solved, exercise, committed), f"q{exercise.number}: no solution line found in the solution copy"
    assert solved.metadata["onnx_lab"] == {"copy": "solutions"}


def test_the_tool_says_which_notebook_lacks_an_answer_cell(tmp_path):
    notebook = _read(ROOT / "notebooks" / EXECUTED[0])
    for cell in notebook.cells:
        cell.source = cell.source.replace("answer = ____", "answer = 3")
    path = tmp_path / EXECUTED[0]
    nbformat.write(notebook, path)
    with pytest.raises(ValueError, match=r"00_start_here.ipynb: no answer with ____ above q2.check\(answer\)"):
        student.write_copies([path], tmp_path / "out")


def _execute(path: Path, extra_code: str = ""):
    """Run a notebook (plus ``extra_code`` as a last cell) in a fresh kernel of this environment."""
    from nbclient import NotebookClient

    notebook = _read(path)
    if extra_code:
        notebook.cells.append(nbformat.v4.new_code_cell(extra_code))
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    return notebook


def _printed(cell) -> str:
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")


@pytest.mark.slow
@pytest.mark.parametrize("name", EXECUTED, ids=lambda name: name[:2])
def test_both_copies_execute_and_only_the_solution_copy_passes(copies, name):
    exercises = student.exercises_of(ROOT / "notebooks" / name)
    probe = "\n".join(f"q{exercise.number}.solution()" for exercise in exercises)
    learner = _execute(copies / "learner" / name, probe)
    solved = _execute(copies / "solutions" / name)
    for exercise in exercises:
        check = student.check_cell(learner, exercise.number)
        assert "Not attempted yet" in _printed(learner.cells[check])
        assert "✅ Correct" in _printed(solved.cells[student.check_cell(solved, exercise.number)]), f"q{exercise.number}"
    asked = _printed(learner.cells[-1])
    assert asked.count("Solutions are switched off") == len(exercises) and SOLUTION_HEADER not in asked
