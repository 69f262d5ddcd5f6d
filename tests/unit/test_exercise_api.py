"""The exercise API (labsupport.exercises): outcomes, who is blamed for an exception, and the checkers' helpers."""

from __future__ import annotations

import asyncio
import inspect

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport.exercises import (
    CHECKER_ERROR,
    CORRECT,
    INCORRECT,
    NOT_ATTEMPTED,
    Exercise,
    Incorrect,
    ____,
)
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
