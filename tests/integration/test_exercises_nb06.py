"""Exercises of notebook 06: typical wrong answers fail (the reference solutions pass in test_all_exercises.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

from labsupport.course.data import load_digits
from labsupport.exercises import CORRECT, INCORRECT
from labsupport.exercises.nb06 import (
    BROKEN_PERCENTILE,
    CANCER_INPUT,
    RESTORE_THRESHOLD,
    cancer_accuracy,
    cancer_data,
    cancer_model,
    float_compute_nodes,
    mlp_preprocessed,
    q1,
    q2,
    q3,
    q4,
)
from labsupport.models.wide_mlp import ensure_digits_mlp
from labsupport.topics import quantization as quant

# ------------------------------------------------------------------ exercise 1


def reader_class(
    layout=lambda split: split.flat,
    key="pixels",
    dtype=np.float32,
    rejects=lambda count, size: count % size != 0,
    fixed_split=None,
    fixed_batch=None,
):
    """A reader class that gets one thing wrong (or nothing, with the defaults)."""

    class Reader(CalibrationDataReader):
        def __init__(self, split, batch_size):
            rows = np.asarray(layout(fixed_split or split), dtype=dtype)
            if rejects(len(rows), batch_size):
                raise ValueError("ragged")
            size = fixed_batch or batch_size
            self._batches = iter([{key: rows[i : i + size]} for i in range(0, len(rows), size)])

        def get_next(self):
            return next(self._batches, None)

    return Reader


class Endless(CalibrationDataReader):
    def __init__(self, split, batch_size):
        self._batch = {"pixels": split.flat[:batch_size]}

    def get_next(self):
        return self._batch


class Empty(CalibrationDataReader):
    def __init__(self, split, batch_size):
        pass

    def get_next(self):
        return None


def test_q1_the_right_class_passes_and_instances_do_not():
    right = reader_class()
    assert q1.evaluate(right).status == CORRECT
    outcome = q1.evaluate(right(load_digits().calibration, 20))
    assert outcome.status == INCORRECT and "class itself" in outcome.message


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (reader_class(layout=lambda split: split.images), "shape (N, 64)"),  # the CNN's layout
        (reader_class(key="image"), "'pixels'"),  # the CNN's input name
        (reader_class(dtype=np.float64), "float32"),
        (reader_class(fixed_split=load_digits().calibration), "read the split it is given"),  # hard-coded split
        (reader_class(rejects=lambda count, size: False), "must raise ValueError"),  # lets a ragged last batch through
        (reader_class(rejects=lambda count, size: size != 20), "but 60 divides"),  # only the batch size of the notebook
        (reader_class(rejects=lambda count, size: 180 % size != 0), "but 27 divides"),  # the calibration split's size, hard-coded
        (reader_class(rejects=lambda count, size: 540 % size != 0), "divides its"),  # the test split's size, hard-coded
        (reader_class(rejects=lambda count, size: len(load_digits().test.flat) % size != 0), "divides its"),  # a global split
        (reader_class(rejects=lambda count, size: size not in (20, 27, 60)), "divides its"),  # a whitelist of the checker's sizes
        (reader_class(layout=lambda split: split.flat[np.random.default_rng(0).integers(0, len(split), len(split))]), "no row repeated"),
        (reader_class(layout=lambda split: split.flat / 16), "as many as the split has, but not its rows"),  # rescaled rows
        (reader_class(fixed_batch=20), "every batch must have batch_size=60"),  # ignores its batch_size
        (reader_class(layout=lambda split: split.flat[:-60]), "not each of its images"),  # part of the split
        (reader_class(layout=lambda split: np.random.default_rng(0).random(split.flat.shape)), "but not its rows"),
        (Endless, "never returned None"),
        (Empty, "no data"),
        ("MlpReader", "class itself"),
    ],
)
def test_q1_rejects_typical_wrong_readers(wrong, reason):
    outcome = q1.evaluate(wrong)
    assert outcome.status == INCORRECT
    assert reason in outcome.message, outcome.message


def _batches(split, batch_size):
    rows = split.flat
    if len(rows) % batch_size:
        raise ValueError("ragged")
    return [{"pixels": rows[i : i + batch_size]} for i in range(0, len(rows), batch_size)]


class SharedList(CalibrationDataReader):
    """Batches on a class-level list every instance shares: a second reader adds its split to the first's."""

    batches: ClassVar[list] = []  # the mistake under test

    def __init__(self, split, batch_size):
        SharedList.batches.extend(_batches(split, batch_size))

    def get_next(self):
        return SharedList.batches.pop(0) if SharedList.batches else None


