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

# exercise 3: RMS normalization over the last axis, checked at three ranks, each with its own epsilon on the node (a
# function that hard-codes one value fails the others); small values, so epsilon matters
_RMS_CASES = [((4, 8), 0.5), ((2, 3, 16), 2.0), ((7,), 0.125)]


def rms_norm(x: np.ndarray, epsilon: float) -> np.ndarray:
    """x / sqrt(mean(x², last axis) + epsilon), float32 (RMSNorm without its learned scale)."""
    mean_square = np.mean(np.square(x.astype(np.float64)), axis=-1, keepdims=True)
    return (x / np.sqrt(mean_square + epsilon)).astype(x.dtype)


def _rms_mistakes(x: np.ndarray, epsilon: float) -> dict[str, np.ndarray]:
    """What the common wrong bodies compute, each named by the mistake."""
    square = np.square(x.astype(np.float64))
    last = np.mean(square, axis=-1, keepdims=True)
    return {
        "the mean runs over every axis: reduce the last axis only (axes [-1]) and keep it (keepdims=1)": x
        / np.sqrt(np.mean(square) + epsilon),
        "the mean runs over the first axis: reduce axes [-1], the features of each row": x
        / np.sqrt(np.mean(square, axis=0, keepdims=True) + epsilon),
        "epsilon is ignored: read it from the node's attribute (a Constant with ref_attr_name='epsilon')": x / np.sqrt(last),
        "epsilon is added after the square root: add it to the mean square, then take Sqrt": x / (np.sqrt(last) + epsilon),
        "the square root is missing: divide by Sqrt(mean square + epsilon)": x / (last + epsilon),
    }


def _rms_model(function: onnx.FunctionProto, shape: tuple[int, ...], epsilon: float) -> onnx.ModelProto:
    node = helper.make_node("RmsNorm", ["x"], ["y"], domain=DOMAIN_FUNCTIONS, epsilon=epsilon)
    graph = helper.make_graph(
        [node],
        "rms_norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
    )
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN_FUNCTIONS, 1)]
    return helper.make_model(graph, opset_imports=opsets, functions=[function], ir_version=IR_VERSION)


def _rms_function_proto(function) -> onnx.FunctionProto:
    if hasattr(function, "to_function_proto"):
        function = function.to_function_proto()  # an onnxscript @script function is fine too
    if not isinstance(function, onnx.FunctionProto):
        raise Incorrect(f"expected an onnx.FunctionProto (or an onnxscript function), got {type(function).__name__}")
    if function.name != "RmsNorm" or function.domain != DOMAIN_FUNCTIONS:
        raise Incorrect(f"the function must be RmsNorm in domain {DOMAIN_FUNCTIONS!r}, got {function.name} in {function.domain!r}")
    if len(function.input) != 1 or len(function.output) != 1:
        raise Incorrect(f"RmsNorm takes one input and gives one output, got {len(function.input)} and {len(function.output)}")
    if "epsilon" not in [*function.attribute, *(a.name for a in function.attribute_proto)]:
        raise Incorrect("the function declares no attribute 'epsilon': give make_function attributes=['epsilon']")
    if any(node.domain not in ("", "ai.onnx") for node in function.node):
        raise Incorrect("the body must use standard ONNX ops only (no custom domain inside)")
    return function


def _dropped_axis_hint(function: onnx.FunctionProto) -> str:
    """A pointer to keepdims when a reduction in the body drops its axis (the usual cause of a broadcast failure here)."""
    dropped = any(
        node.op_type.startswith("Reduce") and any(a.name == "keepdims" and a.i == 0 for a in node.attribute) for node in function.node
    )
    return (
        " (a Reduce node has keepdims=0, so the mean square loses its axis and cannot broadcast against x: keepdims=1)" if dropped else ""
    )


def _check_rms_function(function) -> str:
    function = _rms_function_proto(function)
    rng = np.random.default_rng(35)
    for shape, epsilon in _RMS_CASES:
        model = _rms_model(function, shape, epsilon)
        with blame_answer(f"a model using your function at shape {shape} fails the checker{_dropped_axis_hint(function)}"):
            onnx.checker.check_model(model, full_check=True)
        session = onnx_session(model)
        x = rng.normal(0, 0.5, size=shape).astype(np.float32)
        with blame_answer(f"ONNX Runtime cannot run your function at shape {shape}"):
            result = np.asarray(session.run(None, {"x": x.copy()})[0])
        if result.shape != x.shape:
            raise Incorrect(f"at shape {shape} the output has shape {result.shape}: keep the reduced axis (keepdims=1)")
        want = rms_norm(x, epsilon)
        if not np.allclose(result, want, atol=1e-5, rtol=1e-4):
            _name_rms_mistake(result, x, shape, epsilon)
        expect_close(want, result, what=f"RmsNorm's outputs at shape {shape} (epsilon={epsilon})", atol=1e-5)
    cases = ", ".join(f"{shape} with epsilon={epsilon}" for shape, epsilon in _RMS_CASES)
    return f"ONNX Runtime runs your RmsNorm at shapes {cases}, and it matches numpy"


def _name_rms_mistake(result: np.ndarray, x: np.ndarray, shape: tuple[int, ...], epsilon: float) -> None:
    """Raise Incorrect naming the mistake when a wrong ``result`` matches one; return when none matches."""
    for mistake, wrong in _rms_mistakes(x, epsilon).items():
        if np.allclose(result, wrong, atol=1e-5, rtol=1e-4):
            raise Incorrect(f"at shape {shape}, {mistake}")
    for _, other in _RMS_CASES:
        if other != epsilon and np.allclose(result, rms_norm(x, other), atol=1e-5, rtol=1e-4):
            raise Incorrect(
                f"at shape {shape} the node sets epsilon={epsilon} but your function used {other}: it is hard-coded; "
                "read it from the node's attribute (a Constant with ref_attr_name='epsilon')"
            )


q3 = Exercise(
    3,
    "transfer: RMS normalization as a function with an attribute",
    _check_rms_function,
    hint="The body: Mul(X, X), ReduceMean over the last axis (since opset 18 the axes are an input: an int64 tensor [-1]; "
    "keep the axis), Add the epsilon, Sqrt, Div. Read epsilon the way the recipe reads cap: a Constant node whose "
    "value_float attribute has ref_attr_name='epsilon', and declare it with make_function(..., attributes=['epsilon']).",
    solution_code=f"""
        import onnx
        from onnx import helper

        epsilon = helper.make_node("Constant", [], ["eps"])
        epsilon.attribute.append(onnx.AttributeProto(name="value_float", ref_attr_name="epsilon", type=onnx.AttributeProto.FLOAT))
        last_axis = helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("axes", onnx.TensorProto.INT64, [1], [-1]))
        answer = helper.make_function(
            "course.fn", "RmsNorm", ["X"], ["Y"],
            [
                epsilon,
                last_axis,
                helper.make_node("Mul", ["X", "X"], ["square"]),
                helper.make_node("ReduceMean", ["square", "axes"], ["mean_square"], keepdims=1),
                helper.make_node("Add", ["mean_square", "eps"], ["shifted"]),
                helper.make_node("Sqrt", ["shifted"], ["rms"]),
                helper.make_node("Div", ["X", "rms"], ["Y"]),
            ],
            opset_imports=[helper.make_opsetid("", {OPSET})],
            attributes=["epsilon"],
        )
    """,
)

EXERCISES = [q1, q2, q3]
