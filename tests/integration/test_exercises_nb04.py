"""Exercises of notebook 04: each reference solution passes, typical wrong answers fail, ____ is not attempted."""

from __future__ import annotations

import numpy as np
import pytest
from skl2onnx import to_onnx

from labsupport.course.data import load_digits
from labsupport.exercises import CORRECT, INCORRECT, nb04
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

    rows = len(load_digits().test.flat)  # 540: the whole test split in one batch
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
        (_fixed_batch_of_the_test_split, "fixed batch dimension of 540"),  # runs the whole test split, but no other batch size
        (_refit_on_fewer_rows, "labels agree"),
        (lambda: to_onnx(exercise_pipeline()[-1], load_digits().train.flat[:1], options={"zipmap": False}), "labels agree"),
    ],
    ids=["fixed-batch-540", "refit-on-200-rows", "classifier-without-its-scaler"],
)
def test_q1_more_wrong_answers_fail(wrong, reason):
    outcome = q1.evaluate(wrong())
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


# exercise_pipeline() and exercise_table() hand out copies: a learner who refits or changes them leaves the reference unchanged


def _converted_digits(pipeline):
    return to_onnx(pipeline, load_digits().train.flat[:1], options={"zipmap": False}, target_opset=OPSET)


def _refit_on_the_test_split():
    test = load_digits().test
    return _converted_digits(exercise_pipeline().fit(test.flat, test.labels))


def _refit_with_strong_regularization():
    train = load_digits().train
    pipeline = exercise_pipeline()
    pipeline[-1].C = 1e-3
    return _converted_digits(pipeline.fit(train.flat[:100], train.labels[:100]))


@pytest.mark.parametrize("refit", [_refit_on_the_test_split, _refit_with_strong_regularization], ids=["test-split", "C-1e-3"])
def test_q1_rejects_a_refit_copy_and_keeps_its_reference(refit):
    outcome = q1.evaluate(refit())
    assert outcome.status == INCORRECT and "labels agree" in outcome.message, outcome.message
    assert q1.evaluate(q1.reference_answer()).status == CORRECT


def _converted_table(model, frame):
    return to_onnx(model, initial_types=initial_types(frame), options={"zipmap": False}, target_opset=OPSET)


def test_q2_rejects_a_pipeline_refit_on_the_held_out_rows_too():
    frame, churned, table_pipeline = exercise_table()
    outcome = q2.evaluate(_converted_table(table_pipeline.fit(frame, churned), frame))
    assert outcome.status == INCORRECT and "agree" in outcome.message, outcome.message
    assert q2.evaluate(q2.reference_answer()).status == CORRECT


def test_q2_changing_the_learners_table_leaves_the_checkers_alone():
    frame, churned, _ = exercise_table()
    frame["age"] = 0.0
    frame["churned"] = churned
    fresh, _, _ = exercise_table()
    assert fresh.equals(make_mixed_table(nb04.TABLE_ROWS)[0])
    assert q2.evaluate(q2.reference_answer()).status == CORRECT  # the copy's "churned" column is no input of the reference


def test_q2_names_a_label_column_given_as_an_input():
    frame, churned, table_pipeline = exercise_table()
    frame["churned"] = churned
    outcome = q2.evaluate(_converted_table(table_pipeline, frame))
    assert outcome.status == INCORRECT and "not feature columns" in outcome.message and "churned" in outcome.message, outcome.message


@pytest.mark.parametrize("exercise", [q1, q2], ids=["q1", "q2"])
def test_a_folder_is_named_a_folder(exercise, tmp_path):
    (tmp_path / "art").mkdir()
    outcome = exercise.evaluate(str(tmp_path / "art"))
    assert outcome.status == INCORRECT and "'art' is a folder, not a file" in outcome.message, outcome.message


def _features(name, width):
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType

    kind = DoubleTensorType if name == "double" else FloatTensorType
    return [("features" if name == "double" else name, kind(width))]


