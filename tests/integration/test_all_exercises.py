"""Every exercise of every notebook: its reference solution passes, and no answer makes its checker crash.

The API itself is unit-tested in tests/unit/test_exercises.py and test_exercises_checks.py; these run the real checkers (they train,
export and open sessions), so they are integration tests.
"""

from __future__ import annotations

import numpy as np
import pytest

from labsupport.course.data import load_digits
from labsupport.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, ____, all_exercises, nb00

EXERCISES = list(all_exercises())

# answers of the wrong kind: a checker must call each of them incorrect, never crash on it (a checker error)
WRONG_KINDS = {
    "None": None,
    "an int": 42,
    "a string": "model.onnx",
    "an object": object(),
    "a function returning None": lambda *args, **kwargs: None,
    "a function returning a string": lambda *args, **kwargs: "text",
}


@pytest.mark.parametrize(("module", "exercise"), EXERCISES, ids=lambda value: str(value))
def test_every_reference_solution_passes_its_checker(module, exercise):
    outcome = exercise.evaluate(exercise.reference_answer())
    assert outcome.status == CORRECT, f"{module} {exercise}: {outcome.message}\n{outcome.details}"
    assert exercise.evaluate(____).status == NOT_ATTEMPTED


@pytest.mark.parametrize(("module", "exercise"), EXERCISES, ids=lambda value: str(value))
def test_no_checker_crashes_on_an_answer_of_the_wrong_kind(module, exercise):
    for kind, answer in WRONG_KINDS.items():
        outcome = exercise.evaluate(answer)
        assert outcome.status == INCORRECT, f"{module} {exercise} given {kind}: {outcome.status}: {outcome.message}\n{outcome.details}"


@pytest.mark.parametrize(
    "wrong",
    [
        lambda pixels: np.asarray(pixels) / 255,
        lambda pixels: np.asarray(pixels, dtype=np.float64) / 16,
        lambda pixels: np.asarray(pixels, dtype=np.float32).ravel() / 16,
        lambda pixels: "0.5",
        "not a function",
    ],
)
def test_nb00_q1_rejects_wrong_scalers(wrong):
    assert nb00.q1.evaluate(wrong).status == INCORRECT


@pytest.mark.parametrize("wrong", [0, 54, 3.0, True, int((load_digits().train.labels == 3).sum())])
def test_nb00_q2_rejects_wrong_counts(wrong):
    outcome = nb00.q2.evaluate(wrong)
    assert outcome.status == INCORRECT, wrong
