import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport.course.kernels import ENV_VARIABLE
from labsupport.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, ____
from labsupport.exercises.nb07 import feed_forward_block, q1, q2, q3, q4
from labsupport.models.contract import IR_VERSION, OPSET
from labsupport.models.conv_bn_relu import conv_bn_relu_model
from labsupport.onnxutil.optimize import op_counts, optimize_to_file


def _model(nodes, initializers=(), dtype=TensorProto.FLOAT, x_shape=("N", 4), y_shape=("N", 4)):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", dtype, list(x_shape))],
        [helper.make_tensor_value_info("y", dtype, list(y_shape))],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


ONE = numpy_helper.from_array(np.ones(4, np.float32), "one")
W = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "W")


def _conv_bn_add():
    """Conv + BatchNormalization + Add of a constant: BASIC fuses them into one Conv, but that is fusion, not folding."""
    stack = conv_bn_relu_model(blocks=1, channels=4, size=8)
    weights = [t for t in stack.graph.initializer if t.name.startswith(("conv0", "bn0"))]
    shift = numpy_helper.from_array(np.full((1, 4, 1, 1), 0.5, np.float32), "shift")
    nodes = [node for node in stack.graph.node if node.op_type in ("Conv", "BatchNormalization")]
    nodes.append(helper.make_node("Add", ["bn0", "shift"], ["y"]))
    return _model(nodes, [*weights, shift], x_shape=("N", 3, 8, 8), y_shape=("N", 4, 8, 8))


def _int64_folding():
    """A correct answer whose input is int64: y = x + 2 * W.T, where 2 * W.T is folded."""
    weights = numpy_helper.from_array(np.arange(4, dtype=np.int64).reshape(4, 1), "W")
    two = numpy_helper.from_array(np.array(2, dtype=np.int64), "two")
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        helper.make_node("Mul", ["Wt", "two"], ["c"]),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    return _model(nodes, [weights, two], dtype=TensorProto.INT64)


@pytest.mark.parametrize("exercise", [q2, q3])
def test_a_function_returning_the_placeholder_is_not_attempted(exercise):
    assert exercise.evaluate(lambda *args: ____).status == NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong",
    [
        _model([helper.make_node("Relu", ["x"], ["y"])]),  # nothing to fold
        _model(
            [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Add", ["b", "one"], ["y"])],
            [ONE],
        ),  # every node touches the input
        _model([helper.make_node("Relu", ["x"], ["a"])]),  # invalid: y is never produced
        "model.onnx",
        _model(
            [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"]), helper.make_node("Relu", ["b"], ["y"])]
        ),  # an Identity chain: eliminated, not folded
        _conv_bn_add(),  # Conv+BatchNorm+Add: fused into one Conv, not folded
        _model(
            [
                helper.make_node("Identity", ["W"], ["a"]),
                helper.make_node("Identity", ["a"], ["b"]),
                helper.make_node("MatMul", ["x", "b"], ["y"]),
            ],
            [numpy_helper.from_array(np.ones((4, 4), np.float32), "W")],
        ),
        # constants passed through Identity: one node left, but nothing was computed
    ],
)
def test_q1_rejects_graphs_that_are_not_constant_folding(wrong):
    assert q1.evaluate(wrong).status == INCORRECT


def test_q1_wrong_answers_fold_or_fuse_to_one_node_so_only_the_stricter_checks_reject_them():
    for model in (
        _conv_bn_add(),
        _model(
            [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"]), helper.make_node("Relu", ["b"], ["y"])]
        ),
    ):
        with tempfile.TemporaryDirectory() as folder:
            assert len(onnx.load(optimize_to_file(model, "basic", Path(folder) / "o.onnx")).graph.node) == 1


def test_q1_feeds_inputs_of_the_declared_type():
    outcome = q1.evaluate(_int64_folding())
    assert outcome.status == CORRECT, outcome.message


def _removed_after(model, level):
    with tempfile.TemporaryDirectory() as folder:
        return dict(op_counts(optimize_to_file(model, level, Path(folder) / "o.onnx")))


@pytest.mark.parametrize(
    "wrong",
    [
        _removed_after,  # counts after optimization, not what was removed
        lambda model, level: {"BatchNormalization": 2},  # ignores the level
        lambda model, level: ["BatchNormalization"],  # not a dict
        lambda model, level: {  # hard-coded: one model's counts, copied from a message
            "basic": {"Add": 1, "BatchNormalization": 2, "MatMul": 1},
            "extended": {"Add": 1, "BatchNormalization": 2, "Conv": 2, "MatMul": 1, "Relu": 2},
        }[level],
        lambda model, level: {"Add": 1.5, "BatchNormalization": 2},  # not whole numbers
    ],
)
def test_q2_rejects_wrong_counts(wrong):
    assert q2.evaluate(wrong).status == INCORRECT


def test_q2_messages_say_what_is_wrong_without_giving_the_answer():
    missing = q2.evaluate(lambda model, level: {})
    assert missing.status == INCORRECT and "misses" in missing.message
    assert not any(text in missing.message for text in ("BatchNormalization", "MatMul", "{"))  # no op named, no dict
    extra = q2.evaluate(lambda model, level: {"Softmax": 1})
    assert "Softmax" in extra.message and "BatchNormalization" not in extra.message


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
        (_saver(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC), "no FusedConv"),
        (lambda source, target: target, "nothing was written"),
        (lambda source, target: onnx.save(onnx.load(source), target) or target, "no FusedConv"),
    ],
)
def test_q3_rejects_non_portable_or_unoptimized_files(wrong, reason):
    outcome = q3.evaluate(wrong)
    assert outcome.status == INCORRECT and reason in outcome.message


