"""Learner and solution copies (`make student`, python -m labsupport.maintain.student).

The learner copy is the course without its tests and without any solution text: checked statically for
every file and every notebook, and by execution for every notebook (its exercise cells run from the
learner copy's own labsupport and say "not attempted yet", while every way to a solution says it is
switched off). The solution copy holds every reference solution in place of ``____``; the two fastest
(EXECUTED) run in full and pass every check.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import nbformat
import pytest

from labsupport.course.paths import repo_root
from labsupport.exercises import _solution_source, all_exercises
from labsupport.maintain import student

ROOT = repo_root()

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = ["00_start_here.ipynb", "01_graphs_by_hand.ipynb"]  # the fastest two: a few seconds each
SOLUTION_HEADER = "Solution:\n"  # what q.solution() prints first when solutions are shown
PROBE = """
import inspect
import labsupport
import labsupport.exercises.nb{number} as module

print("labsupport from", labsupport.__file__)
print("no solution in the source:", all(exercise._solution is None for exercise in module.EXERCISES), "solution_code=None" in inspect.getsource(module))
for exercise in module.EXERCISES:
    exercise.solution()
    try:
        exercise.solution_code
    except RuntimeError as error:
        print("solution_code:", error)
"""


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
    the lines the committed answer cell shows every learner anyway (such as ``def answer(pixels):``)."""
    index, _, _ = student.answer_block(committed, exercise.number)
    template = {line.strip() for line in committed.cells[index].source.splitlines()}
    solution = {line.strip() for line in _solution_source(exercise).splitlines()} - template
    meaningful = {line for line in solution if line and not line.startswith(("#", "import ", "from "))}
    return sorted(meaningful & {line.strip() for line in _answer_cell(notebook, exercise).splitlines()})


def _unattempted(notebook, exercise) -> bool:
    try:
        student.answer_block(notebook, exercise.number)
    except ValueError:
        return False
    return True


def test_every_notebook_gets_both_copies(copies):
    names = [path.name for path in NOTEBOOKS]
    assert sorted(path.name for path in (copies / "learner" / "notebooks").glob("*.ipynb")) == names
    assert sorted(path.name for path in (copies / "solutions").glob("*.ipynb")) == names


def test_the_learner_copy_is_the_course_without_tests_and_without_solution_text(copies):
    learner = copies / "learner"
    files = sorted(path.relative_to(learner).as_posix() for path in learner.rglob("*") if path.is_file())
    assert files == student.course_files(ROOT), "every course file but the tests and CI"
    assert not (learner / "tests").exists() and (learner / "binder" / "postBuild").is_file() and (learner / "README.md").is_file()
    texts = {name: (learner / name).read_text(encoding="utf-8", errors="replace") for name in files if not name.startswith("data/")}
    for module, exercise in all_exercises():
        solution = _solution_source(exercise)
        assert [name for name, text in texts.items() if student.reveals(text, solution)] == [], f"{module} q{exercise.number}"
    # the same check finds each solution where it is, in the teacher's key: it can fail
    keys = {path.name[:2]: "\n".join(cell.source for cell in _read(path).cells) for path in (copies / "solutions").glob("*.ipynb")}
    assert all(student.reveals(keys[module[2:]], _solution_source(exercise)) for module, exercise in all_exercises())


def test_no_hint_prints_its_answer():
    for module, exercise in all_exercises():
        assert not student.reveals(exercise._hint, _solution_source(exercise)), f"{module} q{exercise.number}: the hint is the solution"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name[:2])
def test_learner_copy_changes_nothing_but_the_switch(copies, path):
    original, learner = _read(path), _read(copies / "learner" / "notebooks" / path.name)
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
    learner, solved = _read(copies / "learner" / "notebooks" / path.name), _read(copies / "solutions" / path.name)
    assert SOLUTION_HEADER not in json.dumps(nbformat.writes(learner)), "a committed output shows a solution"
    for exercise in student.exercises_of(path):
        assert _unattempted(learner, exercise), f"q{exercise.number}: the learner's answer is not ____ any more"
        assert _revealed(learner, exercise, committed) == [], f"q{exercise.number}: the learner copy shows solution lines"
        # the same checks see the solutions where they are: they can fail
        assert not _unattempted(solved, exercise)
        assert _solution_source(exercise) in _answer_cell(solved, exercise)
        assert _revealed(solved, exercise, committed), f"q{exercise.number}: no solution line found in the solution copy"
    assert solved.metadata["onnx_lab"] == {"copy": "solutions"}


