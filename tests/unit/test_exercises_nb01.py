"""Notebook 01's exercises: each reference solution passes, typical wrong answers fail."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport.exercises import CORRECT, INCORRECT, nb01
from labsupport.exercises.nb01 import Q1_WEIGHT, broken_model, mystery_model, q1, q2, q3
from labsupport.models.contract import IR_VERSION, OPSET
from labsupport.models.graph_mlp import mlp


def _q1_model(
    *,
    softmax: bool = True,
    batch: object = "batch",
    weight: np.ndarray = Q1_WEIGHT,
    axis: int = -1,
    out_batch: object = None,
    head: str = "Softmax",
    relu: bool = False,
):
    logits = "relu_in" if relu else "logits"
    nodes = [helper.make_node("MatMul", ["x", "W"], [logits if softmax else "probs"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["relu_in"], ["logits"]))
    if softmax:
        nodes.append(helper.make_node(head, ["logits"], ["probs"], axis=axis))
    graph = helper.make_graph(
        nodes,
        "q1",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 6])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch if out_batch is None else out_batch, 4])],
        [numpy_helper.from_array(weight, "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _stores_w_but_uses_a_shifted_copy():
    model = _q1_model(weight=Q1_WEIGHT + 0.5)
    model.graph.initializer.append(numpy_helper.from_array(Q1_WEIGHT, "W_unused"))
    return model


def _einsum_model():
    model = _q1_model()
    model.graph.node[0].CopyFrom(helper.make_node("Einsum", ["x", "W"], ["logits"], equation="bi,ij->bj"))
    return model


def _gemm_with_w_transposed():
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "Wt"], ["logits"], transB=1),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        ],
        "q1",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(Q1_WEIGHT.T.copy(), "Wt")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def test_q1_accepts_gemm_with_the_weight_stored_transposed():
    assert q1.evaluate(_gemm_with_w_transposed()).status == CORRECT


def test_every_exercise_is_listed():
    assert [q1, q2, q3, nb01.q4] == nb01.EXERCISES


def test_q1_accepts_any_symbolic_batch_name():
    assert q1.evaluate(_q1_model(batch="N")).status == CORRECT


def _default_versions(**versions):
    return helper.make_model(_q1_model().graph, **versions)


@pytest.mark.parametrize(
    "versions",
    [{}, {"ir_version": IR_VERSION}, {"opset_imports": [helper.make_opsetid("", OPSET)]}],
    ids=["both-defaults", "default-opset", "default-ir"],
)
def test_q1_names_the_fix_when_make_model_stamps_versions_ort_refuses(versions):
    outcome = q1.evaluate(_default_versions(**versions))
    assert outcome.status == INCORRECT and f"pass ir_version={IR_VERSION}" in outcome.message, outcome.message
    assert "onnxruntime_src" not in outcome.message and ".cc:" not in outcome.message
    assert "IR version" in outcome.message or "Opset" in outcome.message
    refusal = outcome.message.split("ONNX Runtime cannot load the model: ")[1].split(" make_model stamps")[0]
    assert refusal.endswith(".") and refusal.count(".") == 1, refusal  # one whole sentence, not cut mid-word


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (lambda: _q1_model(softmax=False), "Softmax node is missing"),
        (lambda: _q1_model(batch=1), "batch dimension of 'x' is fixed to 1"),
        (lambda: _q1_model(weight=np.ones_like(Q1_WEIGHT)), "not softmax"),
        (lambda: _q1_model(axis=0), "not softmax"),
        (lambda: _q1_model(weight=Q1_WEIGHT * 1.01), "not softmax"),
        (lambda: _q1_model(weight=Q1_WEIGHT.T.copy().reshape(6, 4)), "not softmax"),
        (lambda: _q1_model(weight=Q1_WEIGHT + 0.5), "multiplies by Q1_WEIGHT unchanged"),
        (lambda: _q1_model(weight=Q1_WEIGHT - 2.0), "multiplies by Q1_WEIGHT unchanged"),
        (_stores_w_but_uses_a_shifted_copy, "multiplies by Q1_WEIGHT unchanged"),
        (lambda: "model.onnx", "expected the softmax"),
        (lambda: _q1_model(out_batch=1), "declared [1, 4], a batch fixed to 1"),  # ORT runs it and only logs the mismatch
        (_einsum_model, "with a MatMul or Gemm node"),
        (lambda: _q1_model(head="LogSoftmax"), "not softmax"),
        (lambda: _q1_model(relu=True), "not softmax"),
        (lambda: _q1_model(weight=Q1_WEIGHT.round(1)), "not softmax"),
    ],
    ids=[
        "no-softmax",
        "fixed-batch",
        "wrong-weights",
        "wrong-axis",
        "weights-scaled",
        "weights-reshaped",
        "weights-shifted-up",  # softmax cancels the shift: same probabilities
        "weights-shifted-down",
        "w-stored-but-unused",
        "not-a-model",
        "output-batch-fixed",
        "einsum-instead-of-matmul",
        "log-softmax",
        "relu-before-softmax",
        "weights-rounded",
    ],
)
def test_q1_wrong_answers(wrong, reason):
    outcome = q1.evaluate(wrong())
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


def _fixed_attribute_only():
    model = broken_model()
    gemm = model.graph.node[0]
    del gemm.attribute[:]
    gemm.attribute.append(helper.make_attribute("transB", 1))
    return model


def _no_transpose():
    model = broken_model()
    del model.graph.node[0].attribute[:]
    model.graph.node[1].input[0] = "dense"
    return model


def _relu_dropped():
    model = broken_model()
    gemm = model.graph.node[0]
    del gemm.attribute[:]
    gemm.attribute.append(helper.make_attribute("transB", 1))
    gemm.output[0] = "y"
    del model.graph.node[1]
    return model


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (broken_model, "Unrecognized attribute: transb"),
        (_fixed_attribute_only, "is not output of any previous nodes"),
        (_no_transpose, "check_model(model, full_check=True) fails"),
        (_relu_dropped, "without the ReLU"),
        (lambda: broken_model().graph, "expected the repaired model as an onnx.ModelProto"),
    ],
    ids=["unchanged", "edge-still-dangling", "attribute-removed", "relu-dropped", "graph-not-model"],
)
def test_q2_wrong_answers(wrong, reason):
    outcome = q2.evaluate(wrong())
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


def test_q2_broken_model_really_fails_the_checker():
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(broken_model(), full_check=True)


def _q3_truth() -> list[tuple[str, int]]:
    model = mystery_model()
    sizes = {t.name: math.prod(t.dims) for t in model.graph.initializer}
    return [(n.op_type, sum(sizes[i] for i in n.input if i in sizes)) for n in model.graph.node if any(i in sizes for i in n.input)]


def test_q3_truth_and_wrong_answers():
    onnx.checker.check_model(mystery_model(), full_check=True)
    truth = _q3_truth()
    assert q3.evaluate(truth).status == CORRECT
    assert q3.evaluate(tuple((op, np.int64(n)) for op, n in truth)).status == CORRECT
    model = mystery_model()
    matmuls = sum(n.op_type == "MatMul" for n in model.graph.node)
    params = sum(math.prod(t.dims) for t in model.graph.initializer)
    gemm = next(i for i, (op, _) in enumerate(truth) if op == "Gemm")
    weight_only = list(truth)
    weight_only[gemm] = ("Gemm", 32 * 24)
    in_bytes = [(op, 4 * n) for op, n in truth]
    every_node = [(n.op_type, dict(truth).get(n.op_type, 0)) for n in model.graph.node]
    wrong = {
        "(op_type, parameters) pairs": (matmuls, params),  # the totals summarize() prints, not the pairs
        "only the nodes that read an initializer": every_node,
        "graph order": sorted(truth),
        "its weight and its bias": weight_only,
        "size in bytes": in_bytes,
        "op types, in order": [("MatMul", n) if op == "Gemm" else (op, n) for op, n in truth],
        "is not the number of parameters the Add node reads": [(op, n + 1 if op == "Add" else n) for op, n in truth],
        "whole number": [(op, float(n)) for op, n in truth],
    }
    for reason, answer in wrong.items():
        outcome = q3.evaluate(answer)
        assert outcome.status == INCORRECT and reason in outcome.message, (answer, outcome.message)


def test_q3_needs_the_per_node_loop_not_the_totals_summarize_prints():
    for not_a_list in ({"MatMul": 4}, "MatMul 4", 2675, [("MatMul",)], [(4, "MatMul")]):
        outcome = q3.evaluate(not_a_list)
        assert outcome.status == INCORRECT and "expected a list of (op_type, parameters) pairs" in outcome.message, outcome.message


def _norm_model(nodes, initializers, *, opset=OPSET, out_batch="batch", features=8):
    graph = helper.make_graph(
        nodes,
        "q4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [out_batch, features])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _norm_nodes(*, axis=-1, eps=True, center_var=True, divide=True, keepdims=1, eps_outside=False):
    axes = numpy_helper.from_array(np.array([axis], np.int64), "axes")
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=keepdims),
        helper.make_node("Sub", ["x", "mean"], ["centered"]),
        helper.make_node("Mul", ["centered" if center_var else "x"] * 2, ["squared"]),
        helper.make_node("ReduceMean", ["squared", "axes"], ["var"], keepdims=keepdims),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]) if eps else helper.make_node("Identity", ["var"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
    ]
    if eps_outside:  # sqrt(var) + eps
        nodes[4:6] = [helper.make_node("Sqrt", ["var"], ["root"]), helper.make_node("Add", ["root", "eps"], ["std"])]
    nodes += [
        helper.make_node("Div", ["centered", "std"], ["y"]) if divide else helper.make_node("Identity", ["centered"], ["y"]),
    ]
    return nodes, [axes, numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]


def test_q4_reference_and_variants_pass():
    assert nb01.q4.evaluate(_norm_model(*_norm_nodes())).status == CORRECT
    assert nb01.q4.evaluate(_norm_model(*_norm_nodes(axis=1))).status == CORRECT  # axis 1 is the last axis of [batch, 8]
    nodes, initializers = _norm_nodes()
    nodes[2] = helper.make_node("Pow", ["centered", "two"], ["squared"])  # Pow instead of Mul
    initializers.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    assert nb01.q4.evaluate(_norm_model(nodes, initializers)).status == CORRECT


def test_q4_names_each_mistake():
    fused = _norm_model(
        [helper.make_node("LayerNormalization", ["x", "scale"], ["y"], axis=-1)], [numpy_helper.from_array(np.ones(8, np.float32), "scale")]
    )
    attr_axes = _norm_model(
        [
            helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
            helper.make_node("Sub", ["x", "mean"], ["y"]),
        ],
        [],
    )
    wrong = {
        "not LayerNormalization": fused,
        "over the batch axis": _norm_model(*_norm_nodes(axis=0)),
        "add the epsilon": _norm_model(*_norm_nodes(eps=False)),
        "x minus its row mean": _norm_model(*_norm_nodes(divide=False)),
        "not of x**2": _norm_model(*_norm_nodes(center_var=False)),
        "inside the Sqrt": _norm_model(*_norm_nodes(eps_outside=True)),
        "fixed to 1": _norm_model(*_norm_nodes(), out_batch=1),
        "full_check=True) fails": attr_axes,  # ReduceMean's axes attribute is gone since opset 18
        "keepdims=0 on a Reduce node": _norm_model(*_norm_nodes(keepdims=0), out_batch="batch"),
        "the second dimension": _norm_model(*_norm_nodes(), features=6),
    }
    for reason, answer in wrong.items():
        outcome = nb01.q4.evaluate(answer)
        assert outcome.status == INCORRECT and reason in outcome.message, (reason, outcome.message)
    assert nb01.q4.evaluate(None).status == INCORRECT


def test_mlp_builds_the_layers_asked_for():
    model = mlp([8, 6, 4], name="small")
    onnx.checker.check_model(model, full_check=True)
    assert [node.op_type for node in model.graph.node] == ["MatMul", "Add", "Relu", "MatMul", "Add", "Softmax"]
    assert [v.name for v in model.graph.output] == ["probs"] and model.graph.name == "small"
    assert sum(math.prod(t.dims) for t in model.graph.initializer) == 8 * 6 + 6 + 6 * 4 + 4
    gemm = mlp([8, 6, 4], gemm_layers={1}, probabilities=False)
    assert [node.op_type for node in gemm.graph.node] == ["MatMul", "Add", "Relu", "Gemm"]
    assert [v.name for v in gemm.graph.output] == ["fc1.out"]


def test_q3_mystery_model_has_a_gemm_layer_and_no_softmax():
    ops = [node.op_type for node in mystery_model().graph.node]
    assert ops.count("Gemm") == 1 and "Softmax" not in ops


def test_error_summary_drops_onnxruntimes_cpp_location():
    from labsupport.exercises.checks import error_summary

    raw = (
        "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 "
        "onnxruntime::Model::Model(onnx::ModelProto&&, const onnxruntime::PathString&, const onnxruntime::ModelOptions&) "
        "Unsupported model IR version: 14, max supported IR version: 13"
    )
    assert error_summary(RuntimeError(raw)) == "Unsupported model IR version: 14, max supported IR version: 13"
