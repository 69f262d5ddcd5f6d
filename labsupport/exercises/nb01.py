"""Exercises of notebook 01 (ONNX graphs by hand), and ``mlp``, the layer-by-layer builder its section 10 uses.

q1 builds ``softmax(x @ W)`` with a dynamic batch from a spec, q2 repairs a broken model so that
the checker passes and the numbers are right, q3 reads a given model programmatically.
The checkers run the learner's model with ONNX Runtime and compare it with numpy.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from itertools import pairwise

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from labsupport.course.compare import softmax
from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer, expect_value, onnx_session, whole_number
from labsupport.models.contract import IR_VERSION, OPSET


def _rng() -> np.random.Generator:
    return np.random.default_rng(101)


def _dense_layer(index: int, source: str, n_in: int, n_out: int, rng: np.random.Generator, *, gemm: bool):
    """Nodes and weights of layer ``index`` (``fc{index}``): MatMul + Add, or one Gemm; its output is ``fc{index}.out``."""
    weight = numpy_helper.from_array(rng.standard_normal((n_in, n_out)).astype(np.float32), f"fc{index}.weight")
    bias = numpy_helper.from_array(np.zeros(n_out, np.float32), f"fc{index}.bias")
    out = f"fc{index}.out"
    if gemm:
        return [helper.make_node("Gemm", [source, weight.name, bias.name], [out], name=f"fc{index}.gemm")], [weight, bias]
    nodes = [
        helper.make_node("MatMul", [source, weight.name], [f"fc{index}.mm"], name=f"fc{index}.matmul"),
        helper.make_node("Add", [f"fc{index}.mm", bias.name], [out], name=f"fc{index}.add"),
    ]
    return nodes, [weight, bias]


def mlp(
    sizes: Sequence[int], *, name: str = "mlp", seed: int = 1, gemm_layers: Collection[int] = (), probabilities: bool = True
) -> onnx.ModelProto:
    """A multi-layer perceptron built node by node with a Python loop, as an exporter writes one (notebook 01, section 10).

    ``sizes`` are the widths from the input ``x`` to the output; every layer but the last is followed
    by a Relu; the layers listed in ``gemm_layers`` are one Gemm node instead of MatMul + Add. With
    ``probabilities`` the output ``probs`` is a Softmax of the last layer, else the output is the last
    layer's ``fc{N}.out``. Exercise 3's ``mystery_model`` is one of these.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = []
    current = "x"
    for index, (n_in, n_out) in enumerate(pairwise(sizes)):
        layer_nodes, layer_weights = _dense_layer(index, current, n_in, n_out, rng, gemm=index in gemm_layers)
        nodes += layer_nodes
        weights += layer_weights
        current = f"fc{index}.out"
        if index < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [current], [f"fc{index}.act"], name=f"fc{index}.relu"))
            current = f"fc{index}.act"
    if probabilities:
        nodes.append(helper.make_node("Softmax", [current], ["probs"], name="softmax", axis=-1))
        current = "probs"
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, ["batch", sizes[-1]])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


# q1: the weights the learner must use (6 features -> 4 classes)
Q1_WEIGHT = _rng().standard_normal((6, 4)).astype(np.float32).round(2)


def _as_model(answer: object, what: str) -> onnx.ModelProto:
    if not isinstance(answer, onnx.ModelProto):
        raise Incorrect(f"expected {what} as an onnx.ModelProto (what onnx.helper.make_model returns), got {type(answer).__name__}")
    return answer


def _full_check(model: onnx.ModelProto) -> None:
    with blame_answer("onnx.checker.check_model(model, full_check=True) fails"):
        onnx.checker.check_model(model, full_check=True)


VERSION_FIX = f"pass ir_version={IR_VERSION} and opset_imports=[helper.make_opsetid('', {OPSET})] to make_model"


def _runtime_session(model: onnx.ModelProto):
    """``onnx_session`` that, when ONNX Runtime refuses the IR version or the opset make_model stamped, says how to set them."""
    try:
        return onnx_session(model)
    except Incorrect as error:
        if reason := _version_refusal(str(error)):
            raise Incorrect(
                f"ONNX Runtime cannot load the model: {reason} make_model stamps the newest IR version and opset "
                f"this onnx knows: {VERSION_FIX}"
            ) from None
        raise


_VERSION_REFUSALS = re.compile(r"Unsupported model IR version: \d+, max supported IR version: \d+|Opset \d+ is under development[^.]*")


def _version_refusal(message: str) -> str | None:
    """The one sentence of ONNX Runtime's refusal that names the IR version or opset it does not load, else None."""
    found = _VERSION_REFUSALS.search(message)
    return f"{found.group()}." if found else None


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
        raise Incorrect(f'the batch dimension of {name!r} is fixed to {dims[0].dim_value}; make it symbolic, e.g. "batch"')
    if dims[1].dim_value != features:
        raise Incorrect(f"the second dimension of {name!r} must be {features}")


def _dynamic_batch_output(model: onnx.ModelProto, name: str) -> None:
    """``Incorrect`` when output ``name`` declares a fixed first dimension: ORT only logs the mismatch, a consumer trusts it."""
    dims = next(v for v in model.graph.output if v.name == name).type.tensor_type.shape.dim
    if dims and dims[0].HasField("dim_value"):
        declared = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
        raise Incorrect(
            f"the output {name!r} is declared {declared}, a batch fixed to {dims[0].dim_value}; give it the same "
            'symbolic batch as the input, e.g. ["batch", 4] (session.get_outputs() reports what you declare)'
        )


