"""The exercise API (labsupport.exercises): outcomes and who is blamed for an exception.

The checkers' helpers (labsupport.exercises.checks) are tested in test_exercises_checks.py; every real checker runs in
tests/integration/test_all_exercises.py.
"""

from __future__ import annotations

import asyncio
import inspect

import numpy as np
import pytest

from labsupport.exercises import (
    CHECKER_ERROR,
    CORRECT,
    INCORRECT,
    NOT_ATTEMPTED,
    Exercise,
    Incorrect,
    ____,
)


def _positive(answer):
    if answer <= 0:
        raise Incorrect(f"expected a positive number, got {answer}")
    return "positive"


EXAMPLE = Exercise(9, "positive", _positive, hint="bigger than zero", solution_code="answer = 1")


def _calls_with_two(function):
    if not callable(function):
        raise Incorrect(f"expected a function, got {type(function).__name__}")
    return f"returned {function(2)}"


CALLS = Exercise(1, "a function of 2", _calls_with_two, hint="", solution_code="answer = abs")


def test_three_outcomes(capsys):
    assert EXAMPLE.evaluate(____).status == NOT_ATTEMPTED
    assert EXAMPLE.evaluate(-1).status == INCORRECT and "got -1" in EXAMPLE.evaluate(-1).message
    assert EXAMPLE.evaluate(2).status == CORRECT and bool(EXAMPLE.evaluate(2))
    EXAMPLE.check(-1)
    printed = capsys.readouterr().out
    assert "❌ Incorrect: expected a positive number, got -1" in printed and "q9.hint()" in printed


def test_placeholder_inside_code_or_containers_means_not_attempted():
    assert EXAMPLE.evaluate([1, ____]).status == NOT_ATTEMPTED
    assert EXAMPLE.evaluate({"x": ____}).status == NOT_ATTEMPTED
    assert CALLS.evaluate(lambda x: x * ____).status == NOT_ATTEMPTED
    assert CALLS.evaluate(lambda x: ____).status == NOT_ATTEMPTED
    with pytest.raises(Exception, match="____"):
        np.asarray(____) + 1


def test_async_answers_stay_coroutine_functions():
    def check(function):
        if not inspect.iscoroutinefunction(function):
            raise Incorrect("expected an async function")
        return f"returned {asyncio.run(function())}"

    exercise = Exercise(1, "async", check, hint="", solution_code="answer = 0")

    async def right():
        return 2

    async def unfinished():
        return ____

    async def crashes():
        raise ValueError("oops")

    assert exercise.evaluate(right).message == "returned 2"
    assert exercise.evaluate(unfinished).status == NOT_ATTEMPTED
    assert exercise.evaluate(crashes).status == INCORRECT


def test_an_exception_in_the_learners_function_is_incorrect_and_says_so():
    def answer(x):
        return x / 0

    outcome = CALLS.evaluate(answer)
    assert outcome.status == INCORRECT
    assert outcome.message.startswith("your code raised ZeroDivisionError: division by zero (in answer, line ")


def test_an_exception_in_a_helper_the_learner_wrote_or_in_a_method_is_the_learners():
    def helper(x):
        raise KeyError(x)

    assert "your code raised KeyError" in CALLS.evaluate(lambda x: helper(x)).message

    class Model:
        def predict(self, x):
            raise RuntimeError("not fitted")

    exercise = Exercise(1, "predict", lambda model: model().predict(2), hint="", solution_code="answer = 0")
    outcome = exercise.evaluate(Model)
    assert outcome.status == INCORRECT and "your code raised RuntimeError: not fitted (in predict" in outcome.message


def test_an_error_a_library_raises_because_of_the_learners_code_is_the_learners():
    def runtime(function):  # like ONNX Runtime calling a custom op: it re-raises what the learner's code raised
        try:
            return function(2)
        except Exception as error:
            raise RuntimeError("the runtime failed") from error

    exercise = Exercise(1, "runs", runtime, hint="", solution_code="answer = abs")

    def answer(x):
        return int("two")

    outcome = exercise.evaluate(answer)
    assert outcome.status == INCORRECT and outcome.message.startswith("your code raised RuntimeError: the runtime failed (in answer")


def test_a_bug_in_the_checker_is_a_checker_error_never_incorrect(capsys):
    def buggy_checker(answer):
        settings = {"tolerance": 1e-5}
        return f"{answer} within {settings['tolerence']}"  # the course's typo, not the learner's mistake

    exercise = Exercise(4, "buggy", buggy_checker, hint="", solution_code="answer = 1")
    for answer in (1, "anything", lambda x: x):
        outcome = exercise.evaluate(answer)
        assert outcome.status == CHECKER_ERROR, outcome
        assert outcome.message == ("this is a bug in the course's checker, not your answer; please report it (KeyError: 'tolerence')")
        assert "buggy_checker" in outcome.details and "Traceback" in outcome.details
        assert not outcome
    exercise.check(1)
    printed = capsys.readouterr().out
    assert "⚠️ Checker error: this is a bug in the course's checker" in printed and "Stuck?" not in printed


def test_a_checker_that_forgets_to_validate_the_answer_is_a_checker_error():
    unguarded = Exercise(1, "f", lambda function: function(2), hint="", solution_code="answer = abs")
    outcome = unguarded.evaluate(3)  # the learner's code never ran: the checker should have said "expected a function"
    assert outcome.status == CHECKER_ERROR and "TypeError: 'int' object is not callable" in outcome.message
    assert CALLS.evaluate(3).status == INCORRECT  # the checker that validates says what was expected


def test_hint_solution_and_reference(capsys):
    EXAMPLE.hint()
    EXAMPLE.solution()
    assert capsys.readouterr().out == "Hint: bigger than zero\nSolution:\nanswer = 1\n"
    assert EXAMPLE.reference_answer() == 1
    broken = Exercise(1, "x", _positive, hint="", solution_code="result = 1")
    with pytest.raises(RuntimeError, match="does not assign `answer`"):
        broken.reference_answer()


def test_functions_of_a_reference_solution_have_a_source():
    # TensorFlow's AutoGraph reads a tf.function's source; without it, it warns (nb03 q2's reference answer did)
    exercise = Exercise(7, "source", _positive, hint="", solution_code="def twice(x):\n    return 2 * x\n\nanswer = twice")
    assert inspect.getsource(exercise.reference_answer()) == "def twice(x):\n    return 2 * x\n"
