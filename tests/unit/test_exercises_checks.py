"""labsupport.exercises.checks: the helpers checkers share (blame, paths, numbers, ONNX sessions, ORT's error text)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport.exercises import INCORRECT, Exercise, Incorrect
from labsupport.exercises.checks import (
    answer_path,
    blame_answer,
    error_summary,
    expect_close,
    expect_value,
    onnx_session,
    whole_number,
    without_ort_location,
)
from labsupport.models.contract import IR_VERSION, OPSET


def test_blame_answer_turns_any_error_into_incorrect_and_keeps_incorrect():
    with pytest.raises(Incorrect, match=r"^running your model failed: boom: on one line$"), blame_answer("running your model failed"):
        raise ValueError("boom:\n  on one line\n==> Context: onnx's appendix")
    with pytest.raises(Incorrect, match=r"^kept$"), blame_answer("never shown"):
        raise Incorrect("kept")


def test_answer_path(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"x")
    assert answer_path(str(model), "a path") == model
    with pytest.raises(Incorrect, match="expected a path, got int"):
        answer_path(3, "a path")
    with pytest.raises(Incorrect, match=r"expected a path; 'missing\.onnx' does not exist"):
        answer_path(tmp_path / "missing.onnx", "a path")


def test_whole_number_and_expect_value():
    assert whole_number(np.int64(3), "count") == 3
    for wrong in (3.0, True, "3"):
        with pytest.raises(Incorrect, match="the count must be a whole number"):
            whole_number(wrong, "count")
    mistakes = [(7, "that is the train split"), (8, "off by one")]
    expect_value(5, 5, mistakes=mistakes, wrong="no")
    with pytest.raises(Incorrect, match=r"^that is the train split$"):
        expect_value(7, 5, mistakes=mistakes, wrong="no")
    with pytest.raises(Incorrect, match=r"^no$"):
        expect_value(6, 5, mistakes=mistakes, wrong="no")


def test_expect_close():
    expect_close(np.ones(3), np.ones(3) + 1e-7, what="the outputs")
    with pytest.raises(Incorrect, match=r"^the outputs do not match: yours vs expected: 3 values"):
        expect_close(np.ones(3), np.zeros(3), what="the outputs")
    with pytest.raises(Incorrect, match="shapes differ"):
        expect_close(np.ones(3), np.ones(4), what="the outputs")
    with pytest.raises(Incorrect, match="must be numeric"):
        expect_close(np.ones(3), "abc", what="the outputs")


def _identity_model(ir_version: int = IR_VERSION) -> onnx.ModelProto:
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 2]) for name in ("x", "y")]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", io[:1], io[1:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=ir_version)


def test_onnx_session_loads_a_proto_and_a_path(tmp_path):
    path = tmp_path / "identity.onnx"
    path.write_bytes(_identity_model().SerializeToString())
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    for answer in (_identity_model(), path, str(path)):
        session = onnx_session(answer)
        assert session.get_providers() == ["CPUExecutionProvider"]
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], x)


def test_a_failed_run_of_a_checker_session_prints_no_runtime_log(capfd):
    shape = numpy_helper.from_array(np.array([64, 2], np.int64), "shape")
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2]), helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "fixed_batch", io[:1], io[1:], [shape])
    session = onnx_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION))
    with pytest.raises(Exception, match="Reshape"):
        session.run(None, {"x": np.ones((1, 2), np.float32)})  # batch 1 into a batch-64 reshape
    assert "onnxruntime" not in capfd.readouterr().err  # the verdict carries the reason, not a red log line


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
    with pytest.raises(Incorrect) as caught:
        onnx_session(answer(tmp_path), what="a model file")
    message = str(caught.value)
    assert message.startswith(reason) and "\n" not in message
    with pytest.raises(Incorrect, match=r"expected an ONNX ModelProto or a \.onnx path, got list"):
        onnx_session([])


ORT_IR_ERROR = (
    "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 onnxruntime::Model::Model("
    "onnx::ModelProto&&, const onnxruntime::PathString&, const onnxruntime::IOnnxRuntimeOpSchemaRegistryList*, "
    "const onnxruntime::logging::Logger&, const onnxruntime::ModelOptions&) Unsupported model IR version: 14, max supported IR version: 13"
)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (ORT_IR_ERROR, "Unsupported model IR version: 14, max supported IR version: 13"),
        (  # a location inside the message, with a return type and templates in the signature
            "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Mul node. Status Message: "
            "/onnxruntime_src/onnxruntime/core/providers/cpu/math/element_wise_ops.h:666 void onnxruntime::BroadcastIterator::Append("
            "ptrdiff_t, ptrdiff_t) axis == 1 || axis == largest was false. Attempting to broadcast",
            "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Mul node. Status Message: "
            "axis == 1 || axis == largest was false. Attempting to broadcast",
        ),
        ("[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model failed: invalid model", None),  # no location: unchanged
        ("model.cc:12 Loading failed (a file is missing)", "Loading failed (a file is missing)"),  # no signature: text kept
    ],
)
def test_ort_errors_keep_their_reason_without_the_cpp_location(message, reason):
    assert without_ort_location(message) == (reason or message)


def test_error_summary_keeps_the_reason_of_a_long_ort_error():
    assert error_summary(RuntimeError(ORT_IR_ERROR)) == "Unsupported model IR version: 14, max supported IR version: 13"


def test_an_ort_error_in_the_learners_code_keeps_its_reason():
    exercise = Exercise(1, "runs", lambda function: function(), hint="", solution_code="answer = abs")

    def answer():
        raise RuntimeError(ORT_IR_ERROR)

    outcome = exercise.evaluate(answer)
    assert outcome.status == INCORRECT and "Unsupported model IR version: 14" in outcome.message
    assert "onnxruntime_src" not in outcome.message
