"""Unit tests for labsupport.onnxutil.graph (summarize, op_histogram, load_model, tensor types)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport.models.contract import OPSET
from labsupport.onnxutil import graph


def _dense_model() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    bias = numpy_helper.from_array(np.zeros(3, dtype=np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["z"], name="add"),
        helper.make_node("Relu", ["z"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [weight, bias],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tests")
    model.producer_version = "1.0"
    helper.set_model_props(model, {"author": "onnx-lab"})
    return model


def test_summarize_reads_everything():
    summary = graph.summarize(_dense_model())
    assert summary.graph_name == "dense"
    assert summary.producer == "tests 1.0"
    assert summary.opset == {"ai.onnx": OPSET}
    assert [str(i) for i in summary.inputs] == ["x: float32[batch, 4]"]
    assert summary.outputs[0].shape == ("batch", 3)
    assert summary.node_count == 3
    assert summary.op_histogram == {"Add": 1, "MatMul": 1, "Relu": 1}
    assert summary.parameter_count == 15 and summary.parameter_bytes == 60 and summary.initializer_count == 2
    assert summary.metadata == {"author": "onnx-lab"}
    text = str(summary)
    assert re.search(r"^parameters +15 in 2 initializers \(60 B\)$", text, re.M)
    assert re.search(r"^input +x: float32\[batch, 4\]$", text, re.M)
    assert re.search(r"^metadata author +onnx-lab$", text, re.M)
    html = summary._repr_html_()
    assert html.startswith("<table>") and "<code>x: float32[batch, 4]</code>" in html
    frame = summary.to_frame()
    assert list(frame.columns) == ["field", "value"] and frame.set_index("field").loc["nodes", "value"] == "3"


def test_summarize_counts_bytes_by_dtype_and_hides_initializer_inputs():
    model = _dense_model()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((10, 10), dtype=np.float16), "half"))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(5, dtype=np.int64), "ids"))
    model.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3]))  # IR<4 style
    summary = graph.summarize(model)
    assert summary.parameter_count == 15 + 100 + 5
    assert summary.parameter_bytes == 60 + 200 + 40
    assert [i.name for i in summary.inputs] == ["x"]


def test_summarize_from_path_without_loading_external_data(tmp_path: Path):
    model = _dense_model()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones((256, 3), np.float32), "W"))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 256
    path = tmp_path / "m.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    (tmp_path / "m.onnx.data").unlink()  # the summary must not need the weights themselves
    summary = graph.summarize(path)
    assert summary.parameter_count == 256 * 3 + 3 and summary.parameter_bytes == (256 * 3 + 3) * 4
    assert graph.summarize(str(path)).node_count == 3


def test_non_tensor_types_are_described():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    g = helper.make_graph(
        [helper.make_node("SequenceAt", ["s", "i"], ["y"])],
        "seq",
        [seq, helper.make_tensor_value_info("i", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    summary = graph.summarize(helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]))
    assert [str(i) for i in summary.inputs] == ["s: sequence<float32[2]>?", "i: int64[]"]
    assert str(summary.outputs[0]) == "y: float32?"


def test_op_histogram_top_level_and_subgraphs():
    then_graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)]
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"]), helper.make_node("Relu", ["e"], ["e2"])],
        "else",
        [],
        [helper.make_tensor_value_info("e2", TensorProto.FLOAT, None)],
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph)
    g = helper.make_graph(
        [node],
        "if",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    assert graph.op_histogram(model) == {"If": 1}
    assert graph.op_histogram(model, include_subgraphs=True) == {"If": 1, "Relu": 2, "Neg": 1}


@pytest.mark.parametrize("function", [graph.summarize, graph.op_histogram, graph.load_model])
def test_wrong_types_and_bad_files(function, tmp_path: Path):
    with pytest.raises(TypeError, match=r"expected an onnx.ModelProto or the path .* got int"):
        function(42)
    with pytest.raises(TypeError, match="got GraphProto"):
        function(_dense_model().graph)
    with pytest.raises(FileNotFoundError, match=r"missing\.onnx"):
        function(tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match="is not a file"):
        function(tmp_path)
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01garbage")
    with pytest.raises(ValueError, match=r"corrupt\.onnx"):
        function(corrupt)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.onnx is not an ONNX model"):
        function(str(empty))
    with pytest.raises(ValueError, match=r"cannot read these 13 bytes as an ONNX model"):
        function(b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01g")


def test_load_model_passes_protos_through_and_reads_paths_and_bytes(tmp_path: Path):
    model = _dense_model()
    assert graph.load_model(model) is model
    path = tmp_path / "dense.onnx"
    onnx.save_model(model, path)
    assert graph.load_model(path).SerializeToString() == model.SerializeToString()
    assert graph.load_model(model.SerializeToString()).SerializeToString() == model.SerializeToString()
    assert graph.dtype_name(TensorProto.INT64) == "int64" and graph.dtype_name(TensorProto.UNDEFINED) == "?"


def test_tensor_info_reads_a_value_info():
    info = graph.tensor_info(helper.make_tensor_value_info("x", TensorProto.INT8, ["batch", 3, None]))
    assert (info.name, info.dtype, info.shape) == ("x", "int8", ("batch", 3, None))
    assert str(info) == "x: int8[batch, 3, ?]"
