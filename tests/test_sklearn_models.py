"""Tests of labsupport.sklearn_models (notebook 04): the table, the pipelines and their skl2onnx parity."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from skl2onnx import to_onnx

from labsupport import sklearn_models as sm
from labsupport.compare import compare
from labsupport.data import load_digits


def _session(proto):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


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


@pytest.mark.parametrize("factory", [sm.digits_logreg, sm.digits_forest])
def test_digits_models_convert_with_full_parity(factory, tmp_path):
    model = sm.fit_on_digits(factory())
    test = load_digits().test
    assert model.score(test.flat, test.labels) > 0.9
    path = tmp_path / "m.onnx"
    proto = sm.convert_digits_model(model, path)
    onnx.checker.check_model(proto)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["label", "probabilities"]
    assert session.get_inputs()[0].name == "pixels" and session.get_outputs()[1].type == "tensor(float)"
    labels, probabilities = session.run(None, {"pixels": test.flat})
    np.testing.assert_array_equal(labels, model.predict(test.flat))
    assert compare(model.predict_proba(test.flat), probabilities, atol=1e-5).passed


def test_zipmap_default_gives_a_list_of_dicts():
    model = sm.fit_on_digits(sm.digits_logreg())
    session = _session(sm.convert_digits_model(model, zipmap=True))
    assert session.get_outputs()[1].type.startswith("seq(map(")
    _, probabilities = session.run(None, {"pixels": load_digits().test.flat[:2]})
    assert isinstance(probabilities, list) and sorted(probabilities[0]) == list(range(10))


def test_mixed_pipeline_converts_with_one_input_per_column():
    frame, churned = sm.make_mixed_table()
    model = sm.mixed_pipeline().fit(frame[:300], churned[:300])
    types = sm.initial_types(frame)
    assert [name for name, _ in types] == list(frame.columns)
    proto = to_onnx(model, initial_types=types, options={"zipmap": False}, target_opset=sm.DEFAULT_OPSET)
    feeds = sm.onnx_inputs(frame[300:])
    assert feeds["age"].dtype == np.float32 and feeds["plan"].dtype == object and feeds["plan"].shape == (100, 1)
    labels, probabilities = _session(proto).run(None, feeds)
    np.testing.assert_array_equal(labels, model.predict(frame[300:]))
    assert compare(model.predict_proba(frame[300:]), probabilities, atol=1e-5).passed


def test_bad_arguments_say_what_was_expected():
    with pytest.raises(TypeError, match="DataFrame"):
        sm.onnx_inputs(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="DataFrame"):
        sm.initial_types([[1, 2]])
    with pytest.raises(TypeError, match="estimator"):
        sm.fit_on_digits("model")
    with pytest.raises(ValueError, match="fitted"):
        sm.convert_digits_model(sm.digits_logreg())
    with pytest.raises(ValueError, match=".onnx"):
        sm.convert_digits_model(sm.fit_on_digits(sm.digits_forest()), "model.pkl")


def test_ensure_converts_only_when_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(sm, "artifact", lambda name: tmp_path / name)
    path = sm.ensure_digits_sklearn()
    assert path == tmp_path / "digits_sklearn.onnx" and path.is_file()
    stamp = path.stat().st_mtime_ns
    assert sm.ensure_digits_sklearn() == path and path.stat().st_mtime_ns == stamp
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    labels, _ = session.run(None, {"pixels": load_digits().test.flat})
    assert np.mean(labels == load_digits().test.labels) > 0.9


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


def test_converted_digits_model_has_tidy_opset_imports():
    # raw skl2onnx output lists ai.onnx twice, in an order that can change from run to run
    proto = sm.convert_digits_model(sm.fit_on_digits(sm.digits_logreg()))
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", 18), ("ai.onnx.ml", 1)]
