"""Exercises of notebook 07 (graph optimization)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

from labsupport.compare import compare
from labsupport.exercises import Exercise, Incorrect
from labsupport.optimize import conv_bn_relu_model, make_session, op_counts, op_diff, optimize_to_file


def _random_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else 2 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.normal(size=dims).astype(np.float32)
    return feeds


def _check_foldable(model) -> str:
    if not isinstance(model, onnx.ModelProto):
        raise Incorrect(f"expected an onnx.ModelProto, got {type(model).__name__}")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as error:
        raise Incorrect(f"the checker rejects the model: {str(error).splitlines()[0]}") from None
    if len(model.graph.node) < 3:
        raise Incorrect(f"your graph has {len(model.graph.node)} node(s); build one with at least 3 so that folding has work to do")
    if not model.graph.input:
        raise Incorrect("the graph needs an input: a graph of constants only is not a model")
    with tempfile.TemporaryDirectory() as folder:
        folded = onnx.load(optimize_to_file(model, "basic", Path(folder) / "folded.onnx"))
    if len(folded.graph.node) != 1:
        raise Incorrect(f"after ORT's BASIC level {len(folded.graph.node)} nodes remain ({dict(op_counts(folded))}); "
                        "only the node that touches the input should be left: make everything else depend on initializers only")
    feeds = _random_feeds(model)
    compare(make_session(model, "disable_all").run(None, feeds)[0], make_session(folded, "disable_all").run(None, feeds)[0], name="folded")
    return f"{len(model.graph.node)} nodes fold into one {folded.graph.node[0].op_type}"


def _check_removed_ops(removed_ops) -> str:
    if not callable(removed_ops):
        raise Incorrect(f"expected a function removed_ops(model, level) -> dict, got {type(removed_ops).__name__}")
    model = conv_bn_relu_model(blocks=2, channels=4, size=8)
    with tempfile.TemporaryDirectory() as folder:
        for level in ("basic", "extended"):
            optimized = optimize_to_file(model, level, Path(folder) / f"{level}.onnx")
            truth = {row["op"]: -row["change"] for row in op_diff(model, optimized) if row["change"] < 0}
            got = removed_ops(model, level)
            if not isinstance(got, dict):
                raise Incorrect(f"removed_ops must return a dict {{op type: count}}, got {type(got).__name__}")
            got = {op: int(count) for op, count in got.items() if count}
            if got != truth:
                raise Incorrect(f"at level {level!r} the optimizer removed {truth}, your function says {got}")
    return "removed ops counted right at BASIC and EXTENDED"


def _check_offline(optimize_offline) -> str:
    if not callable(optimize_offline):
        raise Incorrect(f"expected a function optimize_offline(source_path, target_path) -> path, got {type(optimize_offline).__name__}")
    model = conv_bn_relu_model(blocks=2, channels=4, size=8)
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "model.onnx", Path(folder) / "optimized.onnx"
        onnx.save(model, source)
        optimize_offline(source, target)
        if not target.is_file():
            raise Incorrect("nothing was written to the target path (hint: SessionOptions.optimized_model_filepath)")
        counts = op_counts(target)
        hardware_specific = [op for op in counts if op.startswith("com.microsoft.nchwc")]
        if hardware_specific:
            raise Incorrect(f"the saved model holds layout ops tied to this CPU ({', '.join(hardware_specific)}): "
                            "a file to ship must be optimized at a level below LAYOUT")
        if "com.microsoft:FusedConv" not in counts:
            raise Incorrect(f"the saved model has no FusedConv ({dict(counts)}): the fusions of the EXTENDED level are missing")
        feeds = _random_feeds(model)
        compare(make_session(model, "disable_all").run(None, feeds)[0],
                make_session(target, "disable_all").run(None, feeds)[0], name="offline-optimized", atol=1e-4)
    return "a portable pre-optimized model that loads with optimizations disabled"


q1 = Exercise(
    1, "a graph that folds to one node", _check_foldable,
    hint="Start from initializers (say W and a scale), transform them with nodes that read only initializers "
         "(Transpose, Mul, Add ...), and use the result once with the graph input (e.g. MatMul(x, result)).",
    solution_code="""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper

        W = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "W")
        half = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")
        nodes = [
            helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
            helper.make_node("Mul", ["Wt", "half"], ["Ws"]),
            helper.make_node("MatMul", ["x", "Ws"], ["y"]),
        ]
        graph = helper.make_graph(
            nodes, "foldable",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
            [W, half],
        )
        answer = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    """,
)

q2 = Exercise(
    2, "count what the optimizer removed", _check_removed_ops,
    hint="Save the optimized model with labsupport.optimize.optimize_to_file (or SessionOptions.optimized_model_filepath), "
         "count op types before and after (op_counts), and keep the ops whose count went down, with how much.",
    solution_code="""
        import tempfile
        from pathlib import Path

        from labsupport.optimize import op_counts, optimize_to_file

        def answer(model, level):
            with tempfile.TemporaryDirectory() as folder:
                after = op_counts(optimize_to_file(model, level, Path(folder) / "optimized.onnx"))
            before = op_counts(model)
            return {op: before[op] - after[op] for op in before if before[op] > after[op]}
    """,
)

q3 = Exercise(
    3, "a portable pre-optimized model", _check_offline,
    hint="Create an InferenceSession with SessionOptions whose graph_optimization_level is ORT_ENABLE_EXTENDED and "
         "whose optimized_model_filepath is the target: creating the session writes the file.",
    solution_code="""
        import onnxruntime as ort

        def answer(source_path, target_path):
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            options.optimized_model_filepath = str(target_path)
            ort.InferenceSession(str(source_path), options, providers=["CPUExecutionProvider"])
            return target_path
    """,
)

EXERCISES = [q1, q2, q3]
