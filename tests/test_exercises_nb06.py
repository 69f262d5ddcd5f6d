"""Exercises of notebook 06: every reference solution passes, typical wrong answers fail, ____ is not attempted."""

from __future__ import annotations

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

from labsupport.data import load_digits
from labsupport.exercises import CORRECT, INCORRECT
from labsupport.exercises.nb06 import BROKEN_PERCENTILE, RESTORE_THRESHOLD, accuracy_excluding, mlp_node_names, q1, q2, q3


class ListReader(CalibrationDataReader):
    def __init__(self, batches):
        self._batches = iter(batches)

    def get_next(self):
        return next(self._batches, None)


def batches_of(images, size, key="image"):
    return ListReader([{key: images[i:i + size]} for i in range(0, len(images), size)])


def test_q1_rejects_typical_wrong_readers():
    digits = load_digits()
    cases = {
        "test split": (batches_of(digits.test.images, 20), "test split"),
        "ragged batches": (batches_of(digits.calibration.images, 16), "different sizes"),
        "wrong input name": (batches_of(digits.calibration.images, 20, key="input"), "'image'"),
        "random data": (batches_of(np.random.default_rng(0).random((180, 1, 8, 8), dtype=np.float32), 20), "calibration images"),
        "flat rows": (batches_of(digits.calibration.flat, 20), "shape"),
        "half the split": (batches_of(digits.calibration.images[:100], 20), "each of the 180"),
        "the class": (ListReader, "instance"),
        "not a reader": (digits.calibration.images, "get_next"),
        "float64": (batches_of(digits.calibration.images.astype(np.float64), 20), "float32"),
        "empty": (ListReader([]), "no data"),
    }
    for name, (answer, reason) in cases.items():
        outcome = q1.evaluate(answer)
        assert outcome.status == INCORRECT, name
        assert reason in outcome.message, (name, outcome.message)


def test_q2_scenario_loses_accuracy_and_only_one_node_restores_it():
    assert accuracy_excluding("") < RESTORE_THRESHOLD - 0.01  # the broken calibration really hurts
    restoring = [name for name in mlp_node_names() if accuracy_excluding(name) >= RESTORE_THRESHOLD]
    assert restoring == [q2.reference_answer()]
    assert BROKEN_PERCENTILE == 80.0


def test_q2_rejects_wrong_nodes_and_types():
    right = q2.reference_answer()
    wrong_nodes = [name for name in mlp_node_names() if name != right]
    outcome = q2.evaluate(wrong_nodes[-1])
    assert outcome.status == INCORRECT and "below 97%" in outcome.message
    assert "not a node" in q2.evaluate("node_conv").message
    assert "not a list" in q2.evaluate([right]).message
    assert q2.evaluate(3).status == INCORRECT


def test_q3_rejects_common_mistakes():
    assert "16-bit scale" in q3.evaluate(6.5).message  # 4 bits only
    assert "GiB" in q3.evaluate(13e9 * 4.5 / 8 / 2**30).message
    assert q3.evaluate(26.0).status == INCORRECT  # FP16
    assert q3.evaluate("7.3").status == INCORRECT
    assert q3.evaluate(7.31).status == CORRECT
