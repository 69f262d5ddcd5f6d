"""Exercises of notebook 01 (ONNX graphs by hand).

q1 builds ``softmax(x @ W)`` with a dynamic batch from a spec, q2 repairs a broken model so that
the checker passes and the numbers are right, q3 reads a given model programmatically.
The checkers run the learner's model with ONNX Runtime and compare it with numpy.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from labsupport.exercises import Exercise, Incorrect

OPSET = 21
IR_VERSION = 10


def _rng() -> np.random.Generator:
    return np.random.default_rng(101)


# q1: the weights the learner must use (6 features -> 4 classes)
Q1_WEIGHT = _rng().standard_normal((6, 4)).astype(np.float32).round(2)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _as_model(answer: object, what: str) -> onnx.ModelProto:
    if not isinstance(answer, onnx.ModelProto):
        raise Incorrect(f"expected {what} as an onnx.ModelProto (what onnx.helper.make_model returns), got {type(answer).__name__}")
    return answer


def _one_line(error: Exception, limit: int = 300) -> str:
    text = str(error).split("==> Context")[0]
    return " ".join(text.split())[:limit]


def _full_check(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as error:  # ValidationError or InferenceError
        raise Incorrect(f"onnx.checker.check_model(model, full_check=True) fails: {_one_line(error)}") from None


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    try:
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:
        raise Incorrect(f"ONNX Runtime cannot load the model: {_one_line(error)}") from None


def _single_input(model: onnx.ModelProto, name: str, features: int) -> None:
    inits = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    if [v.name for v in inputs] != [name]:
        raise Incorrect(f"the model must have exactly one input named {name!r}, it has {[v.name for v in inputs]}")
    tensor = inputs[0].type.tensor_type
    if tensor.elem_type != TensorProto.FLOAT:
        raise Incorrect(f"input {name!r} must be float32 (TensorProto.FLOAT)")
    dims = tensor.shape.dim
    if len(dims) != 2:
        raise Incorrect(f"input {name!r} must be 2-D [batch, {features}], it has {len(dims)} dimensions")
    if dims[0].HasField("dim_value"):
        raise Incorrect(
            f"the batch dimension of {name!r} is fixed to {dims[0].dim_value}; make it symbolic, e.g. \"batch\""
        )
    if dims[1].dim_value != features:
        raise Incorrect(f"the second dimension of {name!r} must be {features}")


def _check_q1(answer: object) -> str:
    model = _as_model(answer, "the softmax(x @ W) model")
    _full_check(model)
    _single_input(model, "x", 6)
    outputs = [v.name for v in model.graph.output]
    if outputs != ["probs"]:
        raise Incorrect(f"the model must have one output named 'probs', it has {outputs}")
    session = _session(model)
    for batch in (1, 5):
        x = _rng().standard_normal((batch, 6)).astype(np.float32)
        (probs,) = session.run(["probs"], {"x": x})
        if probs.shape != (batch, 4):
            raise Incorrect(f"for a batch of {batch} the output must have shape ({batch}, 4), got {probs.shape}")
        if np.allclose(probs, x @ Q1_WEIGHT, atol=1e-4):
            raise Incorrect("the output equals x @ W: the Softmax node is missing")
        if not np.allclose(probs, _softmax(x @ Q1_WEIGHT), atol=1e-5):
            raise Incorrect("the output is not softmax(x @ Q1_WEIGHT) over the last axis (check W and the Softmax axis)")
    return "softmax(x @ W) with a dynamic batch: checker, ONNX Runtime and numpy agree"


# q2: a broken model (a dense layer with Gemm) to repair
Q2_WEIGHT = _rng().standard_normal((3, 5)).astype(np.float32).round(2)  # (out, in): Gemm uses transB=1
Q2_BIAS = np.array([0.5, -0.5, 0.25], dtype=np.float32)


def broken_model() -> onnx.ModelProto:
    """A dense layer ``relu(x @ W.T + b)`` with two bugs: a misspelled attribute and a dangling edge."""
    nodes = [
        helper.make_node("Gemm", ["x", "W", "b"], ["dense"], name="dense", transb=1),
        helper.make_node("Relu", ["dense_out"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "broken_dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(Q2_WEIGHT, "W"), numpy_helper.from_array(Q2_BIAS, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _check_q2(answer: object) -> str:
    model = _as_model(answer, "the repaired model")
    _full_check(model)
    _single_input(model, "x", 5)
    session = _session(model)
    outputs = [o.name for o in session.get_outputs()]
    if outputs != ["y"]:
        raise Incorrect(f"keep the single output 'y'; the model has {outputs}")
    x = _rng().standard_normal((7, 5)).astype(np.float32)
    (y,) = session.run(["y"], {"x": x})
    expected = np.maximum(x @ Q2_WEIGHT.T + Q2_BIAS, 0)
    if y.shape != expected.shape:
        raise Incorrect(f"for x of shape (7, 5) y must have shape (7, 3), got {y.shape}")
    if np.allclose(y, x @ Q2_WEIGHT.T + Q2_BIAS, atol=1e-5) and not np.allclose(y, expected, atol=1e-5):
        raise Incorrect("y equals x @ W.T + b without the ReLU: keep the Relu node")
    if not np.allclose(y, expected, atol=1e-5):
        raise Incorrect("the model runs but y is not relu(x @ W.T + b): keep the weights and compute the same layer")
    return "the checker passes and y = relu(x @ W.T + b)"


# q3: read a model
def mystery_model() -> onnx.ModelProto:
    """A small multi-layer model whose structure the learner reads programmatically."""
    rng = _rng()
    sizes = [16, 32, 32, 24, 10]
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    current = "features"
    for layer, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = numpy_helper.from_array(rng.standard_normal((n_in, n_out)).astype(np.float32), f"layer{layer}.weight")
        b = numpy_helper.from_array(np.zeros(n_out, np.float32), f"layer{layer}.bias")
        inits += [w, b]
        if layer == 2:  # one layer written as Gemm, the others as MatMul + Add
            nodes.append(helper.make_node("Gemm", [current, w.name, b.name], [f"h{layer}"], name=f"layer{layer}"))
        else:
            nodes.append(helper.make_node("MatMul", [current, w.name], [f"mm{layer}"], name=f"layer{layer}.matmul"))
            nodes.append(helper.make_node("Add", [f"mm{layer}", b.name], [f"h{layer}"], name=f"layer{layer}.add"))
        current = f"h{layer}"
        if layer < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [current], [f"a{layer}"], name=f"layer{layer}.relu"))
            current = f"a{layer}"
    nodes.append(helper.make_node("MatMul", [current, "proj"], ["scores"], name="projection"))
    inits.append(numpy_helper.from_array(rng.standard_normal((10, 3)).astype(np.float32), "proj"))
    graph = helper.make_graph(
        nodes,
        "mystery",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _q3_truth() -> tuple[int, int]:
    model = mystery_model()
    matmuls = sum(node.op_type == "MatMul" for node in model.graph.node)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    return matmuls, params


def _check_q3(answer: object) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(f"expected a pair (number of MatMul nodes, number of parameters), got {answer!r}")
    matmuls, params = answer
    for value, what in ((matmuls, "number of MatMul nodes"), (params, "number of parameters")):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise Incorrect(f"the {what} must be a whole number, got {type(value).__name__}")
    true_matmuls, true_params = _q3_truth()
    model = mystery_model()
    if matmuls == len(model.graph.node):
        raise Incorrect(f"{matmuls} is the number of all nodes; count only those whose op_type is 'MatMul'")
    if matmuls == true_matmuls + 1:
        raise Incorrect("a Gemm node is not a MatMul node (even though it also multiplies matrices)")
    if matmuls != true_matmuls:
        raise Incorrect(f"{matmuls} is not the number of MatMul nodes")
    weights_only = sum(int(np.prod(t.dims)) for t in model.graph.initializer if "bias" not in t.name)
    if params == weights_only:
        raise Incorrect("that counts the weight matrices only; the biases are parameters too")
    if params == len(model.graph.initializer):
        raise Incorrect("that is the number of initializers; count the numbers inside them (product of dims)")
    if params != true_params:
        raise Incorrect(f"{params} is not the number of parameters (elements of all initializers)")
    return f"{true_matmuls} MatMul nodes and {true_params:,} parameters"


q1 = Exercise(
    1,
    "build softmax(x @ W) with a dynamic batch",
    _check_q1,
    hint=(
        "Two nodes: MatMul(x, W) -> logits, Softmax(logits, axis=-1) -> probs. W is an initializer made with "
        "numpy_helper.from_array(Q1_WEIGHT, 'W'). The input is make_tensor_value_info('x', TensorProto.FLOAT, "
        "['batch', 6]); pass opset_imports=[make_opsetid('', 21)] and ir_version=10 to make_model."
    ),
    solution_code="""
        from onnx import TensorProto, helper, numpy_helper
        from labsupport.exercises.nb01 import Q1_WEIGHT

        graph = helper.make_graph(
            [
                helper.make_node("MatMul", ["x", "W"], ["logits"]),
                helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
            ],
            "softmax_regression",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
            [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 4])],
            [numpy_helper.from_array(Q1_WEIGHT, "W")],
        )
        answer = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    """,
)

q2 = Exercise(
    2,
    "repair a broken model",
    _check_q2,
    hint=(
        "Run onnx.checker.check_model(model, full_check=True) and read the error; fix one thing at a time. "
        "Attribute names are case-sensitive (look at onnx.defs.get_schema('Gemm').attributes), and every node "
        "input must be the name of a graph input, an initializer or an earlier node's output."
    ),
    solution_code="""
        from onnx import helper
        from labsupport.exercises.nb01 import broken_model

        answer = broken_model()
        gemm, relu = answer.graph.node
        del gemm.attribute[:]
        gemm.attribute.append(helper.make_attribute("transB", 1))  # attribute names are case-sensitive
        relu.input[0] = gemm.output[0]  # connect the dangling edge
    """,
)

q3 = Exercise(
    3,
    "read a model programmatically",
    _check_q3,
    hint=(
        "Walk model.graph.node and count node.op_type == 'MatMul' (or use labsupport.graph.op_histogram). "
        "Parameters are the elements of every initializer: math.prod(t.dims) summed over model.graph.initializer."
    ),
    solution_code="""
        import math
        from labsupport.exercises.nb01 import mystery_model

        model = mystery_model()
        matmuls = sum(node.op_type == "MatMul" for node in model.graph.node)
        parameters = sum(math.prod(t.dims) for t in model.graph.initializer)
        answer = (matmuls, parameters)
    """,
)

EXERCISES: list[Exercise] = [q1, q2, q3]
