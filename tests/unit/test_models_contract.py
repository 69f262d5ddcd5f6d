"""One way to score a digits model: ``accuracy(logits, labels)``, and ``onnx_logits`` for an ONNX file."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from labsupport.course.data import Split, load_digits
from labsupport.models.contract import IR_VERSION, OPSET, accuracy, onnx_logits
from labsupport.models.digits_cnn import ensure_digits_cnn


def test_accuracy_counts_the_rows_whose_largest_logit_is_the_label():
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], dtype=np.float32)
    assert accuracy(logits, np.array([1, 0, 0, 1])) == 0.5


def _flat_model(path):
    """Logits = the first ten pixels of a (N, 64) row: a model whose input takes flat rows."""
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["logits"])],
        "flat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [helper.make_tensor(name, TensorProto.INT64, [1], [value]) for name, value in (("starts", 0), ("ends", 10), ("axes", 1))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    path.write_bytes(model.SerializeToString())
    return path


def test_onnx_logits_feeds_images_or_flat_rows_by_the_input_rank(tmp_path):
    digits = load_digits()
    split = Split(digits.test.images[:5], digits.test.labels[:5])
    np.testing.assert_array_equal(onnx_logits(_flat_model(tmp_path / "flat.onnx"), split), split.flat[:, :10])
    assert onnx_logits(ensure_digits_cnn(), split).shape == (5, 10)
    assert len(onnx_logits(ensure_digits_cnn())) == len(digits.test)  # the test split by default


def test_onnx_logits_wants_a_split():
    with pytest.raises(TypeError, match="Split"):
        onnx_logits(ensure_digits_cnn(), load_digits().test.images)
