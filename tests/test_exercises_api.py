import numpy as np
import pytest

from labsupport.exercises import ____, CORRECT, INCORRECT, NOT_ATTEMPTED, Exercise, Incorrect, all_exercises
from labsupport.exercises import nb00


def _positive(answer):
    if answer <= 0:
        raise Incorrect(f"expected a positive number, got {answer}")
    return "positive"


EXAMPLE = Exercise(9, "positive", _positive, hint="bigger than zero", solution_code="answer = 1")


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
    uses_placeholder = Exercise(1, "f", lambda f: f(2), hint="", solution_code="answer = 0")
    assert uses_placeholder.evaluate(lambda x: x * ____).status == NOT_ATTEMPTED
    with pytest.raises(Exception):
        np.asarray(____) + 1


def test_async_answers_stay_coroutine_functions():
    import asyncio
    import inspect

    def check(function):
        if not inspect.iscoroutinefunction(function):
            raise Incorrect("expected an async function")
        return f"returned {asyncio.run(function())}"

    exercise = Exercise(1, "async", check, hint="", solution_code="answer = 0")

    async def right():
        return 2

    async def unfinished():
        return ____

    assert exercise.evaluate(right).message == "returned 2"
    assert exercise.evaluate(unfinished).status == NOT_ATTEMPTED


def test_crashing_answer_is_incorrect_not_an_error():
    needs_callable = Exercise(1, "f", lambda f: f(2), hint="", solution_code="answer = 0")
    outcome = needs_callable.evaluate(3)
    assert outcome.status == INCORRECT and "TypeError" in outcome.message


def test_hint_solution_and_reference(capsys):
    EXAMPLE.hint()
    EXAMPLE.solution()
    assert capsys.readouterr().out == "Hint: bigger than zero\nSolution:\nanswer = 1\n"
    assert EXAMPLE.reference_answer() == 1
    broken = Exercise(1, "x", _positive, hint="", solution_code="result = 1")
    with pytest.raises(RuntimeError, match="does not assign `answer`"):
        broken.reference_answer()


@pytest.mark.parametrize(("module", "exercise"), list(all_exercises()), ids=lambda value: str(value))
def test_every_reference_solution_passes_its_checker(module, exercise):
    outcome = exercise.evaluate(exercise.reference_answer())
    assert outcome.status == CORRECT, f"{module} {exercise}: {outcome.message}"
    assert exercise.evaluate(____).status == NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong",
    [
        lambda pixels: np.asarray(pixels) / 255,
        lambda pixels: np.asarray(pixels, dtype=np.float64) / 16,
        lambda pixels: np.asarray(pixels, dtype=np.float32).ravel() / 16,
        "not a function",
    ],
)
def test_nb00_q1_rejects_wrong_scalers(wrong):
    assert nb00.q1.evaluate(wrong).status == INCORRECT


@pytest.mark.parametrize("wrong", [0, 54, 3.0, True, int((__import__("labsupport.data").data.load_digits().train.labels == 3).sum())])
def test_nb00_q2_rejects_wrong_counts(wrong):
    outcome = nb00.q2.evaluate(wrong)
    assert outcome.status == INCORRECT, wrong