def test_learner_notebooks_without_outputs(tmp_path):
    path = ROOT / "notebooks" / EXECUTED[0]
    assert student.main(["--out", str(tmp_path), "--without-outputs", str(path)]) == 0
    learner = _read(tmp_path / "learner" / "notebooks" / path.name)
    code = [cell for cell in learner.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert any(cell.outputs for cell in _read(path).cells if cell.cell_type == "code")


def test_the_tool_says_which_notebook_lacks_an_answer_cell(tmp_path):
    notebook = _read(ROOT / "notebooks" / EXECUTED[0])
    for cell in notebook.cells:
        cell.source = cell.source.replace("answer = ____", "answer = 3")
    path = tmp_path / EXECUTED[0]
    nbformat.write(notebook, path)
    with pytest.raises(ValueError, match=r"00_start_here.ipynb: no answer with ____ above q2.check\(answer\)"):
        student.write_copies([path], tmp_path / "out")


def _execute(notebook, folder: Path, env: dict[str, str] | None = None):
    """Run a notebook in a fresh kernel of this environment, from ``folder``."""
    from nbclient import NotebookClient

    client = NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    client.execute(**({"env": env} if env else {}))
    return notebook


def _printed(cell) -> str:
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")


def _exercise_cells(notebook, exercises) -> list[int]:
    """The cells a learner's exercise work needs: those that import the exercises, each answer and each check."""
    imports = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and any(student.EXERCISE_IMPORT.match(line) for line in cell.source.splitlines())
    ]
    work = [
        cell
        for exercise in exercises
        for cell in (student.answer_block(notebook, exercise.number)[0], student.check_cell(notebook, exercise.number))
    ]
    return sorted({*imports, *work})


@pytest.fixture(scope="module")
def learner_artifacts(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("learner-artifacts")  # shared: the models a setup cell makes are made once


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name[:2])
def test_the_learner_copy_runs_its_checks_from_its_own_labsupport(copies, learner_artifacts, path):
    learner_root = copies / "learner"
    notebook = _read(learner_root / "notebooks" / path.name)
    exercises = student.exercises_of(path)
    kept = _exercise_cells(notebook, exercises)
    checks = {student.check_cell(notebook, exercise.number): exercise.number for exercise in exercises}
    notebook.cells = [notebook.cells[index] for index in kept] + [nbformat.v4.new_code_cell(PROBE.format(number=path.name[:2]))]
    env = {**os.environ, "PYTHONPATH": str(learner_root), "ONNX_LAB_ARTIFACTS": str(learner_artifacts)}
    env.pop("ONNX_LAB_SOLUTIONS", None)
    _execute(notebook, learner_root / "notebooks", env)
    for position, index in enumerate(kept):
        if index in checks:
            printed = _printed(notebook.cells[position])
            assert "Not attempted yet" in printed and ".solution()" not in printed, f"q{checks[index]}: {printed}"
    probe = _printed(notebook.cells[-1])
    assert f"labsupport from {learner_root / 'labsupport' / '__init__.py'}" in probe
    assert "no solution in the source: True True" in probe
    assert probe.count("Solutions are switched off") == probe.count("solution_code: solutions are switched off") == len(exercises)
    assert SOLUTION_HEADER not in probe


@pytest.mark.slow
@pytest.mark.parametrize("name", EXECUTED, ids=lambda name: name[:2])
def test_every_check_of_the_solution_copy_passes(copies, name):
    exercises = student.exercises_of(ROOT / "notebooks" / name)
    solved = _execute(_read(copies / "solutions" / name), ROOT / "notebooks")
    for exercise in exercises:
        assert "✅ Correct" in _printed(solved.cells[student.check_cell(solved, exercise.number)]), f"q{exercise.number}"
