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
    outcome = nb00.q1.evaluate(lambda p: ((p // 2) / 8).astype(np.float32))  # right for even pixels only
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
    # an answer off by 1e-6 prints like the expected values when rounded: the message shows the difference
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


@pytest.fixture(scope="module")
def wine():
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = X.astype(np.float32)
    return X, y, make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X, y)


def _wine_onnx(model, *, name="measurements", tensor_type=None, shape=(None, 13), zipmap=False):
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    initial = [(name, (tensor_type or FloatTensorType)(list(shape)))]
    return to_onnx(model, initial_types=initial, options={"zipmap": zipmap})


def test_nb00_q3_accepts_the_recipe_on_wine_with_other_classifiers(wine, tmp_path):
    from sklearn.ensemble import RandomForestClassifier

    X, y, model = wine
    assert nb00.q3.evaluate((model, _wine_onnx(model))).status == CORRECT
    forest = RandomForestClassifier(n_estimators=20, random_state=0).fit(X, y)
    path = tmp_path / "forest.onnx"
    path.write_bytes(_wine_onnx(forest).SerializeToString())
    assert nb00.q3.evaluate((forest, str(path))).status == CORRECT  # a path is fine too
    assert nb00.q3.evaluate([model, _wine_onnx(model)]).status == CORRECT  # a list is a pair too


def test_nb00_q3_names_each_mistake(wine):
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import DoubleTensorType
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    X, y, model = wine
    digits_X, digits_y = sklearn_digits(return_X_y=True)
    digits_model = LogisticRegression(max_iter=200).fit(digits_X[:300] / 16, digits_y[:300])
    shuffled = LogisticRegression(max_iter=1000).fit(X, np.random.default_rng(0).permutation(y))
    tree = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y)
    wrong = {
        "expected a pair": _wine_onnx(model),
        "fitted scikit-learn classifier": (_wine_onnx(model), model),
        "fitted on 64 features": (digits_model, _wine_onnx(model)),
        "of the raw wine measurements right": (shuffled, _wine_onnx(shuffled)),
        "one input named 'measurements'": (model, to_onnx(model, X[:1], options={"zipmap": False})),
        "must be float32": (model, _wine_onnx(model, tensor_type=DoubleTensorType)),
        "shape must be [None, 13]": (model, _wine_onnx(model, shape=(1, 13))),
        "zipmap": (model, _wine_onnx(model, zipmap=True)),
        "export the classifier you return": (model, _wine_onnx(tree)),
    }
    for reason, answer in wrong.items():
        outcome = nb00.q3.evaluate(answer)
        assert outcome.status == INCORRECT and reason in outcome.message, (reason, outcome.message)


def test_nb00_q3_names_a_classifier_without_probabilities(wine):
    from sklearn.linear_model import RidgeClassifier

    X, y, _ = wine
    ridge = RidgeClassifier().fit(X, y)  # a classifier, but no predict_proba
    outcome = nb00.q3.evaluate((ridge, _wine_onnx(ridge, zipmap=True)))
    assert outcome.status == INCORRECT and "has no predict_proba()" in outcome.message, outcome.message


def test_nb00_q3_names_a_scaler_fitted_outside_the_model(wine):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X, y, _ = wine
    scaled = StandardScaler().fit_transform(X).astype(np.float32)  # scaled by hand, then only the classifier exported
    bare = LogisticRegression(max_iter=1000).fit(scaled, y)
    outcome = nb00.q3.evaluate((bare, _wine_onnx(bare)))
    assert outcome.status == INCORRECT and "put any scaling inside the model" in outcome.message, outcome.message


def test_nb00_q1_names_a_function_that_returns_nothing():
    def forgot_return(pixels):
        (np.asarray(pixels) / 16).astype(np.float32)

    outcome = nb00.q1.evaluate(forgot_return)
    assert outcome.status == INCORRECT and "returned None" in outcome.message, outcome.message
