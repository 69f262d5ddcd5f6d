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