@pytest.mark.skipif(os.environ.get(ENV_VARIABLE) == "no-layout", reason="this lane opens every ALL session at EXTENDED")
@pytest.mark.parametrize("disabled", [[], ["NchwcTransformer"]])
@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT, ort.GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_q3_rejects_a_file_saved_at_layout_or_all_on_every_cpu(level, disabled):
    def save(source, target):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.optimized_model_filepath = str(target)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        return target

    outcome = q3.evaluate(save)
    assert outcome.status == INCORRECT and "tied to this CPU" in outcome.message, outcome.message


def test_q3_rejects_an_answer_that_does_not_return_the_target():
    saver = _saver(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    assert q3.evaluate(saver).status == CORRECT
    outcome = q3.evaluate(lambda source, target: saver(source, target) and None)
    assert outcome.status == INCORRECT and "must return target_path" in outcome.message


def _foldable(dtype=np.float32, elem_type=TensorProto.FLOAT, **stamps):
    """The reference answer's graph, in ``dtype``; ``stamps`` go to make_model (none: onnx's newest IR version and opset)."""
    weights = numpy_helper.from_array(np.arange(12, dtype=dtype).reshape(3, 4), "W")
    half = numpy_helper.from_array(np.array(0.5, dtype=dtype), "half")
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        helper.make_node("Mul", ["Wt", "half"], ["Ws"]),
        helper.make_node("MatMul", ["x", "Ws"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "foldable",
        [helper.make_tensor_value_info("x", elem_type, ["N", 4])],
        [helper.make_tensor_value_info("y", elem_type, ["N", 3])],
        [weights, half],
    )
    return helper.make_model(graph, **stamps)


def test_q1_accepts_a_right_model_made_with_plain_make_model_and_says_why_it_was_converted():
    plain = _foldable()
    assert plain.ir_version > IR_VERSION  # onnx stamps a newer IR version than ONNX Runtime reads
    outcome = q1.evaluate(plain)
    assert outcome.status == CORRECT, outcome.message
    assert "IR version" in outcome.message and "opset_imports and ir_version" in outcome.message
    assert "onnxruntime_src" not in outcome.message  # ORT's C++ location is stripped, its reason kept


def test_q1_says_why_a_float16_graph_does_not_fold():
    outcome = q1.evaluate(_foldable(np.float16, TensorProto.FLOAT16, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION))
    assert outcome.status == INCORRECT
    assert "Cast" in outcome.message and "float32" in outcome.message, outcome.message


def test_q3_success_message_recommends_loading_with_all():
    outcome = q3.evaluate(q3.reference_answer())
    assert outcome.status == CORRECT and "ORT_ENABLE_ALL" in outcome.message


def test_q1_rejects_constants_that_are_only_reshaped():
    shape = numpy_helper.from_array(np.array([4, 3], dtype=np.int64), "shape")
    reshaped = _model(
        [
            helper.make_node("Reshape", ["W", "shape"], ["a"]),
            helper.make_node("Identity", ["a"], ["b"]),
            helper.make_node("MatMul", ["x", "b"], ["y"]),
        ],
        [W, shape],
        y_shape=("N", 3),
    )
    outcome = q1.evaluate(reshaped)
    assert outcome.status == INCORRECT and "Reshape only changes their shape" in outcome.message, outcome.message


def test_q1_rejects_a_constant_branch_that_nothing_reads():
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    dead_branch = _model(
        [
            helper.make_node("Transpose", ["W"], ["w_t"], name="transpose"),
            helper.make_node("Mul", ["w_t", "half"], ["w_scaled"], name="scale"),
            helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul"),  # reads W, not the computed w_scaled
        ],
        [W, half],
        x_shape=("N", 3),
    )
    outcome = q1.evaluate(dead_branch)
    assert outcome.status == INCORRECT and "no node and no graph output reads" in outcome.message, outcome.message


def test_q1_says_that_an_output_needs_a_shape():
    model = _foldable(opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    outcome = q1.evaluate(model)
    assert outcome.status == INCORRECT and "have no shape" in outcome.message, outcome.message


def _command_line_saver(level):
    """ORT's own tool in another process: no session of this process sees the level."""

    def save(source, target):
        tool = [sys.executable, "-m", "onnxruntime.tools.optimize_onnx_model", "--opt_level", level, str(source), str(target)]
        subprocess.run(tool, check=True, capture_output=True)
        return target

    return save


def _all_adds_ops_here():
    model = conv_bn_relu_model(blocks=2, channels=4, size=8)
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "m.onnx", Path(folder) / "all.onnx"
        onnx.save(model, source)
        _command_line_saver("all")(source, target)
        return set(op_counts(target)) != set(op_counts(optimize_to_file(model, "extended", Path(folder) / "ext.onnx")))


def test_q3_rejects_a_file_saved_at_all_by_another_process():
    if not _all_adds_ops_here():
        pytest.skip("ALL adds nothing to this model on this CPU: its file is the EXTENDED one")
    outcome = q3.evaluate(_command_line_saver("all"))
    assert outcome.status == INCORRECT and "only LAYOUT and ALL produce" in outcome.message, outcome.message


def test_q3_accepts_a_file_saved_at_extended_by_another_process():
    outcome = q3.evaluate(_command_line_saver("extended"))
    assert outcome.status == CORRECT, outcome.message


@pytest.mark.skipif(os.environ.get(ENV_VARIABLE) == "no-layout", reason="this lane opens every ALL session at EXTENDED")
def test_q3_judges_orts_optimize_model_in_this_process_by_its_level():
    from onnxruntime.tools.onnx_model_utils import optimize_model

    def library(level):
        return lambda source, target: optimize_model(Path(source), Path(target), level) or target

    outcome = q3.evaluate(library(ort.GraphOptimizationLevel.ORT_ENABLE_ALL))
    assert outcome.status == INCORRECT and "tied to this CPU" in outcome.message, outcome.message
    assert q3.evaluate(library(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)).status == CORRECT


def test_q3_layout_ops_come_from_what_all_adds_on_this_cpu(monkeypatch):
    """The rule follows what ALL adds on the CPU that runs the checker, not a list of NCHWc op names."""
    from labsupport.exercises import nb07

    monkeypatch.setattr(nb07, "_layout_only_ops", lambda model, folder: {"com.microsoft:FusedConv"})  # pretend ALL added it
    outcome = q3.evaluate(_command_line_saver("extended"))
    assert outcome.status == INCORRECT and "com.microsoft:FusedConv" in outcome.message, outcome.message


def test_q1_says_that_an_initializer_listed_as_an_input_is_not_folded():
    model = _foldable(opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    model.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 4]))  # overridable: ORT folds nothing reading it
    outcome = q1.evaluate(model)
    assert outcome.status == INCORRECT and "W is an initializer and also a graph input" in outcome.message, outcome.message


def test_q1_rejects_a_shape_branch_that_reads_the_input():
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),  # reads the input: not a constant, and its result feeds nothing
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "half"], ["y"]),
    ]
    outcome = q1.evaluate(_model(nodes, [half]))
    assert outcome.status == INCORRECT and "compute from the graph input" in outcome.message, outcome.message


