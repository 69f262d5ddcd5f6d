"""Notebook 00's checkers: right answers pass, each known wrong answer is rejected with its reason."""

from __future__ import annotations

import numpy as np
import pytest

from labsupport.course.data import load_digits
from labsupport.exercises import CORRECT, INCORRECT, nb00


@pytest.mark.parametrize(
    "right",
    [
        lambda p: (np.asarray(p) / 16).astype(np.float32),
        lambda p: np.asarray(p).astype(np.float32) / 16,
        lambda p: np.asarray(p) * np.float32(1 / 16),
    ],
)
def test_q1_accepts_division_by_sixteen(right):
    assert nb00.q1.evaluate(right).status == CORRECT


@pytest.mark.parametrize(
    "rescale",
    [
        lambda p: (np.asarray(p) / np.asarray(p).max()).astype(np.float32),
        lambda p: ((np.asarray(p) - np.min(p)) / (np.max(p) - np.min(p))).astype(np.float32),
        lambda p: (np.asarray(p) / np.maximum(np.asarray(p).max(axis=-1, keepdims=True), 1)).astype(np.float32),
    ],
    ids=["own maximum", "min-max", "per-row maximum"],
)
def test_q1_rejects_rescaling_by_the_image_itself(rescale):
    outcome = nb00.q1.evaluate(rescale)
    assert outcome.status == INCORRECT and "fixed maximum 16," in outcome.message, outcome.message
    assert "16.0" not in outcome.message
    gave, expected = outcome.message.split(" it gave ")[1].split(", expected ")
    assert gave != expected.split(";")[0], outcome.message  # the row shown is one that differs


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (lambda p: np.asarray(p) / 16, "float32"),
        (lambda p: (np.asarray(p) / 255).astype(np.float32), "must map to 0..1"),
        (lambda p: (np.asarray(p) // 16).astype(np.float32), "must map to 0..1"),
    ],
)
def test_q1_rejects_wrong_scalers_with_the_reason(wrong, reason):
    outcome = nb00.q1.evaluate(wrong)
    assert outcome.status == INCORRECT and reason in outcome.message


def test_q1_rejects_an_answer_that_is_right_only_for_even_pixels():
    outcome = nb00.q1.evaluate(lambda p: ((p // 2) / 8).astype(np.float32))  # review 4: every test pixel was even
    assert outcome.status == INCORRECT and "must map to 0..1" in outcome.message, outcome.message
    assert "fixed maximum" not in outcome.message


@pytest.mark.parametrize(
    "wrong",
    [lambda p: np.round(p / 16, 1).astype(np.float32), lambda p: (np.asarray(p) / 17).astype(np.float32)],
    ids=["rounded", "wrong-constant"],
)
def test_q1_blames_the_own_maximum_only_when_that_is_the_cause(wrong):
    outcome = nb00.q1.evaluate(wrong)
    assert outcome.status == INCORRECT and "must map to 0..1" in outcome.message, outcome.message
    assert "fixed maximum" not in outcome.message, outcome.message


def test_q2_asks_for_a_digit_whose_count_no_other_digit_shares():
    per_digit = np.bincount(load_digits().test.labels, minlength=10)
    assert (per_digit == per_digit[nb00.COUNTED_DIGIT]).sum() == 1
    assert nb00.q2.evaluate(int(per_digit[nb00.COUNTED_DIGIT])).status == CORRECT
    assert nb00.q2.evaluate(np.int64(per_digit[nb00.COUNTED_DIGIT])).status == CORRECT


@pytest.mark.parametrize("digit", [d for d in range(10) if d != nb00.COUNTED_DIGIT])
def test_q2_rejects_the_count_of_another_digit(digit):
    outcome = nb00.q2.evaluate(int((load_digits().test.labels == digit).sum()))
    assert outcome.status == INCORRECT and "another digit" in outcome.message and str(digit) in outcome.message


def test_q2_rejects_other_splits_and_totals_with_the_reason():
    digits = load_digits()
    train = nb00.q2.evaluate(int((digits.train.labels == nb00.COUNTED_DIGIT).sum()))
    assert train.status == INCORRECT and "train" in train.message
    whole = nb00.q2.evaluate(len(digits.test.labels))
    assert whole.status == INCORRECT and "whole test split" in whole.message
    for wrong in (0, 52.0, "52", True):
        assert nb00.q2.evaluate(wrong).status == INCORRECT, wrong


def test_q1_message_shows_the_difference_it_rejects():
    # review 4: "+1e-6" was rejected with "it gave [0.0, 0.5, 1.0], expected [0.0, 0.5, 1.0]"
    outcome = nb00.q1.evaluate(lambda p: (np.asarray(p) / 16 + 1e-6).astype(np.float32))
    assert outcome.status == INCORRECT and "largest difference 1e-06" in outcome.message, outcome.message
    gave, expected = outcome.message.split(" it gave ")[1].split(", expected ")
    assert gave != expected.split(" (")[0], outcome.message


def test_q1_names_an_array_for_a_list_answer():
    outcome = nb00.q1.evaluate(lambda p: (np.asarray(p) / 16).astype(np.float32).tolist())
    assert outcome.status == INCORRECT and "return a NumPy array" in outcome.message, outcome.message


def _scale_in_place(pixels):
    pixels //= 16  # integer division in place: 0 or 1
    return pixels


@pytest.mark.parametrize(
    "wrong",
    [
        _scale_in_place,
        lambda p: np.round(np.asarray(p) / 16, 1).astype(np.float32),  # rounded to one decimal
        lambda p: (np.asarray(p).T / 16).astype(np.float32).T[::-1],  # rows reversed
        lambda p: (np.clip(np.asarray(p), 0, 15) / 16).astype(np.float32),  # the brightest pixel lost
    ],
    ids=["in-place-floor-division", "rounded", "rows-reversed", "clipped-at-15"],
)
def test_q1_rejects_more_wrong_scalers_and_keeps_its_inputs(wrong):
    assert nb00.q1.evaluate(wrong).status == INCORRECT
    assert nb00.SCALE_INPUTS[0].tolist() == [[0, 8, 16], [4, 12, 2], [1, 7, 15]]
    assert nb00.q1.evaluate(lambda p: (np.asarray(p) / 16).astype(np.float32)).status == CORRECT
