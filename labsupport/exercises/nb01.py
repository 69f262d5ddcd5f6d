"""Exercises of notebook 01 (ONNX graphs by hand).

q1 builds ``softmax(x @ W)`` with a dynamic batch from a spec, q2 repairs a broken model so that
the checker passes and the numbers are right, q3 reads a given model programmatically (per node, which
``summarize`` does not print), q4 builds a graph the notebook has not shown (row normalization) by hand.
The checkers run the learner's model with ONNX Runtime and compare it with numpy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from labsupport.course.compare import softmax
from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer, onnx_session, whole_number
from labsupport.models.contract import IR_VERSION, OPSET
from labsupport.models.graph_mlp import mlp


def _rng() -> np.random.Generator:
    return np.random.default_rng(101)


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


def _reads_initializers(model: onnx.ModelProto) -> list[tuple[str, int]]:
    """``(op_type, numbers in the initializers it reads)`` for each node that reads one, in graph order."""
    sizes = {tensor.name: int(np.prod(tensor.dims)) for tensor in model.graph.initializer}
    return [
        (node.op_type, sum(sizes[name] for name in node.input if name in sizes))
        for node in model.graph.node
        if any(name in sizes for name in node.input)
    ]


def _as_pairs(answer: object) -> list[tuple[str, int]]:
    """The answer as a list of ``(op_type, count)``, or ``Incorrect`` saying what shape was expected."""
    expected = "expected a list of (op_type, parameters) pairs, one per node that reads an initializer, in graph order"
    if isinstance(answer, (str, bytes, dict)) or not isinstance(answer, Sequence):
        raise Incorrect(f"{expected}; got {type(answer).__name__}")
    pairs = []
    for item in answer:
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 2 or not isinstance(item[0], str):
            raise Incorrect(f"{expected}; the item {item!r} is not an (op_type, parameters) pair")
        pairs.append((item[0], whole_number(item[1], f"parameters of the {item[0]} node")))
    return pairs


def _check_q3(answer: object) -> str:
    pairs = _as_pairs(answer)
    model = mystery_model()
    truth = _reads_initializers(model)
    if pairs == truth:
        return f"{len(truth)} nodes read initializers; the Gemm reads {dict(truth)['Gemm']:,} numbers (weight and bias)"
    if len(pairs) == len(model.graph.node):
        raise Incorrect(f"you listed all {len(pairs)} nodes; list only the nodes that read an initializer (a Relu reads none)")
    if sorted(pairs) == sorted(truth):
        raise Incorrect("the right pairs in another order: list them in graph order (the order of model.graph.node)")
    if [op for op, _ in pairs] != [op for op, _ in truth]:
        raise Incorrect(f"the op types, in order, should be {[op for op, _ in truth]}; you gave {[op for op, _ in pairs]}")
    for (op, got), (_, want) in zip(pairs, truth, strict=True):
        if got == want:
            continue
        if got == 4 * want:
            raise Incorrect(f"{got} for the {op} node is its size in bytes (4 per float32); count the numbers")
        if op == "Gemm" and got < want:
            raise Incorrect(f"{got} for the Gemm node counts only part of what it reads: it reads its weight and its bias")
        raise Incorrect(f"{got} is not the number of parameters the {op} node reads (the product of each initializer's dims)")
    raise Incorrect("the pairs do not describe mystery_model()")


# q4: a graph the notebook has not built: normalize each row (layer normalization without scale and shift)
Q4_FEATURES = 8
Q4_EPSILON = 1e-5
_FUSED_NORMS = {"LayerNormalization", "MeanVarianceNormalization", "GroupNormalization", "InstanceNormalization"}


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """``(x - mean) / sqrt(var + 1e-5)`` over the last axis: what q4's model must compute."""
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + Q4_EPSILON)


def _q4_inputs(batch: int) -> np.ndarray:
    """Random rows, then a row of variance 1e-4 (where the epsilon's place shows) and a constant row (variance 0)."""
    x = (_rng().standard_normal((batch, Q4_FEATURES)) * 3 + 2).astype(np.float32)
    if batch > 1:
        x[-2] = 1.5 + 0.01 * np.resize([1.0, -1.0], Q4_FEATURES)
    x[-1] = 1.5
    return x


