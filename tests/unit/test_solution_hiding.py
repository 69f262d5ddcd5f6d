"""Solutions out of sight (hide_solutions, $ONNX_LAB_SOLUTIONS) and out of reach (the learner copy's solution_code=None)."""

from __future__ import annotations

import ast

import pytest

import labsupport.exercises as exercises
from labsupport.exercises import Exercise, Incorrect, ____, _solution_source
from labsupport.maintain import student

SOLUTION = """
    def answer(x):
        return 2 * x  # double it
"""


def _doubles(function):
    if function(3) != 6:
        raise Incorrect("3 must give 6")


def _exercise(solution_code: str | None = SOLUTION) -> Exercise:
    return Exercise(1, "double", _doubles, hint="multiply by two", solution_code=solution_code)


@pytest.fixture
def shown(monkeypatch):
    monkeypatch.setattr(exercises, "_hidden_in_this_kernel", False)
    monkeypatch.delenv(exercises.SOLUTIONS_VARIABLE, raising=False)


def _stuck_line(exercise: Exercise, capsys) -> str:
    exercise.check(____)
    return capsys.readouterr().out.splitlines()[-1]


def test_a_shown_solution_prints_runs_and_is_offered(shown, capsys):
    exercise = _exercise()
    assert exercise.solution_code.startswith("def answer(x):")
    assert exercise.reference_answer()(3) == 6
    exercise.solution()
    assert capsys.readouterr().out.startswith("Solution:\ndef answer(x):")
    assert "q1.solution() the answer" in _stuck_line(exercise, capsys)


@pytest.mark.parametrize("how", ["hide_solutions", "environment", "learner copy"])
def test_hidden_solutions_show_nothing_anywhere(shown, monkeypatch, capsys, how):
    exercise = _exercise(None if how == "learner copy" else SOLUTION)
    if how == "hide_solutions":
        exercises.hide_solutions()
    elif how == "environment":
        monkeypatch.setenv(exercises.SOLUTIONS_VARIABLE, " Hidden ")
    with pytest.raises(RuntimeError, match="switched off"):
        exercise.solution_code  # noqa: B018 (a property: reading it is the test)
    with pytest.raises(RuntimeError, match="switched off"):
        exercise.reference_answer()
    exercise.solution()
    printed = capsys.readouterr().out
    assert "Solutions are switched off" in printed and "2 * x" not in printed
    stuck = _stuck_line(exercise, capsys)
    assert "hint()" in stuck and "solution()" not in stuck
    assert exercise.evaluate(lambda x: 2 * x).status == "correct", "checkers work as before"


def test_the_teachers_tool_reads_a_solution_the_switch_hides_but_not_one_a_learner_copy_lacks(shown):
    exercises.hide_solutions()
    assert _solution_source(_exercise()).startswith("def answer(x):")
    with pytest.raises(ValueError, match="holds no solution"):
        _solution_source(_exercise(None))


MODULE = '''
from labsupport.exercises import Exercise
import labsupport.exercises as api

q1 = Exercise(1, "a", print, hint="h", solution_code="""
    answer = 40 + 2
""")
q2 = api.Exercise(2, "ü", print, "h", """answer = sorted(range(7), reverse=True)""")
EXERCISES = [q1, q2]
'''


def test_the_learner_module_keeps_everything_but_the_solutions():
    solved = [Exercise(1, "a", print, "h", "answer = 40 + 2"), Exercise(2, "b", print, "h", "answer = sorted(range(7), reverse=True)")]
    stripped = student.without_solutions(MODULE, solved)
    assert "40 + 2" not in stripped and "sorted(range" not in stripped
    assert stripped.count("solution_code=None") == 1 and 'api.Exercise(2, "ü", print, "h", None)' in stripped
    assert stripped.replace("solution_code=None", "").replace(", None)", ")").count("Exercise(") == 2
    ast.parse(stripped)  # still Python


def test_a_solution_written_outside_the_call_stops_the_learner_copy():
    leaky = MODULE + '\n_SPARE = "answer = sorted(range(7), reverse=True)"\n'
    solved = [Exercise(2, "b", print, "h", "answer = sorted(range(7), reverse=True)")]
    with pytest.raises(ValueError, match="q2: its solution is also written outside"):
        student.without_solutions(leaky, solved)


def test_reveals_needs_every_line_that_carries_the_solution():
    code = "import numpy as np\n\ndef answer(p):\n    return (\n        np.asarray(p) / 16\n    )\n"
    assert student.solution_lines(code) == {"defanswer(p):", "return(", "np.asarray(p)/16"}
    assert student.reveals("def answer(p): return (np.asarray(p) / 16)", code)
    assert student.reveals("Write 'def answer(p):', then `return (` and np.asarray(p)/16 on its own line", code)
    assert not student.reveals("Divide np.asarray(p) / 16 and return it", code), "one line of three is a hint, not the answer"
    assert not student.reveals("anything", "import numpy\n# nothing but imports\nanswer = numpy\n")