class ClassIterator(CalibrationDataReader):
    """The iterator on the class: each new reader replaces the one the earlier readers read."""

    def __init__(self, split, batch_size):
        ClassIterator.batches = iter(_batches(split, batch_size))

    def get_next(self):
        return next(ClassIterator.batches, None)


class LazyRefusal(CalibrationDataReader):
    """Raises ValueError only when get_next reaches the ragged batch, after handing out the others."""

    def __init__(self, split, batch_size):
        self._rows, self._size, self._start = split.flat, batch_size, 0

    def get_next(self):
        if self._start >= len(self._rows):
            return None
        batch = self._rows[self._start : self._start + self._size]
        self._start += self._size
        if len(batch) != self._size:
            raise ValueError("ragged")
        return {"pixels": batch}


class AssertingReader(CalibrationDataReader):
    """Refuses a ragged split with assert (AssertionError), not ValueError."""

    def __init__(self, split, batch_size):
        assert len(split.flat) % batch_size == 0
        self._batches = iter([{"pixels": split.flat[i : i + batch_size]} for i in range(0, len(split.flat), batch_size)])

    def get_next(self):
        return next(self._batches, None)


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (SharedList, "your readers share their batches"),
        (ClassIterator, "your readers share their batches"),
        (LazyRefusal, "only in get_next()"),
        (AssertingReader, "raised AssertionError"),
    ],
)
def test_q1_rejects_shared_batches_and_a_late_or_wrong_refusal(wrong, reason):
    outcome = q1.evaluate(wrong)
    assert outcome.status == INCORRECT
    assert reason in outcome.message, outcome.message


# ------------------------------------------------------------------ exercise 2


def quantizer(
    nodes=("node_matmul/MatMulAddFusion",),
    method=CalibrationMethod.Percentile,
    reduce_range=True,
    quant_format=QuantFormat.QDQ,
    split=None,
    per_channel=True,
    source=None,
    weight_type=QuantType.QInt8,
):
    """A learner's quantize_mlp(src, dst) with one choice made differently from the reference."""

    def quantize_mlp(src, dst):
        quantize_static(
            source or src,
            dst,
            quant.reader_for(source or src, split=split),
            quant_format=quant_format,
            per_channel=per_channel,
            reduce_range=reduce_range,
            calibrate_method=method,
            extra_options={"CalibPercentile": BROKEN_PERCENTILE},
            nodes_to_exclude=list(nodes),
            activation_type=QuantType.QUInt8 if weight_type == QuantType.QUInt8 else QuantType.QInt8,
            weight_type=weight_type,
        )

    return quantize_mlp


def gemm_names():
    return [node.name for node in onnx.load(mlp_preprocessed()).graph.node if node.op_type == "Gemm"]


def test_q2_scenario_loses_accuracy_and_only_one_node_restores_it(tmp_path):
    def accuracy_excluding(nodes):
        out = tmp_path / "mlp.onnx"
        with quant.quiet():
            quantizer(nodes)(mlp_preprocessed(), str(out))
        assert len(float_compute_nodes(onnx.load(out))) == len(nodes)
        return quant.accuracy(out)

    assert accuracy_excluding([]) < RESTORE_THRESHOLD - 0.01  # the broken calibration really hurts
    restoring = [name for name in gemm_names() if accuracy_excluding([name]) >= RESTORE_THRESHOLD]
    assert restoring == ["node_matmul/MatMulAddFusion"]