def _named(name, shape_of):
    def convert(pipeline, frame):
        return to_onnx(pipeline, initial_types=_features(name, shape_of(frame)), options={"zipmap": False}, target_opset=OPSET)

    return convert


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (lambda pipeline, frame: to_onnx(pipeline, frame.to_numpy("float32")[:1], options={"zipmap": False}, target_opset=OPSET), "'X'"),
        (lambda pipeline, frame: to_onnx(pipeline, frame[:1], options={"zipmap": False}, target_opset=OPSET), "one input per column"),
        (_named("features", lambda frame: [None, 13]), "do not hard-code"),
        (_named("features", lambda frame: [len(frame), frame.shape[1]]), "fixed batch dimension"),
        (_named("double", lambda frame: [None, frame.shape[1]]), "float32"),
        (
            lambda pipeline, frame: to_onnx(pipeline, initial_types=_features("features", [None, frame.shape[1]]), target_opset=OPSET),
            "zipmap",
        ),
        (lambda pipeline, frame: pipeline, "ModelProto"),
        (nb04.exercise_wine()[2], "function"),
    ],
    ids=[
        "sample-named-X",
        "dataframe-sample",
        "wine-width",
        "fixed-batch",
        "double-input",
        "zipmap-default",
        "returns-pipeline",
        "not-a-function",
    ],
)
def test_q3_wrong_answers_fail(wrong, reason):
    outcome = nb04.q3.evaluate(wrong)
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


def test_q3_rejects_a_converter_that_refits_the_pipeline():
    def refit_first(pipeline, frame):
        labels = (frame.iloc[:, 0] > frame.iloc[:, 0].median()).astype(int)
        return _named("features", lambda table: [None, table.shape[1]])(pipeline.fit(frame, labels), frame)

    outcome = nb04.q3.evaluate(refit_first)
    assert outcome.status == INCORRECT and "agree" in outcome.message, outcome.message


def test_q3_the_wine_copy_is_the_learners_to_change():
    frame, target, pipeline = nb04.exercise_wine()
    frame["alcohol"] = 0.0
    pipeline.fit(frame, target)
    assert frame.shape == (178, 13) and nb04.q3.evaluate(nb04.q3.reference_answer()).status == CORRECT


def test_q3_a_name_of_the_learners_own_is_not_called_the_converters_default():
    outcome = nb04.q3.evaluate(_named("input", lambda frame: [None, frame.shape[1]]))
    assert outcome.status == INCORRECT and "'features'" in outcome.message and "default" not in outcome.message, outcome.message


def _table_columns(shape):
    """initial_types for exercise 2's table, one column per input, each with the given shape."""
    from pandas.api.types import is_numeric_dtype
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    frame = exercise_table()[0]
    return [(name, FloatTensorType(shape) if is_numeric_dtype(frame[name]) else StringTensorType(shape)) for name in frame.columns]


@pytest.mark.parametrize(
    ("shape", "reason"),
    [([None], "declare it 2-D"), ([1, 1], "fixed batch dimension of 1 rows")],
    ids=["one-dimensional-columns", "batch-of-one"],
)
def test_q2_names_the_shape_mistake_instead_of_a_runtime_error(shape, reason):
    converted = to_onnx(exercise_table()[2], initial_types=_table_columns(shape), options={"zipmap": False}, target_opset=OPSET)
    outcome = q2.evaluate(converted)
    assert outcome.status == INCORRECT and reason in outcome.message and "ONNXRuntimeError" not in outcome.message, outcome.message


def test_q1_probabilities_off_by_more_than_the_stated_1e5_fail():
    """The message says 'within 1e-05': a relative slack of 1e-4 must not let 5e-5 through near 1.0."""
    import onnx
    from onnx import helper, numpy_helper

    model = q1.reference_answer()
    probabilities = model.graph.output[1].name
    for node in model.graph.node:
        node.output[:] = [f"{name}_exact" if name == probabilities else name for name in node.output]
    model.graph.initializer.append(numpy_helper.from_array(np.array([1 + 5e-5], np.float32), "nudge"))
    model.graph.node.append(helper.make_node("Mul", [f"{probabilities}_exact", "nudge"], [probabilities]))
    onnx.checker.check_model(model)
    outcome = q1.evaluate(model)
    assert outcome.status == INCORRECT and "probabilities differ" in outcome.message, outcome.message
