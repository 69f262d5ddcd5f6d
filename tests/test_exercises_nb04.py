"""Exercises of notebook 04: each reference solution passes, typical wrong answers fail, ____ is not attempted."""

from __future__ import annotations

import pytest
from skl2onnx import to_onnx

from labsupport.data import load_digits
from labsupport.exercises import CORRECT, INCORRECT
from labsupport.exercises.nb04 import exercise_pipeline, exercise_table, q1, q2
from labsupport.sklearn_models import digits_forest, fit_on_digits, initial_types, make_mixed_table, mixed_pipeline

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


# labsupport.exercises.checks.onnx_session: the loader shared by the checkers of notebooks 03 and 04


def _identity_model(ir_version: int = 10):
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 2]) for name in ("x", "y")]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", io[:1], io[1:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=ir_version)


def test_onnx_session_loads_a_proto_and_a_path(tmp_path):
    import numpy as np

    from labsupport.exercises.checks import onnx_session

    path = tmp_path / "identity.onnx"
    path.write_bytes(_identity_model().SerializeToString())
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    for answer in (_identity_model(), path, str(path)):
        session = onnx_session(answer)
        assert session.get_providers() == ["CPUExecutionProvider"]
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], x)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (lambda tmp: tmp / "missing.onnx", "expected a model file; 'missing.onnx' does not exist"),
        (lambda tmp: 42, "expected a model file, got int"),
        (lambda tmp: _identity_model(ir_version=99), "ONNX Runtime cannot load the model: "),
    ],
    ids=["missing-path", "wrong-type", "runtime-refuses"],
)
def test_onnx_session_rejects_with_incorrect(tmp_path, answer, reason):
    from labsupport.exercises import Incorrect
    from labsupport.exercises.checks import onnx_session

    with pytest.raises(Incorrect) as caught:
        onnx_session(answer(tmp_path), what="a model file")
    message = str(caught.value)
    assert message.startswith(reason) and "\n" not in message


def test_onnx_session_default_names_the_expected_answer():
    from labsupport.exercises import Incorrect
    from labsupport.exercises.checks import onnx_session

    with pytest.raises(Incorrect, match="expected an ONNX ModelProto or a .onnx path, got list"):
        onnx_session([])
