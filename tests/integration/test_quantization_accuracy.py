"""What quantization does to the accuracy of the trained course CNN (notebook 06); the mechanics are in tests/unit."""

from __future__ import annotations

import onnx
import pytest

from labsupport.bench.quantization import measure_variants
from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import quantization as quant


@pytest.fixture(scope="module")
def cnn_variants(tmp_path_factory):
    return quant.build_variants(ensure_digits_cnn(), tmp_path_factory.mktemp("variants"), int4=False)


def test_the_trained_cnn_is_accurate_on_test_and_calibration_splits():
    cnn = ensure_digits_cnn()
    assert quant.accuracy(cnn) > 0.95
    assert quant.accuracy(cnn, load_digits().calibration) > 0.9


def test_every_variant_stays_within_one_point_of_fp32(cnn_variants):
    fp32 = quant.accuracy(cnn_variants["FP32"])
    for name, path in cnn_variants.items():
        assert abs(quant.accuracy(path) - fp32) <= 0.01, name
    report = measure_variants(cnn_variants, model="cnn", timings=False)
    assert all(abs(report.accuracy_delta(name)) <= 1.0 for name in cnn_variants)
    assert report.within(1.0)


def test_entropy_calibration_with_the_reader_keeps_the_accuracy(tmp_path):
    # Entropy (a histogram calibrator) works with the reader's equal batches
    pre = quant.preprocess(ensure_digits_cnn(), tmp_path / "pre.onnx")
    out = quant.make_static_int8(pre, tmp_path / "int8.onnx", method="Entropy")
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in onnx.load(out).graph.node}
    assert quant.accuracy(out) > 0.95


def test_the_course_int8_cnn_is_within_one_point_of_fp32():
    assert quant.accuracy(quant.ensure_digits_cnn_int8()) >= quant.accuracy(ensure_digits_cnn()) - 0.01
