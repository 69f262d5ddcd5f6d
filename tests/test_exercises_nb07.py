import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport.exercises import ____, INCORRECT, NOT_ATTEMPTED
from labsupport.exercises.nb07 import q1, q2, q3
from labsupport.optimize import op_counts, optimize_to_file


def _model(nodes, initializers=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


ONE = numpy_helper.from_array(np.ones(4, np.float32), "one")


@pytest.mark.parametrize("exercise", [q2, q3])
def test_a_function_returning_the_placeholder_is_not_attempted(exercise):
    assert exercise.evaluate(lambda *args: ____).status == NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong",
    [
        _model([helper.make_node("Relu", ["x"], ["y"])]),  # nothing to fold
        _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                helper.make_node("Add", ["b", "one"], ["y"])], [ONE]),  # every node touches the input
        _model([helper.make_node("Relu", ["x"], ["a"])]),  # invalid: y is never produced
        "model.onnx",
    ],
)
def test_q1_rejects_graphs_that_do_not_fold_to_one_node(wrong):
    assert q1.evaluate(wrong).status == INCORRECT


def _removed_after(model, level):
    with tempfile.TemporaryDirectory() as folder:
        return dict(op_counts(optimize_to_file(model, level, Path(folder) / "o.onnx")))


@pytest.mark.parametrize(
    "wrong",
    [
        _removed_after,  # counts after optimization, not what was removed
        lambda model, level: {"BatchNormalization": 2},  # ignores the level
        lambda model, level: ["BatchNormalization"],  # not a dict
    ],
)
def test_q2_rejects_wrong_counts(wrong):
    assert q2.evaluate(wrong).status == INCORRECT


def _saver(level):
    def save(source, target):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.optimized_model_filepath = str(target)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        return target
    return save


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (_saver(ort.GraphOptimizationLevel.ORT_ENABLE_ALL), "tied to this CPU"),
        (_saver(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC), "no FusedConv"),
        (lambda source, target: target, "nothing was written"),
        (lambda source, target: onnx.save(onnx.load(source), target) or target, "no FusedConv"),
    ],
)
def test_q3_rejects_non_portable_or_unoptimized_files(wrong, reason):
    outcome = q3.evaluate(wrong)
    assert outcome.status == INCORRECT and reason in outcome.message
