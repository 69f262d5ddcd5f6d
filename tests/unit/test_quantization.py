"""Tests of labsupport.topics.quantization (notebook 06): calibration reader, variants, accuracy, precisions, the INT8 CNN.

The measurement of variants is tested in test_bench_quantization.py, CPU features in test_hardware.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport.course.data import load_digits, sha256_of
from labsupport.models.contract import IR_VERSION, OPSET, onnx_logits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.onnxutil.sessions import open_session
from labsupport.topics import quantization as quant


@pytest.fixture(scope="module")
def digits():
    return load_digits()


@pytest.fixture(scope="module")
def cnn_variants(tmp_path_factory):
    """FP32 / INT8 dynamic / INT8 static / FP16 of the course CNN (fast: the CNN is tiny)."""
    return quant.build_variants(ensure_digits_cnn(), tmp_path_factory.mktemp("variants"), int4=False)


def tiny_mlp(path, width=32, seed=0):
    """A (N, 64) -> (N, 10) MatMul + Add model made in code, for fast quantizer tests."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.normal(0, 0.2, (64, width)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.2, (width, 10)).astype(np.float32), "w2")
    b = numpy_helper.from_array(np.zeros(10, np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["pixels", "w1"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["m2"], name="mm2"),
        helper.make_node("Add", ["m2", "b"], ["logits"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_mlp",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [w1, w2, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.save(model, path)
    return path


# ---------------------------------------------------------------- calibration reader


def test_reader_feeds_the_calibration_split_once_in_equal_batches(digits):
    reader = quant.DigitsCalibrationReader("image")
    batches = []
    while (item := reader.get_next()) is not None:
        batches.append(item)
    assert len(batches) == len(reader) == 9
    assert all(set(b) == {"image"} and b["image"].shape == (20, 1, 8, 8) and b["image"].dtype == np.float32 for b in batches)
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]), digits.calibration.images)
    assert reader.get_next() is None
    reader.rewind()
    np.testing.assert_array_equal(reader.get_next()["image"], digits.calibration.images[:20])


def test_reader_flat_layout_and_other_split(digits):
    reader = quant.DigitsCalibrationReader("pixels", flat=True, batch_size=60)
    first = reader.get_next()["pixels"]
    assert first.shape == (60, 64)
    np.testing.assert_array_equal(first, digits.calibration.flat[:60])
    test_reader = quant.DigitsCalibrationReader("image", split=digits.test, batch_size=540)
    np.testing.assert_array_equal(test_reader.get_next()["image"], digits.test.images)


@pytest.mark.parametrize("batch_size", [16, 0, 7, "20"])
def test_reader_rejects_ragged_or_invalid_batch_sizes(batch_size):
    with pytest.raises(ValueError, match="divide the 180 images"):
        quant.DigitsCalibrationReader("image", batch_size=batch_size)


def test_reader_rejects_bad_split_and_name():
    with pytest.raises(TypeError, match="Split"):
        quant.DigitsCalibrationReader("image", split=np.zeros((10, 1, 8, 8)))
    with pytest.raises(ValueError, match="input name"):
        quant.DigitsCalibrationReader("")


def test_reader_for_matches_model_layout(tmp_path):
    cnn_reader = quant.reader_for(ensure_digits_cnn())
    assert cnn_reader.input_name == "image" and cnn_reader.get_next()["image"].ndim == 4
    mlp_reader = quant.reader_for(tiny_mlp(tmp_path / "tiny.onnx"))
    assert mlp_reader.input_name == "pixels" and mlp_reader.get_next()["pixels"].shape == (20, 64)


def test_model_input_rejects_models_with_two_inputs(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])],
    )
    with pytest.raises(ValueError, match="one input"):
        quant.model_input(helper.make_model(graph))


def int8_weights(path):
    """The INT8 weight tensors (per-channel Conv/Gemm weights) of a quantized model."""
    return [numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer if t.data_type == TensorProto.INT8]


def test_int8_variants_use_7_bit_weights_by_default(tmp_path):
    pre = quant.preprocess(ensure_digits_cnn(), tmp_path / "pre.onnx")
    for make in (quant.make_static_int8, quant.make_dynamic_int8):
        reduced = int8_weights(make(pre, tmp_path / f"{make.__name__}_7.onnx"))
        full = int8_weights(make(pre, tmp_path / f"{make.__name__}_8.onnx", reduce_range=False))
        assert reduced and max(np.abs(w).max() for w in reduced) <= 64, make.__name__  # 255 * 64 * 2 < 32767
        assert max(np.abs(w).max() for w in full) == 127, make.__name__


