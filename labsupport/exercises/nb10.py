"""Exercises of notebook 10 (custom operators)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer, expect_close, onnx_session
from labsupport.models.contract import IR_VERSION, OPSET

DOMAIN_CUSTOM = "course.custom"
DOMAIN_FUNCTIONS = "course.fn"
# small and large values of both signs (a body right only on [-2, 3] must fail), then a random batch
_EDGES = np.array([[-1e3, -10.0, -2.0, -0.5, 0.0, 0.25], [0.5, 1.0, 3.0, 7.5, 10.0, 1e3]], dtype=np.float32)
_INPUT = np.concatenate([_EDGES, np.random.default_rng(10).normal(0, 20, size=(6, 6)).astype(np.float32)])
_INPUT.setflags(write=False)  # the learner's op gets a copy: an in-place answer cannot change what later checks feed


def squared_relu(x: np.ndarray) -> np.ndarray:
    """The exercises' op: relu(x) squared (the activation of the Primer transformer)."""
    return np.square(np.maximum(x, 0)).astype(x.dtype)


def _single_node_model(domain: str, functions: list[onnx.FunctionProto] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("SquaredRelu", ["x"], ["y"], domain=domain)],
        "squared_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])],
    )
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(domain, 1)]
    return helper.make_model(graph, opset_imports=opsets, functions=list(functions), ir_version=IR_VERSION)


def _check_reference_op(op_class) -> str:
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    if not (isinstance(op_class, type) and issubclass(op_class, OpRun)):
        raise Incorrect(f"expected a class deriving from onnx.reference.op_run.OpRun, got {op_class!r}")
    if op_class.__name__ != "SquaredRelu" or getattr(op_class, "op_domain", "") != DOMAIN_CUSTOM:
        raise Incorrect(
            f"the class must be named SquaredRelu with op_domain = {DOMAIN_CUSTOM!r} "
            f"(got {op_class.__name__} in {getattr(op_class, 'op_domain', '')!r})"
        )
    with blame_answer("the reference evaluator cannot run your op"):
        result = np.asarray(ReferenceEvaluator(_single_node_model(DOMAIN_CUSTOM), new_ops=[op_class]).run(None, {"x": _INPUT.copy()})[0])
    if result.dtype != np.float32:
        raise Incorrect(f"the output must keep the input's dtype float32, got {result.dtype}")
    expect_close(squared_relu(_INPUT), result, what="SquaredRelu's outputs", atol=1e-6)
    return "the reference evaluator runs your op and matches numpy"


def _check_function(function) -> str:
    if hasattr(function, "to_function_proto"):
        raise Incorrect("that is an onnxscript function: give its FunctionProto, `answer = SquaredRelu.to_function_proto()`")
    if not isinstance(function, onnx.FunctionProto):
        raise Incorrect(f"expected an onnx.FunctionProto, got {type(function).__name__}")
    if function.name != "SquaredRelu" or function.domain != DOMAIN_FUNCTIONS:
        raise Incorrect(f"the function must be SquaredRelu in domain {DOMAIN_FUNCTIONS!r}, got {function.name} in {function.domain!r}")
    if len(function.input) != 1 or len(function.output) != 1:
        raise Incorrect(f"SquaredRelu takes one input and gives one output, got {len(function.input)} and {len(function.output)}")
    if any(node.domain not in ("", "ai.onnx") for node in function.node):
        raise Incorrect("the body must use standard ONNX ops only (no custom domain inside)")
    standard = {opset.domain for opset in function.opset_import} & {"", "ai.onnx"}
    if not standard:
        raise Incorrect(f"the function imports no standard opset: give it opset_imports=[helper.make_opsetid('', {OPSET})]")
    if standard == {"ai.onnx"}:
        raise Incorrect(
            f"import the standard opset as domain '' (helper.make_opsetid('', {OPSET})): ONNX's checker rejects 'ai.onnx' there"
        )
    model = _single_node_model(DOMAIN_FUNCTIONS, [function])
    with blame_answer("a model using your function fails the checker"):
        onnx.checker.check_model(model, full_check=True)
    session = onnx_session(model)
    with blame_answer("ONNX Runtime cannot run your function"):
        result = session.run(None, {"x": _INPUT.copy()})[0]
    expect_close(squared_relu(_INPUT), result, what="SquaredRelu's outputs in ONNX Runtime", atol=1e-6)
    return f"ONNX Runtime runs your function ({', '.join(node.op_type for node in function.node)})"


q1 = Exercise(
    1,
    "a custom op for the reference evaluator",
    _check_reference_op,
    hint="Subclass OpRun, set op_domain = 'course.custom', name the class SquaredRelu, and return a tuple from "
    "_run(self, x): (result.astype(x.dtype),).",
    solution_code="""
        import numpy as np
        from onnx.reference.op_run import OpRun

        class SquaredRelu(OpRun):
            op_domain = "course.custom"

            def _run(self, x):
                return (np.square(np.maximum(x, 0)).astype(x.dtype),)

        answer = SquaredRelu
    """,
)

q2 = Exercise(
    2,
    "the same op as a function of standard ops",
    _check_function,
    hint=f"onnx.helper.make_function('course.fn', 'SquaredRelu', ['x'], ['y'], nodes, opset_imports=[make_opsetid('', {OPSET})]) "
    "with nodes Relu then Mul(r, r).",
    solution_code=f"""
        from onnx import helper

        answer = helper.make_function(
            "course.fn", "SquaredRelu", ["x"], ["y"],
            [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "r"], ["y"])],
            opset_imports=[helper.make_opsetid("", {OPSET})],
        )
    """,
)

EXERCISES = [q1, q2]
