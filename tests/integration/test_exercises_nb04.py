"""Exercises of notebook 04: each reference solution passes, typical wrong answers fail, ____ is not attempted."""

from __future__ import annotations

import pytest
from skl2onnx import to_onnx

from labsupport.course.data import load_digits
from labsupport.exercises import CORRECT, INCORRECT
from labsupport.exercises.nb04 import exercise_pipeline, exercise_table, q1, q2
from labsupport.models.digits_sklearn import digits_forest, fit_on_digits, initial_types, make_mixed_table, mixed_pipeline

OPSET = {"": 18, "ai.onnx.ml": 3}


def test_q1_accepts_the_reference_as_a_file(tmp_path):
    path = tmp_path / "q1.onnx"
    path.write_bytes(q1.reference_answer().SerializeToString())
    assert q1.evaluate(str(path)).status == CORRECT


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (lambda: to_onnx(exercise_pipeline(), load_digits().train.flat[:1], target_opset=OPSET), "zipmap"),
        (
            lambda: to_onnx(fit_on_digits(digits_forest()), load_digits().train.flat[:1], options={"zipmap": False}),
            "labels agree",
        ),
        (
            lambda: to_onnx(exercise_pipeline(), load_digits().train.flat[:1].astype("float64"), options={"zipmap": False}),
            "float32 input",
        ),
        (lambda: exercise_pipeline(), "ModelProto"),
    ],
    ids=["zipmap-default", "another-model", "double-input", "sklearn-object"],
)
def test_q1_wrong_answers_fail(wrong, reason):
    outcome = q1.evaluate(wrong())
    assert outcome.status == INCORRECT and reason in outcome.message


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        # guessed from the DataFrame: numbers become float64 (double) inputs
        (lambda frame, model: to_onnx(model, frame[:1], options={"zipmap": False}, target_opset=OPSET), "tensor(float)"),
        (lambda frame, model: to_onnx(model, initial_types=initial_types(frame), target_opset=OPSET), "zipmap"),
        (
            lambda frame, model: to_onnx(
                mixed_pipeline().fit(*make_mixed_table(400, seed=1)),
                initial_types=initial_types(frame),
                options={"zipmap": False},
                target_opset=OPSET,
            ),
            "labels agree",
        ),
    ],
    ids=["double-inputs", "zipmap-default", "fitted-on-other-data"],
)
def test_q2_wrong_answers_fail(wrong, reason):
    frame, _, model = exercise_table()
    outcome = q2.evaluate(wrong(frame, model))
    assert outcome.status == INCORRECT and reason in outcome.message


def _digits_with(options):
    return to_onnx(exercise_pipeline(), load_digits().train.flat[:1], options=options, target_opset=OPSET)


def test_q1_accepts_an_extra_class_labels_output():
    answer = _digits_with({"zipmap": False, "output_class_labels": True})
    assert [o.name for o in answer.graph.output] == ["label", "probabilities", "class_labels"]
    assert q1.evaluate(answer).status == CORRECT


def test_q1_rejects_zipmap_columns_with_the_reason():
    outcome = q1.evaluate(_digits_with({"zipmap": "columns"}))  # one (N,) output per class
    assert outcome.status == INCORRECT and "(N, classes) probabilities" in outcome.message


def test_q2_reference_uses_the_names_the_notebook_gives():
    assert "frame, churned, table_pipeline = exercise_table()" in q2.solution_code
    assert q2.evaluate(q2.reference_answer()).status == CORRECT


def _fixed_batch_of_the_test_split():
    from skl2onnx.common.data_types import FloatTensorType

    rows = len(load_digits().test.flat)  # 540: exactly what the checker used to run
    return to_onnx(exercise_pipeline(), initial_types=[("X", FloatTensorType([rows, 64]))], options={"zipmap": False}, target_opset=OPSET)


def _refit_on_fewer_rows():
    from sklearn.base import clone

    train = load_digits().train
    return to_onnx(
        clone(exercise_pipeline()).fit(train.flat[:200], train.labels[:200]),
        train.flat[:1],
        options={"zipmap": False},
        target_opset=OPSET,
    )


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (_fixed_batch_of_the_test_split, "single row failed"),  # review 4: accepted a fixed batch of 540
        (_refit_on_fewer_rows, "labels agree"),
        (lambda: to_onnx(exercise_pipeline()[-1], load_digits().train.flat[:1], options={"zipmap": False}), "labels agree"),
    ],
    ids=["fixed-batch-540", "refit-on-200-rows", "classifier-without-its-scaler"],
)
def test_q1_more_wrong_answers_fail(wrong, reason):
    outcome = q1.evaluate(wrong())
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message
