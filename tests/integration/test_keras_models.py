"""Tests of labsupport.models.digits_keras (notebook 03): layout, deterministic training, tf2onnx export parity."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

km = pytest.importorskip("labsupport.models.digits_keras")
from labsupport.course.compare import compare  # noqa: E402
from labsupport.course.data import load_digits  # noqa: E402


@pytest.fixture(scope="module")
def trained():
    model, history = km.train_digits_keras(epochs=2, progress=False)
    return model, history


def test_to_nhwc_moves_the_channel_last_and_rejects_other_shapes():
    images = np.arange(2 * 64, dtype=np.float32).reshape(2, 1, 8, 8)
    nhwc = km.to_nhwc(images)
    assert nhwc.shape == (2, 8, 8, 1) and nhwc.dtype == np.float32
    np.testing.assert_array_equal(nhwc[..., 0], images[:, 0])
    with pytest.raises(ValueError, match=r"\(N, 1, 8, 8\)"):
        km.to_nhwc(np.zeros((2, 8, 8, 1)))


def test_build_is_seeded_and_named():
    a, b, c = km.build_digits_keras(seed=1), km.build_digits_keras(seed=1), km.build_digits_keras(seed=2)
    x = load_digits().test.images[:3]
    np.testing.assert_array_equal(km.predict_logits(a, x), km.predict_logits(b, x))
    assert not np.allclose(km.predict_logits(a, x), km.predict_logits(c, x))
    assert a.inputs[0].shape[1:] == (8, 8, 1) and a.outputs[0].shape[1:] == (10,)


def test_training_learns_and_is_deterministic(trained):
    model, history = trained
    assert len(history["loss"]) == 2 and history["loss"][1] < history["loss"][0]
    assert km.accuracy(model, load_digits().test) > 0.5  # chance is 0.1; two epochs are enough to learn
    again, history_again = km.train_digits_keras(epochs=2, progress=False)
    assert history_again["loss"] == history["loss"]
    x = load_digits().test.images[:16]
    np.testing.assert_array_equal(km.predict_logits(again, x), km.predict_logits(model, x))


def test_bad_arguments_say_what_was_expected(trained):
    with pytest.raises(ValueError, match="positive whole number"):
        km.train_digits_keras(epochs=0)
    with pytest.raises(TypeError, match=r"keras\.Model"):
        km.predict_logits("model", load_digits().test.images[:1])
    with pytest.raises(TypeError, match="Split"):
        km.accuracy(trained[0], load_digits().test.images)
    with pytest.raises(TypeError, match=r"keras\.Model"):
        km.convert_digits_keras(object())
    with pytest.raises(ValueError, match=r"\.onnx"):
        km.convert_digits_keras(trained[0], "model.txt")


@pytest.mark.parametrize("nchw", [True, False])
def test_conversion_matches_tensorflow_at_any_batch_size(trained, tmp_path, nchw):
    model = trained[0]
    path = tmp_path / "k.onnx"
    proto = km.convert_digits_keras(model, path, nchw=nchw)
    onnx.checker.check_model(proto)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, out.name) == ("image", "logits")
    assert inp.shape == (["batch", 1, 8, 8] if nchw else ["batch", 8, 8, 1]) and out.shape == ["batch", 10]
    images = load_digits().test.images
    for batch in (1, 33):
        x = images[:batch] if nchw else km.to_nhwc(images[:batch])
        report = compare(km.predict_logits(model, images[:batch]), session.run(None, {"image": x})[0], atol=1e-4)
        assert report.passed and report.argmax_agreement == 1.0


def test_ensure_trains_only_when_missing(monkeypatch, tmp_path, trained):
    calls = []

    def fake_train(progress=True):
        calls.append(progress)
        return trained

    monkeypatch.setattr(km, "artifact", lambda name: tmp_path / name)
    monkeypatch.setattr(km, "train_digits_keras", fake_train)
    path = km.ensure_digits_keras()
    assert path == tmp_path / "digits_keras.onnx" and path.is_file() and calls == [False]
    assert km.ensure_digits_keras() == path and calls == [False]
    km.ensure_digits_keras(force=True)
    assert calls == [False, False]
    onnx.checker.check_model(onnx.load(str(path)))