def _matmul_weights(model: onnx.ModelProto) -> list[np.ndarray]:
    """The constant right-hand operands of the graph's MatMul and Gemm nodes (Gemm's ``transB`` undone)."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    weights = []
    for node in model.graph.node:
        if node.op_type in {"MatMul", "Gemm"} and len(node.input) > 1 and node.input[1] in constants:
            transposed = any(a.name == "transB" and a.i for a in node.attribute) if node.op_type == "Gemm" else False
            weights.append(constants[node.input[1]].T if transposed else constants[node.input[1]])
    return weights


def _expect_weight(model: onnx.ModelProto, weight: np.ndarray) -> None:
    """``Incorrect`` unless the matrix product multiplies by ``weight`` unchanged (softmax hides a constant added to W)."""
    if not any(np.array_equal(found, weight) for found in _matmul_weights(model)):
        raise Incorrect(
            f"no MatMul or Gemm node multiplies by Q1_WEIGHT unchanged (shape {weight.shape}): store the given W as an "
            "initializer and multiply by it with a MatMul or Gemm node, which is where the checker reads the weight (the "
            "probabilities alone can agree, since softmax ignores a constant added to every logit of a row)"
        )


def _check_q1(answer: object) -> str:
    model = _as_model(answer, "the softmax(x @ W) model")
    _full_check(model)
    _single_input(model, "x", 6)
    outputs = [v.name for v in model.graph.output]
    if outputs != ["probs"]:
        raise Incorrect(f"the model must have one output named 'probs', it has {outputs}")
    _dynamic_batch_output(model, "probs")
    session = _runtime_session(model)
    for batch in (1, 5):
        x = _rng().standard_normal((batch, 6)).astype(np.float32)
        (probs,) = session.run(["probs"], {"x": x})
        if probs.shape != (batch, 4):
            raise Incorrect(f"for a batch of {batch} the output must have shape ({batch}, 4), got {probs.shape}")
        if np.allclose(probs, x @ Q1_WEIGHT, atol=1e-4):
            raise Incorrect("the output equals x @ W: the Softmax node is missing")
        if not np.allclose(probs, softmax(x @ Q1_WEIGHT), atol=1e-5):
            raise Incorrect("the output is not softmax(x @ Q1_WEIGHT) over the last axis (check W and the Softmax axis)")
    _expect_weight(model, Q1_WEIGHT)
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
    session = _runtime_session(model)
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
    """A small multi-layer model (one layer written as Gemm) whose structure the learner reads programmatically."""
    return mlp([16, 32, 32, 24, 10, 3], name="mystery", seed=101, gemm_layers={2}, probabilities=False)


def _is_pair(answer: object) -> bool:
    """Whether ``answer`` is an ordered two-element sequence: a tuple, list or 1-D array (not a string or set)."""
    if isinstance(answer, np.ndarray):
        return answer.shape == (2,)
    return isinstance(answer, Sequence) and not isinstance(answer, (str, bytes)) and len(answer) == 2


def _check_q3(answer: object) -> str:
    if not _is_pair(answer):
        raise Incorrect(f"expected a pair (number of MatMul nodes, number of parameters), got {answer!r}")
    matmuls = whole_number(answer[0], "number of MatMul nodes")
    params = whole_number(answer[1], "number of parameters")
    model = mystery_model()
    true_matmuls = sum(node.op_type == "MatMul" for node in model.graph.node)
    sizes = {tensor.name: int(np.prod(tensor.dims)) for tensor in model.graph.initializer}
    true_params = sum(sizes.values())
    expect_value(
        matmuls,
        true_matmuls,
        mistakes=[
            (len(model.graph.node), f"{matmuls} is the number of all nodes; count only those whose op_type is 'MatMul'"),
            (true_matmuls + 1, "a Gemm node is not a MatMul node (even though it also multiplies matrices)"),
        ],
        wrong=f"{matmuls} is not the number of MatMul nodes",
    )
    expect_value(
        params,
        true_params,
        mistakes=[
            (
                sum(size for name, size in sizes.items() if "bias" not in name),
                "that counts the weight matrices only; the biases are parameters too",
            ),
            (len(sizes), "that is the number of initializers; count the numbers inside them (product of dims)"),
            (4 * true_params, "that is the size in bytes (4 per float32); count the numbers, not their bytes"),
        ],
        wrong=f"{params} is not the number of parameters (elements of all initializers)",
    )
    return f"{true_matmuls} MatMul nodes and {true_params:,} parameters"


q1 = Exercise(
    1,
    "build softmax(x @ W) with a dynamic batch",
    _check_q1,
    hint=(
        "Two nodes: MatMul(x, W) -> logits, Softmax(logits, axis=-1) -> probs. W is an initializer made with "
        "numpy_helper.from_array(Q1_WEIGHT, 'W'). The input is make_tensor_value_info('x', TensorProto.FLOAT, "
        f"['batch', 6]); pass opset_imports=[make_opsetid('', {OPSET})] and ir_version={IR_VERSION} to make_model."
    ),
    solution_code=f"""
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
        answer = helper.make_model(graph, opset_imports=[helper.make_opsetid("", {OPSET})], ir_version={IR_VERSION})
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
        "Walk model.graph.node and count node.op_type == 'MatMul' (or use labsupport.onnxutil.graph.op_histogram). "
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