def _counted_at(fixed_level=None, signed=False):
    """removed_ops that optimizes at ``fixed_level`` whatever it is asked, or reports added ops as negative counts."""

    def answer(model, level):
        with tempfile.TemporaryDirectory() as folder:
            after = op_counts(optimize_to_file(model, fixed_level or level, Path(folder) / "o.onnx"))
        before = op_counts(model)
        return {op: before[op] - after[op] for op in before | after if before[op] > after[op] or (signed and before[op] != after[op])}

    return answer


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        (_counted_at(signed=True), "negative count"),
        (_counted_at("basic"), "at level 'extended'"),
        (_counted_at("extended"), "at level 'basic'"),
    ],
    ids=["added ops as negative counts", "always basic", "always extended"],
)
def test_q2_rejects_signed_counts_and_a_fixed_level(wrong, says):
    outcome = q2.evaluate(wrong)
    assert outcome.status == INCORRECT and says in outcome.message, outcome.message


def test_q3_accepts_the_raw_recipe_whose_setter_takes_only_str():
    def answer(source_path, target_path):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = target_path  # pybind's setter refuses a pathlib.Path
        ort.InferenceSession(source_path, options, providers=["CPUExecutionProvider"])
        return target_path

    outcome = q3.evaluate(answer)
    assert outcome.status == CORRECT, outcome.message