def test_q2_accepts_unsigned_7_bit_per_channel_weights():
    outcome = q2.evaluate(quantizer(weight_type=QuantType.QUInt8))  # U8U8 format, per channel, reduce_range: only the type differs
    assert outcome.status == CORRECT, outcome.message


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (lambda: quantizer(nodes=["node_matmul_2/MatMulAddFusion"]), "below 97%"),  # the last layer: not the culprit
        (lambda: quantizer(nodes=gemm_names()[:2]), "exclude a single node"),  # two layers in FP32
        (lambda: quantizer(nodes=[]), "every layer is quantized"),
        (lambda: quantizer(method=CalibrationMethod.MinMax), "Percentile calibration"),  # fixes calibration instead
        (lambda: quantizer(reduce_range=False), "reduce_range=True"),
        (lambda: quantizer(quant_format=QuantFormat.QOperator, reduce_range=False), "QOperator"),  # two mistakes: the format is named
        (lambda: quantizer(quant_format=QuantFormat.QOperator), "QOperator"),  # right node and 7 bits, wrong format
        (lambda: quantizer(split=load_digits().test), "never the test split"),  # calibrated on the test images
        (lambda: quantizer(per_channel=False), "per_channel=True"),  # one scale per weight tensor
        (lambda: quantizer(weight_type=QuantType.QUInt8, per_channel=False, reduce_range=False), "per_channel=True"),  # U8U8, per tensor
        (lambda: quantizer(weight_type=QuantType.QUInt8, reduce_range=False), "reduce_range=True"),  # U8U8, 8-bit weights
        (lambda: quantizer(nodes=["node_matmul"], source=str(ensure_digits_mlp())), "at src"),  # the raw export, not src
        (lambda: lambda src, dst: quantize_dynamic(src, dst), "that is quantize_dynamic"),  # its MatMulInteger is a QOperator op too
        (lambda: shutil.copy, "no QuantizeLinear"),  # no quantization at all
        (lambda: lambda src, dst: None, "wrote nothing"),
        (lambda: "node_matmul/MatMulAddFusion", "your function"),  # a node name instead of a function
    ],
)
def test_q2_rejects_typical_wrong_answers(wrong, reason):
    outcome = q2.evaluate(wrong())
    assert outcome.status == INCORRECT
    assert reason in outcome.message, outcome.message


def quantizer_with_types(activation_type=QuantType.QInt8, weight_type=QuantType.QInt8):
    """The reference choices, with the element types of the activations and weights given."""

    def quantize_mlp(src, dst):
        quantize_static(
            src,
            dst,
            quant.reader_for(src),
            per_channel=True,
            reduce_range=True,
            calibrate_method=CalibrationMethod.Percentile,
            extra_options={"CalibPercentile": BROKEN_PERCENTILE},
            nodes_to_exclude=["node_matmul/MatMulAddFusion"],
            activation_type=activation_type,
            weight_type=weight_type,
        )

    return quantize_mlp


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (quantizer_with_types(activation_type=QuantType.QInt16), "activations are quantized to INT16"),  # the type, not its ranges
        (quantizer_with_types(activation_type=QuantType.QUInt16), "activations are quantized to UINT16"),
        (quantizer_with_types(weight_type=QuantType.QInt16), "stored as INT16"),
        (quantizer_with_types(weight_type=QuantType.QInt4), "stored as INT4"),
    ],
)
def test_q2_names_element_types_that_are_not_eight_bits(wrong, reason):
    outcome = q2.evaluate(wrong)
    assert outcome.status == INCORRECT
    assert reason in outcome.message and "Percentile calibration" not in outcome.message, outcome.message


def test_q2_says_that_names_absent_from_the_graph_are_ignored_and_names_the_gemms():
    outcome = q2.evaluate(quantizer(nodes=["node_matmul"]))  # the exported MLP's name: quantize_static ignores it
    assert outcome.status == INCORRECT
    assert "silently ignores" in outcome.message and all(name in outcome.message for name in gemm_names()), outcome.message


def test_q2_accepts_quantizing_only_the_other_gemms():
    def only_the_others(src, dst):
        others = [name for name in gemm_names() if name != "node_matmul/MatMulAddFusion"]
        quantize_static(
            src,
            dst,
            quant.reader_for(src),
            per_channel=True,
            reduce_range=True,
            calibrate_method=CalibrationMethod.Percentile,
            extra_options={"CalibPercentile": BROKEN_PERCENTILE},
            nodes_to_quantize=others,
        )

    outcome = q2.evaluate(only_the_others)
    assert outcome.status == CORRECT, outcome.message


# ------------------------------------------------------------------ exercise 3


def test_q3_rejects_common_mistakes():
    assert "16-bit scale" in q3.evaluate(6.5).message  # 4 bits only
    fp32_scale = q3.evaluate(8.125).message  # FP32 scales, as the course's own INT4 file of an FP32 model, or FP16 scale + zero point
    assert "32-bit (FP32) scale" in fp32_scale and "FP16 zero point" in fp32_scale  # both computations give 8.125
    assert "GiB" in q3.evaluate(13e9 * 4.5 / 8 / 2**30).message
    assert "looks like bytes" in q3.evaluate(7.3125e9).message
    assert q3.evaluate(26.0).status == INCORRECT  # FP16
    assert q3.evaluate("7.3").status == INCORRECT
    assert q3.evaluate(7.31).status == CORRECT


