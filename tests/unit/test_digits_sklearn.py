"""labsupport.models.digits_sklearn (notebook 04) without fitting anything: the data made in code, the checks, the opset tidying.

Fitting and converting are in tests/integration/test_digits_sklearn.py."""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd
import pytest

from labsupport.models import digits_sklearn as sm


def test_mixed_table_is_seeded_typed_and_learnable():
    frame, churned = sm.make_mixed_table(200)
    again, churned_again = sm.make_mixed_table(200)
    pd.testing.assert_frame_equal(frame, again)
    np.testing.assert_array_equal(churned, churned_again)
    assert not sm.make_mixed_table(200, seed=1)[0].equals(frame)
    assert list(frame.columns) == [*sm.NUMERIC_COLUMNS, *sm.CATEGORICAL_COLUMNS] and len(frame) == 200
    assert set(frame["plan"]) <= set(sm.PLANS) and frame["age"].dtype == np.float64
    assert 0.2 < churned.mean() < 0.8
    with pytest.raises(ValueError, match=">= 10"):
        sm.make_mixed_table(3)


def test_bad_arguments_say_what_was_expected():
    with pytest.raises(TypeError, match="DataFrame"):
        sm.onnx_inputs(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="DataFrame"):
        sm.initial_types([[1, 2]])
    with pytest.raises(TypeError, match="estimator"):
        sm.fit_on_digits("model")
    with pytest.raises(ValueError, match="fitted"):
        sm.convert_digits_model(sm.digits_logreg())
    with pytest.raises(ValueError, match=r"\.onnx"):
        sm.convert_digits_model(sm.digits_forest(), "model.pkl")  # the file name is checked first


def test_sensor_log_needs_float64():
    X, busy = sm.make_sensor_log(500)
    again, _ = sm.make_sensor_log(500)
    np.testing.assert_array_equal(X, again)
    assert X.dtype == np.float64 and X.shape == (500, 2) and set(np.unique(busy)) == {0, 1}
    hours = (X[:, 0] % 86400) / 3600
    np.testing.assert_array_equal(busy, ((hours >= 9) & (hours < 17)).astype(int))
    rounding = np.abs(X[:, 0].astype(np.float32).astype(np.float64) - X[:, 0])
    assert rounding.max() > 10  # float32 loses whole seconds: the point of this data set
    with pytest.raises(ValueError, match=">= 10"):
        sm.make_sensor_log(0)


def test_tidy_opset_imports_sorts_and_deduplicates():
    proto = onnx.ModelProto()
    for domain, version in [("ai.onnx.ml", 1), ("", 18), ("", 17), ("com.microsoft", 1)]:
        proto.opset_import.add(domain=domain, version=version)
    assert sm.tidy_opset_imports(proto) is proto
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", 18), ("ai.onnx.ml", 1), ("com.microsoft", 1)]
    with pytest.raises(TypeError, match="ModelProto"):
        sm.tidy_opset_imports(b"bytes")
