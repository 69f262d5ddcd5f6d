"""Exercises of notebook 07 (graph optimization)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, version_converter

from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer, error_summary, expect_close, whole_number
from labsupport.models.contract import IR_VERSION, OPSET
from labsupport.models.conv_bn_relu import conv_bn_relu_model
from labsupport.onnxutil.optimize import op_counts, op_diff, optimize_to_file
from labsupport.onnxutil.sessions import open_session


def _random_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Random inputs of each graph input's declared element type and shape (symbolic dimensions: 2)."""
    rng = np.random.default_rng(0)
    initializers = {tensor.name for tensor in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        except (KeyError, ValueError):
            raise Incorrect(f"input {value.name!r} has no numeric tensor type; declare one (e.g. TensorProto.FLOAT)") from None
        dims = [d.dim_value if d.HasField("dim_value") else 2 for d in tensor_type.shape.dim]
        if dtype == np.bool_:
            feeds[value.name] = rng.random(dims) < 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0 if np.issubdtype(dtype, np.unsignedinteger) else -3, 4, size=dims).astype(dtype)
        else:
            feeds[value.name] = rng.normal(size=dims).astype(dtype)
    return feeds


def _constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The graph's constants by name: initializers that no graph input overrides, and Constant nodes' tensors."""
    inputs = {value.name for value in model.graph.input}
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name not in inputs}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attribute in node.attribute:
                if attribute.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attribute.t)
    return values


def _nodes_reading_inputs(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes that compute from a graph input (directly or through other nodes); the others read constants only."""
    constant = {t.name for t in model.graph.initializer} - {value.name for value in model.graph.input}
    reading = []
    for node in model.graph.node:  # the checker has made sure they are in topological order
        if all(name in constant for name in node.input if name):
            constant.update(node.output)
        else:
            reading.append(node)
    return reading


def _computes_something_new(folded: onnx.ModelProto, original: dict[str, np.ndarray]) -> bool:
    """True when one of the folded graph's initializers is not a value the original graph already held (in any shape)."""
    known = [old.ravel() for old in original.values()]
    return any(
        not any(np.array_equal(value.ravel(), old) for old in known)
        for value in (numpy_helper.to_array(t) for t in folded.graph.initializer)
    )