@pytest.mark.parametrize(
    ("bits", "says"),
    [
        (4 + 16 / 32 + 4 / 32, "4-bit zero point"),  # an FP16 scale and a 4-bit zero point per block
        (4 + 16 / 32 + 8 / 32, "8-bit zero point"),
        (4 + 2 / 32, "2 bytes, 16 bits"),  # the scale's bytes counted as bits
        (4 + 16 / 64, "a block holds 32"),
        (8, "INT8"),
    ],
)
def test_q3_names_each_wrong_computation(bits, says):
    outcome = q3.evaluate(13e9 * bits / 8 / 1e9)
    assert outcome.status == INCORRECT and says in outcome.message, outcome.message


@pytest.mark.parametrize(("value", "says"), [(58.5, "gigabits"), (7312.5, "looks like MB"), (52.0, "FP32 model")])
def test_q3_names_wrong_units(value, says):
    outcome = q3.evaluate(value)
    assert outcome.status == INCORRECT and says in outcome.message, outcome.message


def test_q1_says_what_it_got_instead_of_a_class():
    outcome = q1.evaluate(None)
    assert outcome.status == INCORRECT and "got a NoneType" in outcome.message, outcome.message


# ------------------------------------------------------------------ exercise 4


def cancer_quantizer(dtype=np.float32, key=None, rows=None, **options):
    """A quantize_cancer(src, dst, calibration_rows) that gets one thing wrong (or nothing, with the defaults)."""
    settings = {"quant_format": QuantFormat.QDQ, "per_channel": True, "reduce_range": True, **options}

    def quantize_cancer(src, dst, calibration_rows):
        name = key or onnx.load(src).graph.input[0].name
        data = (calibration_rows if rows is None else rows).astype(dtype)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.batches = iter(np.split(data, 6))

            def get_next(self):
                batch = next(self.batches, None)
                return None if batch is None else {name: batch}

        quantize_static(src, dst, Reader(), **settings)

    return quantize_cancer


def test_q4_the_reference_model_is_the_exercise_s_and_the_right_answer_passes():
    assert onnx.load(cancer_model()).graph.input[0].name == CANCER_INPUT != "pixels"
    assert cancer_accuracy(cancer_model()) >= 0.9
    outcome = q4.evaluate(cancer_quantizer())
    assert outcome.status == CORRECT, outcome.message


def preprocessed_quantizer(src, dst, calibration_rows):
    """A right variant: the recipe's quant_pre_process first, then batches of 20."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = Path(dst).with_name("pre.onnx")
    quant_pre_process(src, pre)
    name, data = onnx.load(src).graph.input[0].name, calibration_rows.astype(np.float32)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(np.split(data, 3))

        def get_next(self):
            batch = next(self.batches, None)
            return None if batch is None else {name: batch}

    quantize_static(pre, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=True)


@pytest.mark.parametrize(
    "right",
    [preprocessed_quantizer, cancer_quantizer(extra_options={"ActivationSymmetric": True})],
)
def test_q4_accepts_right_variants(right):
    outcome = q4.evaluate(right)
    assert outcome.status == CORRECT, outcome.message


def dynamic_quantizer(src, dst, calibration_rows):
    quantize_dynamic(src, dst)


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (dynamic_quantizer, "quantize_dynamic"),
        (cancer_quantizer(dtype=np.float64), "float32"),
        (cancer_quantizer(key="pixels"), f"named {CANCER_INPUT!r}"),  # notebook 06's MLP input, copied
        (cancer_quantizer(per_channel=False), "per_channel=True"),
        (cancer_quantizer(reduce_range=False), "reduce_range=True"),
        (cancer_quantizer(quant_format=QuantFormat.QOperator), "QuantFormat.QDQ"),
        (cancer_quantizer(rows=np.random.default_rng(0).uniform(0, 0.01, (60, 30))), "feed every row of calibration_rows"),
        # calibration data that keeps the accuracy within 2 points all the same: caught by the input's range
        (cancer_quantizer(rows=np.zeros((60, 30))), "feed every row of calibration_rows"),
        (cancer_quantizer(rows=np.random.default_rng(0).standard_normal((60, 30))), "feed every row of calibration_rows"),
        (cancer_quantizer(rows=np.repeat(cancer_data()["calibration"][:1], 60, axis=0)), "feed every row of calibration_rows"),
        (lambda src, dst, rows: shutil.copy(src, dst), "no QuantizeLinear"),
        (lambda src, dst, rows: None, "wrote nothing"),
        ("mlp_int8_static.onnx", "your function"),
    ],
)
def test_q4_rejects_typical_wrong_answers(wrong, reason):
    outcome = q4.evaluate(wrong)
    assert outcome.status == INCORRECT
    assert reason in outcome.message, outcome.message
