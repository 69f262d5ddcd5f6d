"""labsupport.models.digits_cnn: the digits CNN, its training loop, its ONNX export and the artifact helpers."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
import torch

from labsupport.course.compare import ParityError, compare
from labsupport.course.data import load_digits
from labsupport.course.paths import ARTIFACTS_ENV_VAR, ROOT_ENV_VAR, repo_root
from labsupport.models import digits_cnn
from labsupport.onnxutil.export import STACK_TRACE_KEY
from labsupport.onnxutil.sessions import open_session


@pytest.fixture(scope="module")
def digits():
    return load_digits()


@pytest.fixture(scope="module")
def course_model():
    return digits_cnn.load_digits_cnn()


@pytest.mark.parametrize("batch", [1, 5])
def test_cnn_maps_images_to_ten_logits(batch):
    torch.manual_seed(0)
    out = digits_cnn.DigitsCNN().eval()(torch.rand(batch, 1, 8, 8))
    assert out.shape == (batch, 10) and out.dtype == torch.float32


def test_cnn_has_conv_batchnorm_relu_dropout_and_linear_head():
    kinds = {type(module) for module in digits_cnn.DigitsCNN().modules()}
    assert {torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.ReLU, torch.nn.Dropout, torch.nn.Linear} <= kinds


def test_training_is_deterministic_for_a_seed_and_restores_threads():
    threads = torch.get_num_threads()
    first, history = digits_cnn.train_digits_cnn(epochs=1, seed=3, progress=False)
    second, _ = digits_cnn.train_digits_cnn(epochs=1, seed=3, progress=False)
    other, _ = digits_cnn.train_digits_cnn(epochs=1, seed=4, progress=False)
    assert torch.get_num_threads() == threads
    assert not first.training
    assert len(history.loss) == len(history.calibration_accuracy) == 1 and "1 epochs" in repr(history)
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name]), name
    assert not torch.equal(first.head[2].weight, other.head[2].weight)


@pytest.mark.parametrize("epochs", [0, -1, 2.5, "3"])
def test_training_rejects_bad_epochs(epochs):
    with pytest.raises(ValueError, match="epochs must be a positive whole number"):
        digits_cnn.train_digits_cnn(epochs=epochs, progress=False)


def test_course_model_is_accurate_and_matches_a_fresh_default_training(course_model, digits):
    assert digits_cnn.accuracy(course_model, digits.test) >= 0.95
    retrained, history = digits_cnn.train_digits_cnn(progress=False)
    assert history.calibration_accuracy[-1] == digits_cnn.accuracy(course_model, digits.calibration)
    for name, tensor in course_model.state_dict().items():
        assert torch.equal(tensor, retrained.state_dict()[name]), f"{name} differs from notebook 02's training"


def test_accuracy_and_predict_check_their_inputs(course_model, digits):
    with pytest.raises(TypeError, match="Split"):
        digits_cnn.accuracy(course_model, digits.test.images)
    with pytest.raises(ValueError, match=r"\(N, 1, 8, 8\)"):
        digits_cnn.predict_logits(course_model, digits.test.flat)


def test_predict_logits_leaves_training_mode_as_it_was(digits):
    model = digits_cnn.DigitsCNN().train()
    logits = digits_cnn.predict_logits(model, digits.test.images[:4])
    assert logits.shape == (4, 10) and model.training


def test_export_has_named_io_a_dynamic_batch_and_parity(course_model, digits, tmp_path):
    course_model.train()  # the helper must export an eval-mode copy and leave this flag alone
    path = digits_cnn.export_digits_cnn(course_model, tmp_path / "cnn.onnx")
    assert course_model.training
    course_model.eval()
    assert path == tmp_path / "cnn.onnx" and [p.name for p in tmp_path.iterdir()] == ["cnn.onnx"]
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["image"] and [o.name for o in proto.graph.output] == ["logits"]
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # symbolic batch
    assert not {"BatchNormalization", "Dropout"} & {node.op_type for node in proto.graph.node}
    session = open_session(path)
    expected = digits_cnn.predict_logits(course_model, digits.test.images)
    for batch in (1, 7, len(digits.test)):
        got = session.run(["logits"], {"image": digits.test.images[:batch]})[0]
        compare(expected[:batch], got, atol=1e-4, name=f"batch {batch}")


def test_parity_check_catches_a_wrong_export(course_model, digits, tmp_path):
    """The parity check above can fail: an export of other weights is caught."""
    path = digits_cnn.export_digits_cnn(digits_cnn.DigitsCNN(), tmp_path / "untrained.onnx")
    got = open_session(path).run(None, {"image": digits.test.images})[0]
    with pytest.raises(ParityError):
        compare(digits_cnn.predict_logits(course_model, digits.test.images), got, atol=1e-4)


def test_export_rejects_wrong_arguments(course_model, tmp_path):
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        digits_cnn.export_digits_cnn("model.pt", tmp_path / "x.onnx")
    with pytest.raises(ValueError, match=r"must end in \.onnx"):
        digits_cnn.export_digits_cnn(course_model, tmp_path / "x.pt")
    with pytest.raises(TypeError, match="DigitsCNN"):
        digits_cnn.save_digits_cnn(torch.nn.Linear(64, 10))


def test_export_honours_the_opset(course_model, tmp_path):
    proto = onnx.load(digits_cnn.export_digits_cnn(course_model, tmp_path / "o18.onnx", opset_version=18))
    assert {entry.domain: entry.version for entry in proto.opset_import}[""] == 18


def test_ensure_reuses_the_existing_artifact():
    path = digits_cnn.ensure_digits_cnn()
    stamp = path.stat().st_mtime_ns
    assert digits_cnn.ensure_digits_cnn() == path and path.stat().st_mtime_ns == stamp
    assert path.name == "digits_cnn.onnx" and path.parent.name == "artifacts"


def test_ensure_regenerates_missing_artifacts_like_notebook_02(tmp_path, monkeypatch, course_model, digits, capsys):
    """In an empty copy of the course, the fallback trains quietly and reproduces the course model."""
    (tmp_path / "pyproject.toml").write_text((repo_root() / "pyproject.toml").read_text())
    shutil.copytree(repo_root() / "data", tmp_path / "data")
    monkeypatch.setenv(ROOT_ENV_VAR, str(tmp_path))
    monkeypatch.delenv(ARTIFACTS_ENV_VAR, raising=False)  # the copy's own artifacts/ (make test gives its tests another folder)
    path = digits_cnn.ensure_digits_cnn()
    captured = capsys.readouterr()
    assert captured.out == "" and "training" not in captured.err
    assert path == tmp_path / "artifacts" / "digits_cnn.onnx" and (tmp_path / "artifacts" / "digits_cnn.pt").is_file()
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == ["digits_cnn.onnx", "digits_cnn.pt"]
    reloaded = digits_cnn.load_digits_cnn()
    for name, tensor in course_model.state_dict().items():
        assert torch.equal(tensor, reloaded.state_dict()[name]), name
    got = open_session(path).run(None, {"image": digits.test.images})[0]
    compare(digits_cnn.predict_logits(course_model, digits.test.images), got, atol=1e-4)


def test_export_carries_no_paths_of_this_machine(tmp_path, course_model):
    path = digits_cnn.export_digits_cnn(course_model, tmp_path / "cnn.onnx")
    proto = onnx.load(path)
    assert not [p for node in proto.graph.node for p in node.metadata_props if p.key == STACK_TRACE_KEY]
    assert str(repo_root()).encode() not in path.read_bytes()


def test_load_names_the_fix_for_stale_weights(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text((repo_root() / "pyproject.toml").read_text())
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "digits_cnn.onnx").write_bytes(b"placeholder")
    torch.save({"weight": torch.zeros(3)}, tmp_path / "artifacts" / "digits_cnn.pt")
    monkeypatch.setenv(ROOT_ENV_VAR, str(tmp_path))
    monkeypatch.delenv(ARTIFACTS_ENV_VAR, raising=False)
    with pytest.raises(RuntimeError, match=r"ensure_digits_cnn\(force=True\)"):
        digits_cnn.load_digits_cnn()


def test_export_accepts_any_argument_name(tmp_path):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()  # forward(input)
    path = digits_cnn.export_digits_cnn(model, tmp_path / "seq.onnx")
    got = open_session(path).run(["logits"], {"image": np.zeros((3, 1, 8, 8), np.float32)})[0]
    assert got.shape == (3, 10)
