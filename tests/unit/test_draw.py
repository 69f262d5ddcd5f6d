"""Unit tests for labsupport.onnxutil.draw: what draw() puts in the graph it hands to Graphviz (no rendering here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport.models.contract import IR_VERSION, OPSET
from labsupport.onnxutil import draw as drawing


@pytest.fixture(autouse=True)
def _dot_installed(require_tool):
    require_tool("dot", "draw() lays graphs out with Graphviz (apt-get install graphviz)")


def _model(nodes, inputs, outputs, initializers=(), name="g") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _dense_model() -> onnx.ModelProto:
    return _model(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
            helper.make_node("Add", ["xw", "b"], ["z"], name="add"),
            helper.make_node("Relu", ["z"], ["y"], name="relu"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "W"), numpy_helper.from_array(np.zeros(3, np.float32), "b")],
        name="dense",
    )


def _chain(n: int) -> onnx.ModelProto:
    ops = ["Relu", "Sigmoid", "Tanh"]
    nodes = [helper.make_node(ops[i % 3], ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"]) for i in range(n)]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info(f"t{n - 1}", TensorProto.FLOAT, None)],
        name="chain",
    )


def test_nodes_weights_shapes_inputs_and_outputs_are_in_the_graph():
    picture = drawing.draw(_dense_model())
    assert repr(picture) == "<GraphDrawing 'dense: 3 nodes': 3 of 3 nodes drawn>"
    assert (picture.title, picture.nodes_drawn, picture.nodes_total) == ("dense: 3 nodes", 3, 3)
    source = picture.source
    assert "rankdir=TB" in source
    for op, name in (("MatMul", "matmul"), ("Add", "add"), ("Relu", "relu")):
        assert f"<B>{op}</B>" in source and f">{name}</FONT>" in source
    assert ">W 4\N{MULTIPLICATION SIGN}3</FONT>" in source and ">b 3</FONT>" in source  # weights folded into their node
    assert 'label="[batch,4]"' in source and 'label="[batch,3]"' in source  # edge shapes from shape inference
    assert "<B>x</B>" in source and "float32[batch, 4]" in source and "<B>y</B>" in source
    assert "W [label" not in source  # initializers are not boxes of their own


def test_title_and_show_shapes():
    picture = drawing.draw(_dense_model(), title="a dense layer & its ReLU", show_shapes=False)
    assert picture.title == "a dense layer & its ReLU" and "a dense layer &amp; its ReLU" in picture.source
    assert 'label="[batch,3]"' not in picture.source


def test_a_large_graph_is_cut_and_says_what_was_left_out():
    picture = drawing.draw(_chain(300), max_nodes=25)
    assert (picture.nodes_drawn, picture.nodes_total) == (25, 300)
    assert picture.source.count("<B>Relu</B>") + picture.source.count("<B>Sigmoid</B>") + picture.source.count("<B>Tanh</B>") == 25
    assert "showing the first 25 of 300 nodes; 275 not drawn (" in picture.source and "Relu 91" in picture.source
    assert "<B>t299</B>" not in picture.source  # the output of a node that was not drawn
    assert "not drawn" not in drawing.draw(_chain(5)).source


def test_subgraphs_domains_and_quantize_ops_are_marked():
    branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])], "b", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)]
    )
    model = _model(
        [
            helper.make_node("If", ["c"], ["r"], then_branch=branch, else_branch=branch),
            helper.make_node("QuantizeLinear", ["r", "scale", "zero"], ["q"], name="r_QuantizeLinear"),
            helper.make_node("FusedGemm", ["q", "q"], ["y"], domain="com.microsoft"),
        ],
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(0.1, np.float32), "scale"), numpy_helper.from_array(np.array(0, np.int8), "zero")],
    )
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    source = drawing.draw(model).source
    assert ">2 subgraphs</FONT>" in source
    assert "<B>QuantizeLinear</B>" in source and ">2 scalars</FONT>" in source and "r_QuantizeLinear" not in source
    assert ">com.microsoft</FONT>" in source
    assert source.count('fillcolor="#fff3d6"') == 1  # the quantize op stands out


def test_many_weights_are_counted_not_listed():
    weights = [numpy_helper.from_array(np.ones((2, 2), np.float32), f"w{i}") for i in range(4)]
    weights.append(numpy_helper.from_array(np.array(1.0, np.float32), "s"))
    model = _model(
        [helper.make_node("Sum", ["x", "w0", "w1", "w2", "w3", "s"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        weights,
    )
    source = drawing.draw(model).source
    assert ">w0 2\N{MULTIPLICATION SIGN}2</FONT>" in source and ">w1 2\N{MULTIPLICATION SIGN}2</FONT>" in source
    assert ">w2 " not in source and ">+2 more weights, 1 scalar</FONT>" in source


def test_a_broken_model_shows_its_missing_input():
    model = _dense_model()
    model.graph.node[1].input[0] = "nowhere"
    source = drawing.draw(model).source
    assert ">missing input: nowhere</FONT>" in source and 'fillcolor="#fbe3e3"' in source


def test_bad_arguments_get_clear_errors(tmp_path: Path, monkeypatch):
    with pytest.raises(ValueError, match="max_nodes must be a positive int"):
        drawing.draw(_dense_model(), max_nodes=0)
    with pytest.raises(TypeError, match=r"expected an onnx.ModelProto or the path .* got int"):
        drawing.draw(42)
    with pytest.raises(FileNotFoundError, match=r"missing\.onnx"):
        drawing.draw(tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match=r"writes \.svg, \.png or \.pdf"):
        drawing.draw(_dense_model()).save(tmp_path / "picture.jpg")
    monkeypatch.setattr(drawing.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        drawing.draw(_dense_model())


def test_draw_reads_a_path_without_its_external_data(tmp_path: Path):
    model = _dense_model()
    path = tmp_path / "m.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    (tmp_path / "m.onnx.data").unlink()
    assert ">W 4\N{MULTIPLICATION SIGN}3</FONT>" in drawing.draw(path).source