def _run_unoptimized(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The first output of ``model`` on ``feeds``, with ONNX Runtime's graph optimizations off."""
    return open_session(model, optimization="disable").run(None, feeds)[0]


def _as_ort_reads_it(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """``model``, converted to the course's opset and IR version when ONNX Runtime refuses newer ones; and a note saying so.

    ``helper.make_model`` stamps the newest IR version and opset the installed onnx knows, which can be newer
    than what the installed ONNX Runtime reads: the model is right, only its version stamps are not.
    """
    try:
        open_session(model, optimization="disable")
        return model, ""
    except Exception as error:  # ORT raises several exception types for a model it refuses
        reason = error_summary(error)
    if "IR version" not in reason and "opset" not in reason:
        raise Incorrect(f"ONNX Runtime cannot load the model: {reason}")
    with blame_answer(f"ONNX Runtime refuses the model ({reason}), and it does not convert to opset {OPSET}"):
        converted = version_converter.convert_version(model, OPSET)
        converted.ir_version = IR_VERSION
        open_session(converted, optimization="disable")
    note = (
        f" (ONNX Runtime refused your model as built: {reason}. helper.make_model stamps the newest IR version and opset "
        f"onnx knows; the checker converted it to opset {OPSET}, IR version {IR_VERSION}. To run it yourself, pass "
        "opset_imports and ir_version to make_model as section 3 does)"
    )
    return converted, note


def _unused_nodes(model) -> list[str]:
    """Nodes none of whose outputs any node or graph output reads (a dead branch), as 'name (OpType)'."""
    read = {name for node in model.graph.node for name in node.input} | {value.name for value in model.graph.output}
    return [f"{node.name or '(unnamed)'} ({node.op_type})" for node in model.graph.node if not (set(node.output) - {""}) & read]


def _check_foldable(model) -> str:
    if not isinstance(model, onnx.ModelProto):
        raise Incorrect(f"expected an onnx.ModelProto, got {type(model).__name__}")
    unshaped = [value.name for value in model.graph.output if not value.type.tensor_type.HasField("shape")]
    if unshaped:
        raise Incorrect(
            f"the graph output(s) {', '.join(unshaped)} have no shape, and onnx.checker requires one: give make_tensor_value_info "
            "a shape, e.g. ['N', 3] with a named batch dimension"
        )
    with blame_answer("the checker rejects the model"):
        onnx.checker.check_model(model, full_check=True)
    model, note = _as_ort_reads_it(model)
    if len(model.graph.node) < 3:
        raise Incorrect(f"your graph has {len(model.graph.node)} node(s); build one with at least 3 so that folding has work to do")
    if not _random_feeds(model):
        raise Incorrect("the graph needs an input: a graph of constants only is not a model")
    overridable = sorted({value.name for value in model.graph.input} & {t.name for t in model.graph.initializer})
    if overridable:
        raise Incorrect(
            f"{', '.join(overridable)} "
            f"{'is an initializer and also a graph input' if len(overridable) == 1 else 'are initializers and also graph inputs'}: "
            "ORT treats such a weight as an input a caller may override and folds nothing that reads it; "
            "list only the real input(s) in make_graph's inputs"
        )
    reading = _nodes_reading_inputs(model)
    if len(reading) != 1:
        raise Incorrect(
            f"{len(reading)} nodes compute from the graph input; constant folding only removes nodes whose inputs "
            "are all constants (initializers), so exactly one node may touch the input"
        )
    unused = _unused_nodes(model)
    if unused:
        raise Incorrect(
            f"{', '.join(unused)}: no node and no graph output reads what they compute, so ORT drops them instead of folding "
            "them; feed the constant they compute into the node that reads the input"
        )
    with tempfile.TemporaryDirectory() as folder, blame_answer("ONNX Runtime cannot optimize the model"):
        folded = onnx.load(optimize_to_file(model, "basic", Path(folder) / "folded.onnx"))
    if op_counts(folded)["Cast"] > op_counts(model)["Cast"]:
        raise Incorrect(
            f"after ORT's BASIC level {len(folded.graph.node)} nodes remain ({dict(op_counts(folded))}): ORT added Cast nodes "
            "because its CPU provider computes some of your ops only in float32, and it does not fold those; "
            "build the constants in float32"
        )
    if len(folded.graph.node) != 1:
        raise Incorrect(
            f"after ORT's BASIC level {len(folded.graph.node)} nodes remain ({dict(op_counts(folded))}); "
            "use ops on the constants that ORT can fold (Transpose, Mul, Add, Reshape ...)"
        )
    if not _computes_something_new(folded, _constant_values(model)):
        raise Incorrect(
            "the folded graph holds only values your graph already had: the constant nodes computed nothing "
            "(Identity passes them on, Reshape only changes their shape); transform the constants, e.g. with Transpose or Mul"
        )
    feeds = _random_feeds(model)
    with blame_answer("ONNX Runtime cannot run the model"):
        before, after = (_run_unoptimized(graph, feeds) for graph in (model, folded))
    expect_close(before, after, what="the folded graph's outputs", atol=1e-4, rtol=1e-3)
    return f"{len(model.graph.node)} nodes fold into one {folded.graph.node[0].op_type} with a computed constant{note}"


def _identity_and_constants_model() -> onnx.ModelProto:
    """x -> Identity -> Identity -> MatMul with 0.5 * W.T: what a careless exporter leaves (Identity chain, constant math)."""
    weights = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "W")
    half = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")
    nodes = [
        helper.make_node("Identity", ["x"], ["x1"]),
        helper.make_node("Identity", ["x1"], ["x2"]),
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        helper.make_node("Mul", ["Wt", "half"], ["Ws"]),
        helper.make_node("MatMul", ["x2", "Ws"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "identity_and_constants",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [weights, half],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _unseen_models() -> list[tuple[str, onnx.ModelProto]]:
    """Models the notebook does not show: two conv stacks of random, different depths and an Identity/constant graph."""
    rng = np.random.default_rng()
    depths = sorted(int(d) for d in rng.choice(np.arange(1, 6), size=2, replace=False))
    stacks = [
        (
            f"a conv stack of {d} Conv-BatchNorm-Relu block(s)",
            conv_bn_relu_model(blocks=d, channels=4, size=8, seed=int(rng.integers(1000))),
        )
        for d in depths
    ]
    return [*stacks, ("a graph with an Identity chain and constant arithmetic", _identity_and_constants_model())]


def _removed_count_problem(got: dict[str, int], truth: dict[str, int]) -> str | None:
    """What is wrong with ``got`` compared to ``truth``, without revealing ``truth``; None when right."""
    negative = sorted(str(op) for op, count in got.items() if count < 0)
    if negative:
        return f"your dict gives {', '.join(negative)} a negative count: the optimizer added those nodes; keep only the ops it removed"
    extra = sorted(str(op) for op in got if op not in truth)
    if extra:
        return f"your dict names {', '.join(extra)}, whose count did not go down"
    wrong = sorted(op for op in got if got[op] != truth[op])
    if wrong:
        return f"the count for {', '.join(wrong)} is wrong (you said {', '.join(str(got[op]) for op in wrong)})"
    missing = len(truth.keys() - got.keys())
    if missing:
        return f"your dict misses {missing} op type(s) whose count went down"
    return None


def _check_removed_ops(removed_ops) -> str:
    if not callable(removed_ops):
        raise Incorrect(f"expected a function removed_ops(model, level) -> dict, got {type(removed_ops).__name__}")
    with tempfile.TemporaryDirectory() as folder:
        for description, model in _unseen_models():
            for level in ("basic", "extended"):
                optimized = optimize_to_file(model, level, Path(folder) / f"{level}.onnx")
                truth = {row["op"]: -row["change"] for row in op_diff(model, optimized) if row["change"] < 0}
                got = removed_ops(model, level)
                if not isinstance(got, dict):
                    raise Incorrect(f"removed_ops must return a dict {{op type: count}}, got {type(got).__name__}")
                counts = {op: whole_number(count, f"count for {op} (how many of its nodes were removed)") for op, count in got.items()}
                problem = _removed_count_problem({op: count for op, count in counts.items() if count}, truth)
                if problem:
                    raise Incorrect(f"at level {level!r} on {description}: {problem}")
    return "removed ops counted right on three models you had not seen, at BASIC and EXTENDED"


@contextlib.contextmanager
def _saved_levels():
    """Yield a dict {saved path: optimization level} of every ORT session created inside the block that saves its graph.

    It reads the SessionOptions each session is created with (whatever API opened it), so the verdict does not depend
    on what the level did on this CPU.
    """
    from onnxruntime.capi import onnxruntime_inference_collection as collection

    levels, create = {}, collection.C.InferenceSession

    def recording(options, *args):
        if options.optimized_model_filepath:
            levels[str(Path(options.optimized_model_filepath).resolve())] = options.graph_optimization_level
        return create(options, *args)

    collection.C.InferenceSession = recording
    try:
        yield levels
    finally:
        collection.C.InferenceSession = create


def _layout_only_ops(model: onnx.ModelProto, folder: Path) -> set[str]:
    """Op types that this CPU's ALL level puts into ``model`` and EXTENDED does not (NCHWc ops on x86; none where ALL adds nothing)."""
    extended, full = (op_counts(optimize_to_file(model, level, folder / f"checker_{level}.onnx")) for level in ("extended", "all"))
    return set(full) - set(extended)


def _check_offline(optimize_offline) -> str:
    import onnxruntime as ort

    if not callable(optimize_offline):
        raise Incorrect(f"expected a function optimize_offline(source_path, target_path) -> path, got {type(optimize_offline).__name__}")
    model = conv_bn_relu_model(blocks=2, channels=4, size=8)
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "model.onnx", Path(folder) / "optimized.onnx"
        onnx.save(model, source)
        with _saved_levels() as levels:
            returned = optimize_offline(str(source), str(target))  # str: SessionOptions.optimized_model_filepath takes no Path
        if not target.is_file():
            raise Incorrect("nothing was written to the target path (hint: SessionOptions.optimized_model_filepath)")
        level = levels.get(str(target.resolve()))
        if level is not None and int(level) > int(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED):
            raise Incorrect(
                f"the file was saved at {level.name}: at LAYOUT and ALL, ORT rewrites layouts for this CPU (NCHWc for float "
                "convolutions, NHWC for quantized ones, even with the NchwcTransformer disabled), so the file is tied to this CPU; "
                "save at a level below LAYOUT"
            )
        if not isinstance(returned, (str, os.PathLike)) or Path(returned) != target:
            raise Incorrect(f"answer(source_path, target_path) must return target_path, got {returned!r}")
        with blame_answer("the saved file is not a model ONNX can read"):
            counts = op_counts(target)
        layout_only = _layout_only_ops(model, Path(folder))
        hardware_specific = sorted(op for op in counts if op in layout_only or op.startswith("com.microsoft.nchwc"))
        if hardware_specific:
            raise Incorrect(
                f"the saved model holds ops that only LAYOUT and ALL produce on this CPU ({', '.join(hardware_specific)}), "
                "whichever process saved it (a session here or a tool such as optimize_onnx_model in another): "
                "the file is tied to the CPU that made it; save at a level below LAYOUT"
            )
        if "com.microsoft:FusedConv" not in counts:
            raise Incorrect(f"the saved model has no FusedConv ({dict(counts)}): the fusions of the EXTENDED level are missing")
        feeds = _random_feeds(model)
        with blame_answer("ONNX Runtime cannot run the saved model"):
            saved = _run_unoptimized(target, feeds)
        expect_close(_run_unoptimized(model, feeds), saved, what="the saved model's outputs", atol=1e-4)
    return "a pre-optimized model without CPU-specific layout ops, to load with ORT_ENABLE_ALL on the machine that runs it"


# ------------------------------------------------------------------ exercise 4: the recipe on a transformer block


def feed_forward_block(width: int = 32, hidden: int = 64, seed: int = 0) -> onnx.ModelProto:
    """A transformer's LayerNorm + feed-forward block written op by op, as older exporters write it (exercise 4).

    LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add; GELU as Div, Erf, Add, Mul, Mul.
    """
    rng = np.random.default_rng(seed)

    def constant(name, value):
        return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    initializers = [
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "last_axis"),
        constant("two", 2.0),
        constant("eps", 1e-5),
        constant("gamma", rng.uniform(0.5, 1.5, width)),
        constant("beta", rng.normal(0, 0.1, width)),
        constant("w1", rng.normal(0, 0.2, (width, hidden))),
        constant("b1", rng.normal(0, 0.1, hidden)),
        constant("sqrt2", np.sqrt(2.0)),
        constant("one", 1.0),
        constant("half", 0.5),
        constant("w2", rng.normal(0, 0.2, (hidden, width))),
        constant("b2", rng.normal(0, 0.1, width)),
    ]
    steps = [  # (op, inputs, output, name)
        ("ReduceMean", ["tokens", "last_axis"], "mean", "ln/mean"),
        ("Sub", ["tokens", "mean"], "centred", "ln/sub"),
        ("Pow", ["centred", "two"], "squared", "ln/pow"),
        ("ReduceMean", ["squared", "last_axis"], "variance", "ln/variance"),
        ("Add", ["variance", "eps"], "variance_eps", "ln/add_eps"),
        ("Sqrt", ["variance_eps"], "std", "ln/sqrt"),
        ("Div", ["centred", "std"], "normed", "ln/div"),
        ("Mul", ["normed", "gamma"], "scaled", "ln/gamma"),
        ("Add", ["scaled", "beta"], "ln_out", "ln/beta"),
        ("MatMul", ["ln_out", "w1"], "h", "fc1/matmul"),
        ("Add", ["h", "b1"], "h_bias", "fc1/bias"),
        ("Div", ["h_bias", "sqrt2"], "h_scaled", "gelu/div"),
        ("Erf", ["h_scaled"], "h_erf", "gelu/erf"),
        ("Add", ["h_erf", "one"], "h_erf1", "gelu/add"),
        ("Mul", ["h_bias", "h_erf1"], "h_mul", "gelu/mul"),
        ("Mul", ["h_mul", "half"], "gelu", "gelu/half"),
        ("MatMul", ["gelu", "w2"], "o", "fc2/matmul"),
        ("Add", ["o", "b2"], "features", "fc2/bias"),
    ]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, [output], name=name) for op, inputs, output, name in steps],
        "feed_forward_block",
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", "sequence", width])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "sequence", width])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _op_types(counts: dict[str, int]) -> dict[str, int]:
    """``{op type: count}`` with the domain prefixes of ``op_counts`` dropped (``com.microsoft:BiasGelu`` -> ``BiasGelu``)."""
    plain: dict[str, int] = {}
    for op, count in counts.items():
        plain[op.split(":")[-1]] = plain.get(op.split(":")[-1], 0) + count
    return plain


def _returned_counts(returned) -> tuple[dict[str, int], dict[str, int]]:
    if not (isinstance(returned, tuple) and len(returned) == 2 and all(isinstance(part, dict) for part in returned)):
        raise Incorrect(f"return a pair of dicts (before, after), each {{op type: count}}, got {type(returned).__name__}")
    return tuple({str(op).split(":")[-1]: whole_number(count, f"count of {op}") for op, count in part.items()} for part in returned)


def _check_block(preoptimize) -> str:
    import onnxruntime as ort

    if not callable(preoptimize):
        raise Incorrect(f"expected a function answer(source_path, target_path) -> (before, after), got {type(preoptimize).__name__}")
    model = feed_forward_block()
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "block.onnx", Path(folder) / "block_optimized.onnx"
        onnx.save(model, source)
        with _saved_levels() as levels:
            returned = preoptimize(str(source), str(target))
        if not target.is_file():
            raise Incorrect("nothing was written to target_path (the recipe: SessionOptions.optimized_model_filepath)")
        level = levels.get(str(target.resolve()))
        if level is not None and int(level) > int(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED):
            raise Incorrect(f"the file was saved at {level.name}: a file to ship and load with ALL anywhere is saved below LAYOUT")
        with blame_answer("the saved file is not a model ONNX can read"):
            counts = op_counts(target)
        if any(op.startswith("com.microsoft.nchwc") for op in counts):
            raise Incorrect("the saved model holds NCHWc layout ops: it is tied to this CPU; save at a level below LAYOUT")
        if "com.microsoft:BiasGelu" not in counts:
            raise Incorrect(
                f"the saved model has no com.microsoft:BiasGelu ({dict(counts)}): the bias + GELU fusion into ORT's own "
                "kernel is EXTENDED's; BASIC stops at the standard Gelu and LayerNormalization"
            )
        before, after = _returned_counts(returned)
        if before == _op_types(counts) and after == _op_types(op_counts(model)):
            raise Incorrect("your (before, after) are swapped: before is the source model's counts, after the saved file's")
        if before != _op_types(op_counts(model)):
            raise Incorrect(f"before {before} is not the source model's op counts: count node.op_type over onnx.load(source).graph.node")
        if after != _op_types(counts):
            raise Incorrect(f"after {after} is not the saved file's op counts: count node.op_type over onnx.load(target).graph.node")
        feeds = {"tokens": np.random.default_rng(3).normal(size=(2, 5, 32)).astype(np.float32)}
        with blame_answer("ONNX Runtime cannot run the saved model"):
            saved = _run_unoptimized(target, feeds)
        expect_close(_run_unoptimized(model, feeds), saved, what="the saved model's outputs", atol=1e-4)
    return (
        f"{sum(before.values())} nodes -> {sum(after.values())}: LayerNorm and GELU fused "
        f"({', '.join(f'{op} {n}' for op, n in sorted(after.items()))}), a portable file to load with ALL"
    )


q1 = Exercise(
    1,
    "a constant subgraph that folds away",
    _check_foldable,
    hint="Start from initializers (say W and a scale), transform them with nodes that read only initializers "
    "(Transpose, Mul, Add ...), and use the result once with the graph input (e.g. MatMul(x, result)). "
    "Nodes on the input path (Identity, Relu, Conv+BatchNorm) are removed or fused, not constant-folded.",
    solution_code=f"""
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
        answer = helper.make_model(graph, opset_imports=[helper.make_opsetid("", {OPSET})], ir_version={IR_VERSION})
    """,
)

q2 = Exercise(
    2,
    "count what the optimizer removed",
    _check_removed_ops,
    hint="Save the optimized model with labsupport.onnxutil.optimize.optimize_to_file (or SessionOptions.optimized_model_filepath), "
    "count op types before and after (op_counts), and keep the ops whose count went down, with how much.",
    solution_code="""
        import tempfile
        from pathlib import Path

        from labsupport.onnxutil.optimize import op_counts, optimize_to_file

        def answer(model, level):
            with tempfile.TemporaryDirectory() as folder:
                after = op_counts(optimize_to_file(model, level, Path(folder) / "optimized.onnx"))
            before = op_counts(model)
            return {op: before[op] - after[op] for op in before if before[op] > after[op]}
    """,
)

q3 = Exercise(
    3,
    "a pre-optimized model without layout ops",
    _check_offline,
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

q4 = Exercise(
    4,
    "the recipe on a transformer block",
    _check_block,
    hint="The recipe of the notebook's first section: SessionOptions at ORT_ENABLE_EXTENDED with optimized_model_filepath "
    "= str(target_path), create the session, then count node.op_type over onnx.load(...).graph.node of both files "
    "(collections.Counter does it).",
    solution_code="""
        from collections import Counter

        import onnx
        import onnxruntime as ort

        def answer(source_path, target_path):
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            options.optimized_model_filepath = str(target_path)
            ort.InferenceSession(str(source_path), options, providers=["CPUExecutionProvider"])
            before = Counter(node.op_type for node in onnx.load(source_path).graph.node)
            after = Counter(node.op_type for node in onnx.load(target_path).graph.node)
            return dict(before), dict(after)
    """,
)

EXERCISES = [q1, q2, q3, q4]
