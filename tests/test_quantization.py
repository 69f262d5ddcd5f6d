"""Tests of labsupport.quantization (notebook 06): calibration reader, variants, measurement, CPU features, precisions."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from labsupport import quantization as quant
from labsupport.data import load_digits
from labsupport.models import ensure_digits_cnn


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
        nodes, "tiny_mlp",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [w1, w2, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
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
        [helper.make_node("Add", ["a", "b"], ["c"])], "two",
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
    from labsupport.kernels import QDQ_AS_FLOAT, U8U8

    pre = quant.preprocess(ensure_digits_cnn(), tmp_path / "pre.onnx")
    out = quant.make_static_int8(pre, tmp_path / "int8.onnx")
    default = quant.logits(out)
    np.testing.assert_array_equal(quant.logits(out, config=U8U8), default)
    reference = quant.logits(out, config=QDQ_AS_FLOAT)
    assert np.mean(reference.argmax(axis=1) == default.argmax(axis=1)) >= 0.99


def test_static_quantization_with_the_reader_calibrates_on_real_data(tmp_path):
    # Entropy (a histogram calibrator) works with the equal batches
    pre = quant.preprocess(ensure_digits_cnn(), tmp_path / "pre.onnx")
    out = quant.make_static_int8(pre, tmp_path / "int8.onnx", method="Entropy")
    ops = {n.op_type for n in onnx.load(out).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert quant.accuracy(out) > 0.95


def test_make_static_int8_rejects_unknown_options(tmp_path):
    with pytest.raises(ValueError, match="quant_format"):
        quant.make_static_int8("x.onnx", tmp_path / "y.onnx", quant_format="QDQQ")
    with pytest.raises(ValueError, match="method"):
        quant.make_static_int8("x.onnx", tmp_path / "y.onnx", method="Average")


# ---------------------------------------------------------------- variants and measurement


def test_build_variants_makes_smaller_accurate_models(cnn_variants):
    assert set(cnn_variants) == {"FP32", "INT8 dynamic", "INT8 static", "FP16", quant.AA_NAME}
    assert cnn_variants[quant.AA_NAME] == cnn_variants["FP32"]
    report = quant.measure_variants(cnn_variants, model="cnn", timings=False)
    assert report.size_ratio("FP32") == 1.0
    assert report.size_ratio("INT8 static") < 0.6 and report.size_ratio("FP16") < 0.7
    for name in cnn_variants:
        assert abs(report.accuracy_delta(name)) <= 1.0, name
    frame = report.to_frame(timings=False)
    assert list(frame.index) == list(cnn_variants) and "ms @ batch 1" not in frame.columns
    assert "accuracy %" not in report.to_frame(timings=False, accuracy=False).columns
    assert report.within(1.0)


def test_build_variants_makes_int4_only_for_matmul_weights(tmp_path):
    assert not quant.has_matmul_weights(ensure_digits_cnn())  # Conv and Gemm: INT4 would change nothing
    mlp = tiny_mlp(tmp_path / "tiny.onnx")
    assert quant.has_matmul_weights(mlp)
    variants = quant.build_variants(mlp, tmp_path / "variants")
    assert list(variants) == ["FP32", "INT8 dynamic", "INT8 static", "INT4 weights", "FP16", quant.AA_NAME]


def test_measure_variants_times_each_batch_size(cnn_variants):
    report = quant.measure_variants(cnn_variants, model="cnn", batch_sizes=(1, 8), repeat=2, warmup=1)
    for result in report.results:
        assert set(result.latency_ms) == {1, 8} and all(ms > 0 for ms in result.latency_ms.values())
    assert report.latency_ratio("FP32", 8) == pytest.approx(1.0)
    rows = report.rows()
    assert {"ms @ batch 1", "latency ratio @ 8"} <= set(rows[0])
    payload = report.to_dict()
    json.dumps(payload)
    assert payload["baseline"] == "FP32" and len(payload["results"]) == 5
    with pytest.raises(KeyError, match="batch 64"):
        report.latency_ratio("FP32", 64)
    ax = report.plot(batch_size=8)
    assert ax.get_title() == "cnn"


def test_measure_variants_errors(cnn_variants):
    with pytest.raises(KeyError, match="baseline"):
        quant.measure_variants(cnn_variants, baseline="FP64", timings=False)
    with pytest.raises(ValueError, match="batch_sizes"):
        quant.measure_variants(cnn_variants, batch_sizes=(0,))
    report = quant.measure_variants(cnn_variants, timings=False)
    with pytest.raises(KeyError, match="no variant"):
        report.get("INT3")


def test_accuracy_and_file_kb(tmp_path, digits):
    cnn = ensure_digits_cnn()
    assert quant.accuracy(cnn) > 0.95
    assert quant.accuracy(cnn, digits.calibration) > 0.9
    assert quant.file_kb(cnn) == pytest.approx(cnn.stat().st_size / 1024)
    with pytest.raises(TypeError, match="Split"):
        quant.accuracy(cnn, digits.test.images)
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        quant.file_kb(tmp_path / "missing.onnx")


def test_int4_quantizes_matmul_weights(tmp_path):
    src = tiny_mlp(tmp_path / "tiny.onnx")
    out = quant.make_int4(src, tmp_path / "int4.onnx", block_size=16)
    assert quant.precision_summary(out) == {"int4": "MatMulNBits x2", "fp32": "Add x1, Relu x1"}
    feeds = {"pixels": load_digits().test.flat[:8]}
    want = quant.session(src).run(None, feeds)[0]
    got = quant.session(out).run(None, feeds)[0]
    assert np.abs(got - want).max() < 0.25 * np.abs(want).max()  # 4-bit weights, 8-bit activations


def test_timing_noise_and_speed_text():
    def report(aa_ms, int8_ms):
        return quant.VariantReport("m", "FP32", [
            quant.VariantResult("FP32", 100.0, 0.9, {64: 10.0}),
            quant.VariantResult(quant.AA_NAME, 100.0, 0.9, {64: aa_ms}),
            quant.VariantResult("INT8", 25.0, 0.9, {64: int8_ms}),
        ])
    assert report(10.5, 5.0).timing_noise(64) == pytest.approx(0.10)  # the floor
    assert report(8.5, 5.0).timing_noise(64) == pytest.approx(0.15)  # a noisier A/A run widens it
    assert report(10.0, 2.5).speed_text("INT8", 64) == "0.25x the FP32 time at batch 64: 4.00x faster than FP32"
    assert report(10.0, 30.0).speed_text("INT8", 64).endswith(": 3.00x slower than FP32")
    assert "as fast as (within ±" in report(8.5, 11.2).speed_text("INT8", 64)
    without_aa = quant.VariantReport("m", "FP32", [quant.VariantResult("FP32", 1.0, 0.9, {1: 1.0})])
    assert without_aa.timing_noise(1) == quant.NOISE_FLOOR


def test_check_targets_reports_met_and_missed():
    def report(model, size, latency, acc):
        return quant.VariantReport(model, "FP32", [
            quant.VariantResult("FP32", 100.0, 0.98, {64: 10.0}),
            quant.VariantResult("INT8 dynamic", size, acc, {64: latency}),
            quant.VariantResult("INT8 static", size, acc, {64: latency}),
        ])
    good = quant.check_targets(report("mlp", 25.0, 3.0, 0.975), report("cnn", 40.0, 9.0, 0.975))
    assert all(t.met for t in good) and len(good) == 7
    bad = quant.check_targets(report("mlp", 30.0, 6.0, 0.95), report("cnn", 40.0, 9.0, 0.95))
    assert not any(t.met for t in bad)
    assert "MISSED" in str(bad[0]) and "target <= 0.27" in str(bad[0])
    assert [t.timing for t in bad[:3]] == [False, True, False]
    # accuracy targets: a signed change, higher is better, printed at the tables' precision
    assert str(bad[2]).endswith("INT8 dynamic accuracy change (points) = -3.0 (target >= -1)")
    assert str(good[2]).startswith("MET ") and "= -0.5 (target >= -1)" in str(good[2])
    # verdicts print the value only where it is the same on every CPU and run (size ratios)
    assert good[0].verdict == str(good[0])
    assert good[1].verdict == "MET   mlp: INT8 dynamic latency ratio @ batch 64 <= 0.5"
    assert bad[2].verdict == "MISSED  mlp: INT8 dynamic accuracy change (points) >= -1"


def test_accuracy_delta_is_the_difference_of_the_printed_accuracies():
    # 536/540 = 99.26 % and 537/540 = 99.44 %: printed 99.3 and 99.4, so the change is +0.1 (not the exact +0.19)
    report = quant.VariantReport("cnn", "FP32", [
        quant.VariantResult("FP32", 47.0, 536 / 540), quant.VariantResult("INT8 static", 21.0, 537 / 540),
        quant.VariantResult("worse", 21.0, 530 / 540),
    ])
    assert report.accuracy_delta("INT8 static") == 0.1
    assert report.accuracy_delta("FP32") == 0.0
    assert report.accuracy_delta("worse") == -1.2  # 98.1 - 99.3
    rows = {row["variant"]: row for row in report.rows(timings=False)}
    assert (rows["FP32"]["accuracy %"], rows["INT8 static"]["accuracy %"]) == (99.3, 99.4)
    assert rows["INT8 static"]["Δ acc (points)"] == "+0.1" and rows["worse"]["Δ acc (points)"] == "-1.2"
    with pytest.raises(KeyError, match="no variant"):
        report.accuracy_delta("missing")


def test_ensure_digits_cnn_int8_is_a_static_qdq_model():
    path = quant.ensure_digits_cnn_int8()
    assert path.name == "digits_cnn_int8.onnx"
    summary = quant.precision_summary(path)
    assert "Conv x2" in summary["int8"] and "fp32" not in summary
    assert max(np.abs(w).max() for w in int8_weights(path)) <= 64  # reduce_range: the same results on every CPU
    assert quant.accuracy(path) >= quant.accuracy(ensure_digits_cnn()) - 0.01


# ---------------------------------------------------------------- CPU and graph


X86_CPUINFO = """processor : 0
vendor_id : GenuineIntel
flags : fpu sse sse2 avx avx2 fma avx512f avx512bw avx512_vnni
"""
ARM_CPUINFO = """processor : 0
Features : fp asimd evtstrm aes asimddp i8mm
"""
OLD_CPUINFO = "flags : fpu sse sse2 avx\n"
AVX2_CPUINFO = "flags : fpu sse sse2 avx avx2 fma f16c\n"


def test_parse_cpuinfo_x86_arm_and_old():
    x86 = quant.parse_cpuinfo(X86_CPUINFO, "x86_64")
    assert x86.features["avx512_vnni"] and x86.features["avx2"] and not x86.features["amx_int8"]
    assert x86.int8_dot_product and "dot-product" in str(x86)
    arm = quant.parse_cpuinfo(ARM_CPUINFO, "aarch64")
    assert arm.features["asimddp"] and arm.features["i8mm"] and arm.int8_dot_product
    old = quant.parse_cpuinfo(OLD_CPUINFO, "x86_64")
    assert not old.int8_dot_product and "No INT8 dot-product" in str(old)


def test_which_cpus_saturate_u8s8_products():
    avx2 = quant.parse_cpuinfo(AVX2_CPUINFO, "x86_64")
    assert avx2.u8s8_saturates and "VPMADDUBSW" in str(avx2)
    vnni = quant.parse_cpuinfo(X86_CPUINFO, "x86_64")
    assert not vnni.u8s8_saturates and "exactly" in str(vnni)
    arm = quant.parse_cpuinfo(ARM_CPUINFO, "aarch64")
    assert not arm.u8s8_saturates and "exactly" in str(arm)


def test_cpu_features_on_this_machine():
    cpu = quant.cpu_features()
    assert cpu.arch
    assert isinstance(cpu.int8_dot_product, bool)
    assert "CPU architecture" in str(cpu)


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


# ---------------------------------------------------------------- memory arithmetic


def test_weight_bytes_and_llm_table():
    assert quant.weight_bytes(7e9, 32) == 28e9
    assert quant.weight_bytes(7e9, 4, block_size=32) == pytest.approx(7e9 * 4.5 / 8)
    rows = quant.llm_memory_table(7e9)
    assert [r["GB (1e9 bytes)"] for r in rows] == [28.0, 14.0, 7.0, 3.9]
    assert rows[-1]["bits / weight"] == 4.5
    with pytest.raises(ValueError, match="positive"):
        quant.weight_bytes(0, 8)


def test_quiet_silences_prints_and_restores_logging(capsys):
    import logging

    with quant.quiet():
        print("noise")
        logging.getLogger("x").warning("noise")
    assert capsys.readouterr().out == ""
    assert logging.root.manager.disable == 0


def test_save_json(tmp_path):
    path = quant.save_json(tmp_path / "x.json", {"ratio": np.float32(0.25)})
    assert json.loads(path.read_text())["ratio"] == pytest.approx(0.25)


# ---------------------------------------------------------------- the wide MLP


def test_small_wide_mlp_trains_deterministically_and_exports_matmuls(tmp_path):
    import torch

    first = quant.train_wide_mlp(epochs=2, width=64)
    second = quant.train_wide_mlp(epochs=2, width=64)
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a, b)
    path = quant.export_wide_mlp(first, tmp_path / "mlp.onnx")
    ops = [n.op_type for n in onnx.load(path).graph.node]
    assert ops.count("MatMul") == 3 and ops.count("Add") == 3
    assert quant.model_input(path) == ("pixels", 2)
    assert quant.accuracy(path) > 0.5
    with torch.no_grad():
        want = first(torch.from_numpy(load_digits().test.flat[:5])).numpy()
    got = quant.session(path).run(None, {"pixels": load_digits().test.flat[:5]})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_wide_mlp_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="epochs"):
        quant.train_wide_mlp(epochs=0)
    with pytest.raises(ValueError, match="width"):
        quant.build_wide_mlp(0)
    with pytest.raises(ValueError, match=".onnx"):
        quant.export_wide_mlp(quant.build_wide_mlp(8), tmp_path / "mlp.pt")


def test_ensure_digits_cnn_int8_regenerates_when_stale():
    path = quant.ensure_digits_cnn_int8()
    stamp = {p.key: p.value for p in onnx.load(path).metadata_props}[quant.SOURCE_KEY]
    assert stamp == quant._sha256(ensure_digits_cnn())
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