def test_seven_bit_weights_give_the_same_logits_on_every_integer_kernel(tmp_path):
    # the portable property notebook 06 teaches: no saturation, so the U8U8 kernel and the QDQ reference math agree
    from labsupport.course.kernels import QDQ_AS_FLOAT, U8U8

    pre = quant.preprocess(ensure_digits_cnn(), tmp_path / "pre.onnx")
    out = quant.make_static_int8(pre, tmp_path / "int8.onnx")
    default = onnx_logits(out)
    np.testing.assert_array_equal(onnx_logits(out, config=U8U8), default)
    reference = onnx_logits(out, config=QDQ_AS_FLOAT)
    assert np.mean(reference.argmax(axis=1) == default.argmax(axis=1)) >= 0.99


def test_make_static_int8_rejects_unknown_options(tmp_path):
    with pytest.raises(ValueError, match="quant_format"):
        quant.make_static_int8("x.onnx", tmp_path / "y.onnx", quant_format="QDQQ")
    with pytest.raises(ValueError, match="method"):
        quant.make_static_int8("x.onnx", tmp_path / "y.onnx", method="Average")


# ---------------------------------------------------------------- variants and accuracy


def test_build_variants_makes_smaller_models(cnn_variants):
    # their accuracy needs trained weights: tests/integration/test_quantization_accuracy.py
    assert set(cnn_variants) == {"FP32", "INT8 dynamic", "INT8 static", "FP16", quant.AA_NAME}
    assert cnn_variants[quant.AA_NAME] == cnn_variants["FP32"]
    size = {name: path.stat().st_size for name, path in cnn_variants.items()}
    assert size["INT8 static"] < 0.6 * size["FP32"] and size["FP16"] < 0.7 * size["FP32"]


def test_build_variants_makes_int4_only_for_matmul_weights(tmp_path):
    assert not quant.has_matmul_weights(ensure_digits_cnn())  # Conv and Gemm: INT4 would change nothing
    mlp = tiny_mlp(tmp_path / "tiny.onnx")
    assert quant.has_matmul_weights(mlp)
    variants = quant.build_variants(mlp, tmp_path / "variants")
    assert list(variants) == ["FP32", "INT8 dynamic", "INT8 static", "INT4 weights", "FP16", quant.AA_NAME]


def test_accuracy_counts_correct_predictions_on_any_split(tmp_path, digits):
    model = tiny_mlp(tmp_path / "tiny.onnx")
    for split in (digits.test, digits.calibration):
        expected = np.mean(onnx_logits(model, split).argmax(axis=1) == split.labels)
        assert quant.accuracy(model, split) == pytest.approx(expected)
    assert quant.accuracy(model) == quant.accuracy(model, digits.test)
    with pytest.raises(TypeError, match="Split"):
        quant.accuracy(model, digits.test.images)


def test_inputs_for_matches_the_model_layout(tmp_path, digits):
    name, images = quant.inputs_for(ensure_digits_cnn(), digits.test)
    assert name == "image" and images.shape == (len(digits.test), 1, 8, 8)
    name, rows = quant.inputs_for(tiny_mlp(tmp_path / "tiny.onnx"), digits.test)
    assert name == "pixels"
    np.testing.assert_array_equal(rows, digits.test.flat)


def test_int4_quantizes_matmul_weights(tmp_path):
    src = tiny_mlp(tmp_path / "tiny.onnx")
    out = quant.make_int4(src, tmp_path / "int4.onnx", block_size=16)
    assert quant.precision_summary(out) == {"int4": "MatMulNBits x2", "fp32": "Add x1, Relu x1"}
    feeds = {"pixels": load_digits().test.flat[:8]}
    want = open_session(src, threads=1).run(None, feeds)[0]
    got = open_session(out, threads=1).run(None, feeds)[0]
    assert np.abs(got - want).max() < 0.25 * np.abs(want).max()  # 4-bit weights, 8-bit activations


