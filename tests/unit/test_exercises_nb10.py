import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference.op_run import OpRun
from onnxscript import FLOAT, script
from onnxscript import opset21 as op
from onnxscript.values import Opset

from labsupport.exercises import CORRECT, INCORRECT
from labsupport.exercises.nb10 import q1, q2, q3
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


@pytest.mark.parametrize(
    "body",
    [
        lambda self, x: (np.square(np.clip(x, 0, 3)),),  # right only up to 3 (the review's wrong answer)
        lambda self, x: (np.maximum(x, 0) * np.abs(x) * (np.abs(x) < 5),),  # zero beyond 5
        lambda self, x: (np.square(np.maximum(x, 0)) * (x < 100),),  # zero for very large values
        lambda self, x: (np.square(np.maximum(x, -0.5)),),  # wrong for small negative values
    ],
)
def test_q1_rejects_bodies_right_only_on_a_small_range(body):
    result = q1.evaluate(_op_class(body))
    assert result.status == INCORRECT
    assert "do not match" in result.message


def test_q2_rejects_a_clipped_body_and_names_the_missing_pieces():
    clipped = _function(
        [
            helper.make_node("Constant", [], ["hi"], value_float=3.0),
            helper.make_node("Constant", [], ["lo"], value_float=0.0),
            helper.make_node("Clip", ["x", "lo", "hi"], ["r"]),
            helper.make_node("Mul", ["r", "r"], ["y"]),
        ]
    )
    assert q2.evaluate(clipped).status == INCORRECT
    relu_square = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "r"], ["y"])]
    no_opsets = helper.make_function("course.fn", "SquaredRelu", ["x"], ["y"], relu_square, opset_imports=[])
    assert "make_opsetid" in q2.evaluate(no_opsets).message
    spelt_ai_onnx = helper.make_function("course.fn", "SquaredRelu", ["x"], ["y"], relu_square, [helper.make_opsetid("ai.onnx", OPSET)])
    assert "as domain ''" in q2.evaluate(spelt_ai_onnx).message


def test_q2_names_to_function_proto_for_an_onnxscript_function():
    import onnxscript
    from onnxscript import opset21 as op
    from onnxscript.values import Opset

    @onnxscript.script(Opset("course.fn", 1))
    def SquaredRelu(x):
        relu = op.Relu(x)
        return op.Mul(relu, relu)

    result = q2.evaluate(SquaredRelu)
    assert result.status == INCORRECT and "to_function_proto()" in result.message
    assert q2.evaluate(SquaredRelu.to_function_proto()).status == CORRECT


def _in_place_relu_square(self, x):
    np.maximum(x, 0, out=x)  # a common numpy idiom: it writes into the array the evaluator handed over
    return (x * x,)


def test_an_in_place_answer_cannot_corrupt_the_input_of_later_checks():
    # review 4: the in-place answer was accepted and left the checker's input without negatives,
    # after which a body with no ReLU passed q1 and q2
    assert q1.evaluate(_op_class(_in_place_relu_square)).status == CORRECT
    assert q1.evaluate(_op_class(lambda self, x: ((x * x).astype(x.dtype),))).status == INCORRECT
    assert q2.evaluate(_function([helper.make_node("Mul", ["x", "x"], ["y"])])).status == INCORRECT


@pytest.mark.parametrize(
    "wrong",
    [
        _op_class(lambda self, x: (np.maximum(x, 0) ** 2,), name="SquareRelu"),  # misspelled class name
        _op_class(lambda self, x: (np.square(np.maximum(x, 0)).astype(x.dtype)[::-1],)),  # rows reversed
        _op_class(lambda self, x: (np.maximum(np.square(x), 0).astype(x.dtype),)),  # relu after the square
    ],
    ids=["misspelled-name", "rows-reversed", "square-then-relu"],
)
def test_q1_rejects_more_wrong_ops(wrong):
    assert q1.evaluate(wrong).status == INCORRECT