def _check_q4(answer: object) -> str:
    model = _as_model(answer, "the row-normalization model")
    _full_check(model)
    if fused := sorted({node.op_type for node in model.graph.node} & _FUSED_NORMS):
        raise Incorrect(f"build it from elementary operators (ReduceMean, Sub, Mul, Add, Sqrt, Div), not {fused[0]}")
    _single_input(model, "x", Q4_FEATURES)
    if [v.name for v in model.graph.output] != ["y"]:
        raise Incorrect(f"the model must have one output named 'y', it has {[v.name for v in model.graph.output]}")
    _dynamic_batch_output(model, "y")
    session = _runtime_session(model)
    dropped = any(a.name == "keepdims" and a.i == 0 for node in model.graph.node for a in node.attribute)
    why = " (keepdims=0 on a Reduce node drops the axis that x - mean needs to broadcast)" if dropped else ""
    for batch in (1, 5):
        x = _q4_inputs(batch)
        with blame_answer(f"ONNX Runtime fails on a batch of {batch}{why}"):
            (y,) = session.run(["y"], {"x": x})
        _compare_q4(x, np.asarray(y))
    return "(x - mean) / sqrt(var + 1e-5) per row, at batch 1 and 5: ONNX Runtime and numpy agree"


def _compare_q4(x: np.ndarray, y: np.ndarray) -> None:
    if y.shape != x.shape:
        raise Incorrect(f"for x of shape {x.shape} y must have the same shape, got {y.shape} (keepdims=1 keeps the row axis)")
    if not np.isfinite(y).all():
        raise Incorrect("a constant row (variance 0) gives NaN or inf: add the epsilon 1e-5 to the variance before Sqrt")
    if np.allclose(y, normalize_rows(x), atol=1e-4):
        return
    if len(x) > 1 and np.allclose(y, _normalize_columns(x), atol=1e-4):
        raise Incorrect("y is normalized over the batch axis (0); normalize each row, over the last axis (-1)")
    if np.allclose(y, x - x.mean(axis=-1, keepdims=True), atol=1e-4):
        raise Incorrect("y is x minus its row mean, not divided by sqrt(var + 1e-5)")
    centered = x - x.mean(axis=-1, keepdims=True)
    std = np.sqrt((centered**2).mean(axis=-1, keepdims=True))
    if np.allclose(y, centered / (std + Q4_EPSILON), atol=1e-4):
        raise Incorrect("the epsilon is added to the square root; add it to the variance, inside the Sqrt")
    if np.allclose(y, centered / np.sqrt((x**2).mean(axis=-1, keepdims=True) + Q4_EPSILON), atol=1e-4):
        raise Incorrect("the variance is the mean of (x - mean)**2, not of x**2")
    raise Incorrect("y is not (x - mean) / sqrt(var + 1e-5) over the last axis (var is the mean of (x - mean)**2)")


def _normalize_columns(x: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=0, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=0, keepdims=True) + Q4_EPSILON)


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
        "Make a dict {initializer name: number of elements} from model.graph.initializer (math.prod(t.dims)), then walk "
        "model.graph.node in order and, for each node with an input in that dict, sum the sizes of those inputs."
    ),
    solution_code="""
        import math
        from labsupport.exercises.nb01 import mystery_model

        model = mystery_model()
        sizes = {t.name: math.prod(t.dims) for t in model.graph.initializer}
        answer = [
            (node.op_type, sum(sizes[name] for name in node.input if name in sizes))
            for node in model.graph.node
            if any(name in sizes for name in node.input)
        ]
    """,
)

q4 = Exercise(
    4,
    "normalize each row, by hand",
    _check_q4,
    hint=(
        "Five kinds of node: ReduceMean(x, axes) with keepdims=1 (opset 18 on: axes is an input, an int64 initializer "
        "[-1]), Sub, Mul (the square), ReduceMean again, Add the epsilon, Sqrt, Div. Scalars such as 1e-5 are float32 "
        "initializers of shape []."
    ),
    solution_code=f"""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper

        graph = helper.make_graph(
            [
                helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=1),
                helper.make_node("Sub", ["x", "mean"], ["centered"]),
                helper.make_node("Mul", ["centered", "centered"], ["squared"]),
                helper.make_node("ReduceMean", ["squared", "axes"], ["var"], keepdims=1),
                helper.make_node("Add", ["var", "eps"], ["var_eps"]),
                helper.make_node("Sqrt", ["var_eps"], ["std"]),
                helper.make_node("Div", ["centered", "std"], ["y"]),
            ],
            "normalize_rows",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
            [
                numpy_helper.from_array(np.array([-1], np.int64), "axes"),
                numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
            ],
        )
        answer = helper.make_model(graph, opset_imports=[helper.make_opsetid("", {OPSET})], ir_version={IR_VERSION})
    """,
)

EXERCISES: list[Exercise] = [q1, q2, q3, q4]