def test_ensure_digits_cnn_int8_is_a_static_qdq_model():
    path = quant.ensure_digits_cnn_int8()
    assert path.name == "digits_cnn_int8.onnx"
    summary = quant.precision_summary(path)
    assert "Conv x2" in summary["int8"] and "fp32" not in summary
    assert max(np.abs(w).max() for w in int8_weights(path)) <= 64  # reduce_range: the same results on every CPU


# ---------------------------------------------------------------- what each node computes in


def test_node_precisions_of_each_format(cnn_variants):
    fp32 = quant.precision_summary(cnn_variants["FP32"])
    assert set(fp32) == {"fp32"}
    static = quant.precision_summary(cnn_variants["INT8 static"])
    assert "Conv x2" in static["int8"] and "Gemm x1" in static["int8"] and "fp32" not in static
    dynamic = quant.precision_summary(cnn_variants["INT8 dynamic"])
    assert "ConvInteger x2" in dynamic["int8"] and "Relu x2" in dynamic["fp32"]
    fp16 = quant.precision_summary(cnn_variants["FP16"])
    assert "Conv x2" in fp16["fp16"] and fp16["cast"] == "Cast x2"
    assert quant.fp32_nodes(cnn_variants["INT8 static"]) == []
    assert "node_relu (Relu)" in quant.fp32_nodes(cnn_variants["INT8 dynamic"])


def test_excluded_node_is_listed_as_fp32(tmp_path):
    pre = quant.preprocess(ensure_digits_cnn(), tmp_path / "pre.onnx")
    convs = [n.name for n in onnx.load(pre).graph.node if n.op_type == "Conv"]
    for conv in convs:  # the second one still reads Q/DQ data, but its weights stay float
        out = quant.make_static_int8(pre, tmp_path / "excl.onnx", nodes_to_exclude=[conv])
        assert f"{conv} (Conv)" in quant.fp32_nodes(out)


def test_integer_operand_types_name_activation_and_weight_types(cnn_variants, tmp_path):
    assert quant.integer_operand_types(cnn_variants["INT8 dynamic"]) == "ConvInteger uint8 x int8 x2, MatMulInteger uint8 x int8 x1"
    assert quant.integer_operand_types(cnn_variants["INT8 static"]) == "-"  # QDQ: ORT picks the kernels at load time
    pre = quant.preprocess(ensure_digits_cnn(), tmp_path / "pre.onnx")
    qoperator = quant.make_static_int8(pre, tmp_path / "qop.onnx", quant_format="QOperator")
    assert quant.integer_operand_types(qoperator) == "QLinearConv int8 x int8 x2, QGemm int8 x int8 x1"


def test_quiet_silences_prints_and_restores_logging(capsys):
    import logging

    with quant.quiet():
        print("noise")
        logging.getLogger("x").warning("noise")
    assert capsys.readouterr().out == ""
    assert logging.root.manager.disable == 0


def test_ensure_digits_cnn_int8_regenerates_when_stale():
    path = quant.ensure_digits_cnn_int8()
    stamp = {p.key: p.value for p in onnx.load(path).metadata_props}[quant.SOURCE_KEY]
    assert stamp == sha256_of(ensure_digits_cnn())
    before = path.stat().st_mtime_ns
    assert quant.ensure_digits_cnn_int8() == path and path.stat().st_mtime_ns == before  # up to date: kept
    model = onnx.load(path)
    onnx.helper.set_model_props(model, {quant.SOURCE_KEY: "stale"})
    onnx.save(model, path)
    quant.ensure_digits_cnn_int8()
    assert {p.key: p.value for p in onnx.load(path).metadata_props}[quant.SOURCE_KEY] == stamp


def test_ensure_digits_cnn_int8_regenerates_when_made_with_other_settings():
    # a file from before reduce_range (same source, no settings stamp) must not be reused
    path = quant.ensure_digits_cnn_int8()
    model = onnx.load(path)
    props = {p.key: p.value for p in model.metadata_props if p.key != quant.SETTINGS_KEY}
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, props)
    onnx.save(model, path)
    quant.ensure_digits_cnn_int8()
    stored = {p.key: p.value for p in onnx.load(path).metadata_props}
    assert json.loads(stored[quant.SETTINGS_KEY]) == quant.CNN_INT8_SETTINGS
