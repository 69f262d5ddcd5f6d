"""The mobile route of notebook 09: .onnx -> .ort conversion, running the .ort file, the operator config."""

from __future__ import annotations

import shutil

import onnxruntime as ort
import pytest

from labsupport.course.compare import compare
from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import edge, mobile


@pytest.fixture(scope="module")
def model():
    return ensure_digits_cnn()


@pytest.fixture(scope="module")
def converted(model, tmp_path_factory):
    source = tmp_path_factory.mktemp("onnx") / "digits_cnn.onnx"
    shutil.copy(model, source)
    return mobile.convert_to_ort(source, tmp_path_factory.mktemp("ort"), optimization_style="Fixed")


def test_conversion_writes_an_ort_model_and_an_operator_config(converted):
    assert converted.ort_path.name == "digits_cnn.ort" and mobile.is_ort_format(converted.ort_path)
    assert not mobile.is_ort_format(converted.onnx_path)
    assert converted.config_path.name == "digits_cnn.required_operators.config"
    assert 10_000 < converted.ort_bytes < 2 * converted.onnx_bytes
    text = mobile.operator_config_text(converted.config_path)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert "# - digits_cnn.ort" in text and str(converted.ort_path.parent) not in text
    ops = {op for line in lines for op in line.split(";")[2].split(",")}
    assert {"Gemm", "MaxPool"} <= ops
    assert all(line.count(";") == 2 for line in lines)


def test_the_int8_ort_file_keeps_records_of_removed_values_and_its_onnx_twin_is_smaller(tmp_path):
    # notebook 09's explanation of why the INT8 .ort file is not smaller than its .onnx source
    from labsupport.topics.quantization import ensure_digits_cnn_int8

    source = ensure_digits_cnn_int8()
    converted = mobile.convert_to_ort(source, tmp_path, optimization_style="Fixed", save_optimized_onnx=True)
    records, unused = mobile.ort_value_records(converted.ort_path)
    assert 0 < unused < records
    assert converted.ort_bytes > converted.onnx_bytes
    assert (tmp_path / "digits_cnn_int8.optimized.onnx").stat().st_size < converted.onnx_bytes


def test_ort_model_matches_the_onnx_model(converted):
    images = load_digits().test.images
    want = edge.python_reference(converted.onnx_path, images)["logits"]
    session = ort.InferenceSession(str(converted.ort_path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"image": images})[0]
    compare(want, got, atol=1e-4, rtol=1e-4, name=".ort vs .onnx")


def test_runtime_style_keeps_the_original_ops_for_nnapi_and_coreml(model, tmp_path):
    source = tmp_path / "digits_cnn.onnx"
    shutil.copy(model, source)
    runtime = mobile.convert_to_ort(source, tmp_path / "out", optimization_style="Runtime")
    assert runtime.ort_path.name == "digits_cnn.with_runtime_opt.ort" and mobile.is_ort_format(runtime.ort_path)
    assert runtime.config_path.name == "digits_cnn.required_operators.with_runtime_opt.config"
    assert "ai.onnx;11;Conv" in runtime.config_path.read_text()
    # alone in its folder, the config still names two models: the converter's own second conversion
    # without runtime optimizations (a temporary digits_cnn.ort) is part of it
    assert [p.name for p in (tmp_path / "out").glob("*.ort")] == ["digits_cnn.with_runtime_opt.ort"]
    models = [line[4:] for line in mobile.operator_config_text(runtime.config_path).splitlines() if line.startswith("# - ")]
    assert models == ["digits_cnn.with_runtime_opt.ort", "digits_cnn.ort"]
    # the converter's own warning: the recorded optimizations are replayed only with a session option
    assert any("'session.enable_saved_runtime_optimizations' is set to '1'" in line for line in runtime.warnings)


def test_a_fixed_conversion_has_no_replay_warning(converted):
    assert not any("enable_saved_runtime_optimizations" in line for line in converted.warnings)


def test_convert_to_ort_rejects_bad_arguments(model, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"expected an existing \.onnx file"):
        mobile.convert_to_ort(tmp_path / "missing.onnx", tmp_path)
    with pytest.raises(ValueError, match="'Fixed' or 'Runtime'"):
        mobile.convert_to_ort(model, tmp_path, optimization_style="Fast")
    with pytest.raises(ValueError, match="'arm' \\(phones\\) or 'amd64'"):
        mobile.convert_to_ort(model, tmp_path, target_platform="x86")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(RuntimeError, match="convert_onnx_models_to_ort failed"):
        mobile.convert_to_ort(broken, tmp_path / "out")


def test_usability_checker_needs_fixed_shapes_for_nnapi_and_coreml(model, tmp_path):
    import subprocess
    import sys

    dynamic = {row.provider: row for row in mobile.mobile_usability(model)}
    assert all(row.nodes == 0 and not row.works_as_is and row.works_if_fixed for row in dynamic.values()), dynamic
    batch1 = tmp_path / "digits_cnn_batch1.onnx"
    command = ["-m", "onnxruntime.tools.make_dynamic_shape_fixed", "--dim_param", "batch", "--dim_value", "1", str(model), str(batch1)]
    subprocess.run([sys.executable, *command], check=True)
    fixed = {row.provider: row for row in mobile.mobile_usability(batch1)}
    assert all(row.nodes == row.total == 7 and row.works_as_is and row.fixed_nodes is None for row in fixed.values()), fixed
    with pytest.raises(FileNotFoundError, match="does not exist"):
        mobile.mobile_usability(tmp_path / "missing.onnx")
    not_a_model = tmp_path / "not_a_model.onnx"
    not_a_model.write_bytes(b"this is not protobuf")
    with pytest.raises(RuntimeError, match="check_onnx_model_mobile_usability failed"):
        mobile.mobile_usability(not_a_model)
