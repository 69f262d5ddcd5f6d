"""labsupport.models.digits_sklearn (notebook 04): the pipelines fitted on the digits and their skl2onnx parity."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from skl2onnx import to_onnx

from labsupport.course.compare import compare
from labsupport.course.data import load_digits
from labsupport.models import digits_sklearn as sm
from labsupport.onnxutil.sessions import open_session


@pytest.fixture(scope="module")
def logreg():
    """The digits pipeline of notebook 04, fitted once for the tests that only convert it."""
    return sm.fit_on_digits(sm.digits_logreg())


@pytest.mark.parametrize("name", ["logreg", "forest"])
def test_digits_models_convert_with_full_parity(name, logreg, tmp_path):
    model = logreg if name == "logreg" else sm.fit_on_digits(sm.digits_forest())
    test = load_digits().test
    assert model.score(test.flat, test.labels) > 0.9
    path = tmp_path / "m.onnx"
    proto = sm.convert_digits_model(model, path)
    onnx.checker.check_model(proto)
    session = open_session(path)
    assert [o.name for o in session.get_outputs()] == ["label", "probabilities"]
    assert session.get_inputs()[0].name == "pixels" and session.get_outputs()[1].type == "tensor(float)"
    labels, probabilities = session.run(None, {"pixels": test.flat})
    np.testing.assert_array_equal(labels, model.predict(test.flat))
    assert compare(model.predict_proba(test.flat), probabilities, atol=1e-5).passed


def test_zipmap_default_gives_a_list_of_dicts(logreg):
    session = open_session(sm.convert_digits_model(logreg, zipmap=True))
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
    labels, probabilities = open_session(proto).run(None, feeds)
    np.testing.assert_array_equal(labels, model.predict(frame[300:]))
    assert compare(model.predict_proba(frame[300:]), probabilities, atol=1e-5).passed


def test_ensure_converts_only_when_missing(monkeypatch, tmp_path, logreg):
    fitted = []
    monkeypatch.setattr(sm, "artifact", lambda name: tmp_path / name)
    monkeypatch.setattr(sm, "fit_on_digits", lambda model: fitted.append(type(model).__name__) or logreg)
    path = sm.ensure_digits_sklearn()
    assert path == tmp_path / "digits_sklearn.onnx" and path.is_file() and fitted == ["Pipeline"]
    stamp = path.stat().st_mtime_ns
    assert sm.ensure_digits_sklearn() == path and path.stat().st_mtime_ns == stamp and fitted == ["Pipeline"]
    labels, _ = open_session(path).run(None, {"pixels": load_digits().test.flat})
    assert np.mean(labels == load_digits().test.labels) > 0.9


def test_converted_digits_model_has_tidy_opset_imports(logreg):
    # raw skl2onnx output lists ai.onnx twice, in an order that can change from run to run
    proto = sm.convert_digits_model(logreg)
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", 18), ("ai.onnx.ml", 1)]
