import numpy as np
import onnx
import pytest

from labsupport import optimize
from labsupport.compare import compare


@pytest.fixture(scope="module")
def stack():
    return optimize.conv_bn_relu_model(blocks=2, channels=4, size=8)


def test_levels_are_ordered_and_complete():
    assert list(optimize.LEVELS) == ["disable_all", "basic", "extended", "layout", "all"]
    with pytest.raises(ValueError, match="unknown optimization level 'fast'; expected one of disable_all"):
        optimize.session_options("fast")


def test_conv_bn_relu_model_is_valid_and_deterministic(stack):
    assert optimize.op_counts(stack) == {"Conv": 2, "BatchNormalization": 2, "Relu": 2, "GlobalAveragePool": 1,
                                         "Flatten": 1, "MatMul": 1, "Add": 1}
    assert stack == optimize.conv_bn_relu_model(blocks=2, channels=4, size=8)
    with pytest.raises(ValueError, match="must be >= 1"):
        optimize.conv_bn_relu_model(blocks=0)


def test_optimize_to_file_shows_the_fusions(stack, tmp_path):
    basic = optimize.optimize_to_file(stack, "basic", tmp_path / "basic.onnx")
    extended = optimize.optimize_to_file(stack, "extended", tmp_path / "extended.onnx")
    assert "BatchNormalization" not in optimize.op_counts(basic) and optimize.op_counts(basic)["Gemm"] == 1
    assert optimize.op_counts(extended)["com.microsoft:FusedConv"] == 2
    assert {row["op"]: row["change"] for row in optimize.op_diff(stack, basic)} == {
        "BatchNormalization": -2, "Add": -1, "MatMul": -1, "Gemm": 1}
    assert optimize.op_diff(basic, basic) == []


def test_level_table_writes_every_level(stack, tmp_path):
    rows = optimize.level_table(stack, tmp_path, "stack")
    assert [row["level"] for row in rows] == list(optimize.LEVELS)
    assert rows[0]["nodes"] == 10 and rows[2]["nodes"] < rows[1]["nodes"] < rows[0]["nodes"]
    assert all((tmp_path / f"stack_{level}.onnx").is_file() for level in optimize.LEVELS)
    assert "com.microsoft.nchwc:Conv" in rows[-1]["ops"]


def test_all_levels_agree_numerically(stack):
    x = np.random.default_rng(0).normal(size=(3, 3, 8, 8)).astype(np.float32)
    outputs = optimize.run_all_levels(stack, {"x": x})
    for level, result in outputs.items():
        compare(outputs["disable_all"][0], result[0], name=level, atol=1e-4, rtol=1e-3)


def test_ort_format_file_loads_and_matches(stack, tmp_path):
    ort_file = optimize.optimize_to_file(stack, "extended", tmp_path / "stack.ort", ort_format=True)
    assert ort_file.read_bytes()[4:8] == b"ORTM"  # the FlatBuffer file identifier of .ort models
    x = np.ones((1, 3, 8, 8), np.float32)
    compare(optimize.make_session(stack).run(None, {"x": x})[0], optimize.make_session(ort_file).run(None, {"x": x})[0],
            atol=1e-5)


def test_creation_time_and_errors(stack, tmp_path):
    timing = optimize.creation_time(stack, "basic", repeat=2)
    assert timing.runs == 2 and timing.median_ms > 0
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        optimize.creation_time(stack, "basic", repeat=0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        optimize.make_session(tmp_path / "missing.onnx")
    with pytest.raises(TypeError, match="expected an onnx.ModelProto"):
        optimize.op_counts(42)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="garbage.onnx"):
        optimize.optimize_to_file(garbage, "basic", tmp_path / "out.onnx")
    assert isinstance(onnx.load(optimize.optimize_to_file(stack, "disable_all", tmp_path / "same.onnx")), onnx.ModelProto)