# ------------------------------------------------------------------ exercise 4: the recipe on a transformer block


def _counts(path):
    counts = {}
    for node in onnx.load(path).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def block_answer(level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, result=lambda before, after: (before, after), write=True):
    """An answer to exercise 4 that gets one thing wrong (or nothing, with the defaults)."""

    def answer(source_path, target_path):
        if write:
            options = ort.SessionOptions()
            options.graph_optimization_level = level
            options.optimized_model_filepath = str(target_path)
            ort.InferenceSession(str(source_path), options, providers=["CPUExecutionProvider"])
        return result(_counts(source_path), _counts(target_path) if write else {})

    return answer


def test_q4_the_block_is_decomposed_and_the_recipe_passes():
    assert {"Erf", "ReduceMean", "Sqrt"} <= set(op_counts(feed_forward_block()))
    outcome = q4.evaluate(block_answer())
    assert outcome.status == CORRECT, outcome.message


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (block_answer(level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC), "EXTENDED"),
        (block_answer(level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL), "BiasGelu"),
        (block_answer(level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL), "saved at ORT_ENABLE_ALL"),
        (block_answer(result=lambda before, after: (after, before)), "swapped"),
        (block_answer(result=lambda before, after: after), "pair of dicts"),
        (block_answer(result=lambda before, after: (before, {**after, "MatMul": 1})), "saved file's op counts"),
        (block_answer(result=lambda before, after: ({"Erf": 1}, after)), "source model's op counts"),
        (block_answer(result=lambda before, after: (before, {op: float(n) for op, n in after.items()})), "whole number"),
        (block_answer(write=False), "nothing was written"),
        ("feed_forward_block_extended.onnx", "expected a function"),
    ],
)
def test_q4_rejects_typical_wrong_answers(wrong, reason):
    outcome = q4.evaluate(wrong)
    assert outcome.status == INCORRECT
    assert reason in outcome.message, outcome.message