@pytest.mark.parametrize(
    "nodes",
    [
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"])],  # doubled, not squared
        [helper.make_node("Abs", ["x"], ["r"]), helper.make_node("Mul", ["r", "r"], ["y"])],  # abs instead of relu
        [helper.make_node("Mul", ["x", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],  # relu of the square
    ],
    ids=["add-not-mul", "abs-not-relu", "relu-after-square"],
)
def test_q2_rejects_more_wrong_bodies(nodes):
    assert q2.evaluate(_function(nodes)).status == INCORRECT


def _rms_function(nodes, attributes=("epsilon",)):
    return helper.make_function(
        "course.fn", "RmsNorm", ["X"], ["Y"], nodes, opset_imports=[helper.make_opsetid("", OPSET)], attributes=list(attributes)
    )


def _epsilon_from_attribute():
    node = helper.make_node("Constant", [], ["eps"])
    node.attribute.append(onnx.AttributeProto(name="value_float", ref_attr_name="epsilon", type=onnx.AttributeProto.FLOAT))
    return node


def _axes(axis=-1):
    return helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("axes", onnx.TensorProto.INT64, [1], [axis]))


_SQUARE = helper.make_node("Mul", ["X", "X"], ["square"])
_MEAN_LAST = helper.make_node("ReduceMean", ["square", "axes"], ["ms"])
_ADD_SQRT_DIV = [
    helper.make_node("Add", ["ms", "eps"], ["shifted"]),
    helper.make_node("Sqrt", ["shifted"], ["rms"]),
    helper.make_node("Div", ["X", "rms"], ["Y"]),
]


def test_q3_accepts_an_onnxscript_function():
    @script(Opset("course.fn", 1))
    def RmsNorm(X: FLOAT, epsilon: float = 1e-6) -> FLOAT:
        mean_square = op.ReduceMean(op.Mul(X, X), op.Constant(value_ints=[-1]), keepdims=1)
        return op.Div(X, op.Sqrt(op.Add(mean_square, op.CastLike(epsilon, X))))

    assert q3.evaluate(RmsNorm).status == CORRECT


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (
            _rms_function([_epsilon_from_attribute(), _SQUARE, helper.make_node("ReduceMean", ["square"], ["ms"]), *_ADD_SQRT_DIV]),
            "every axis",
        ),
        (_rms_function([_epsilon_from_attribute(), _axes(0), _SQUARE, _MEAN_LAST, *_ADD_SQRT_DIV]), "first axis"),
        (
            _rms_function(
                [_axes(), _SQUARE, _MEAN_LAST, helper.make_node("Sqrt", ["ms"], ["rms"]), helper.make_node("Div", ["X", "rms"], ["Y"])]
            ),
            "epsilon is ignored",
        ),
        (
            _rms_function([_axes(), _SQUARE, _MEAN_LAST, helper.make_node("Constant", [], ["eps"], value_float=1e-6), *_ADD_SQRT_DIV]),
            "epsilon is ignored",
        ),
        (
            _rms_function(
                [
                    _epsilon_from_attribute(),
                    _axes(),
                    _SQUARE,
                    _MEAN_LAST,
                    helper.make_node("Sqrt", ["ms"], ["root"]),
                    helper.make_node("Add", ["root", "eps"], ["rms"]),
                    helper.make_node("Div", ["X", "rms"], ["Y"]),
                ]
            ),
            "after the square root",
        ),
        (
            _rms_function(
                [
                    _epsilon_from_attribute(),
                    _axes(),
                    _SQUARE,
                    _MEAN_LAST,
                    helper.make_node("Add", ["ms", "eps"], ["rms"]),
                    helper.make_node("Div", ["X", "rms"], ["Y"]),
                ]
            ),
            "square root is missing",
        ),
        (
            _rms_function(
                [
                    _epsilon_from_attribute(),
                    _axes(),
                    _SQUARE,
                    helper.make_node("ReduceMean", ["square", "axes"], ["ms"], keepdims=0),
                    *_ADD_SQRT_DIV,
                ]
            ),
            "keepdims=1",
        ),
        (_rms_function([_epsilon_from_attribute(), _axes(), _SQUARE, _MEAN_LAST, *_ADD_SQRT_DIV], attributes=()), "no attribute 'epsilon'"),
        (  # the attribute declared, but the first case's epsilon hard-coded: right at (4, 8) only
            _rms_function([_axes(), _SQUARE, _MEAN_LAST, helper.make_node("Constant", [], ["eps"], value_float=0.5), *_ADD_SQRT_DIV]),
            "hard-coded",
        ),
        ("x / sqrt(mean(x**2) + eps)", "expected an onnx.FunctionProto"),
    ],
)
def test_q3_names_each_mistake(wrong, named):
    outcome = q3.evaluate(wrong)
    assert outcome.status == INCORRECT
    assert named in outcome.message
