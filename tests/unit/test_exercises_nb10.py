import numpy as np
import pytest
from onnx import helper
from onnx.reference.op_run import OpRun

from labsupport.exercises import INCORRECT
from labsupport.exercises.nb10 import q1, q2
from labsupport.models.contract import OPSET


def _op_class(body, name="SquaredRelu", domain="course.custom"):
    return type(name, (OpRun,), {"op_domain": domain, "_run": body})


@pytest.mark.parametrize(
    "wrong",
    [
        _op_class(lambda self, x: (np.maximum(x, 0),)),  # forgot the square
        _op_class(lambda self, x: (np.square(np.maximum(x, 0)).astype(np.float64),)),  # wrong dtype
        _op_class(lambda self, x: (np.square(x),), name="SquaredRelu"),  # square without relu
        _op_class(lambda self, x: (np.square(np.maximum(x, 0)),), domain="other.domain"),
        lambda x: np.square(np.maximum(x, 0)),  # a function, not an OpRun class
    ],
)
def test_q1_rejects_wrong_ops(wrong):
    assert q1.evaluate(wrong).status == INCORRECT


def _function(nodes, name="SquaredRelu", domain="course.fn"):
    return helper.make_function(domain, name, ["x"], ["y"], nodes, opset_imports=[helper.make_opsetid("", OPSET)])


@pytest.mark.parametrize(
    "wrong",
    [
        _function([helper.make_node("Relu", ["x"], ["y"])]),  # no square
        _function([helper.make_node("Mul", ["x", "x"], ["y"])]),  # no relu
        _function([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "r"], ["y"])], domain="course.custom"),
        _function([helper.make_node("SquaredRelu", ["x"], ["y"], domain="course.custom")]),  # not standard ops
        "Relu then Mul",
    ],
)
def test_q2_rejects_wrong_functions(wrong):
    assert q2.evaluate(wrong).status == INCORRECT
