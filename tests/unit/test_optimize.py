import time

import numpy as np
import onnx
import pytest

from labsupport.course.compare import compare
from labsupport.models.contract import IR_VERSION, OPSET
from labsupport.models.conv_bn_relu import conv_bn_relu_model
from labsupport.onnxutil import optimize
from labsupport.onnxutil.sessions import open_session


@pytest.fixture(scope="module")
def stack():
    return conv_bn_relu_model(blocks=2, channels=4, size=8)


def test_levels_are_ordered_and_complete():
    assert optimize.LEVELS == ("disable", "basic", "extended", "layout", "all")
    with pytest.raises(ValueError, match="optimization must be one of disable, basic, extended, layout, all; got 'fast'"):
        optimize.optimize_to_file(conv_bn_relu_model(blocks=1, channels=1, size=1), "fast", "unused.onnx")


def test_conv_bn_relu_model_is_valid_and_deterministic(stack):
    assert optimize.op_counts(stack) == {
        "Conv": 2,
        "BatchNormalization": 2,
        "Relu": 2,
        "GlobalAveragePool": 1,
        "Flatten": 1,
        "MatMul": 1,
        "Add": 1,
    }
    assert stack == conv_bn_relu_model(blocks=2, channels=4, size=8)
    assert stack != conv_bn_relu_model(blocks=2, channels=4, size=8, seed=1)
    assert (stack.opset_import[0].version, stack.ir_version) == (OPSET, IR_VERSION)
    with pytest.raises(ValueError, match="must be >= 1"):
        conv_bn_relu_model(blocks=0)


def test_optimize_to_file_shows_the_fusions(stack, tmp_path):
    basic = optimize.optimize_to_file(stack, "basic", tmp_path / "basic.onnx")
    extended = optimize.optimize_to_file(stack, "extended", tmp_path / "extended.onnx")
    assert "BatchNormalization" not in optimize.op_counts(basic) and optimize.op_counts(basic)["Gemm"] == 1
    assert optimize.op_counts(extended)["com.microsoft:FusedConv"] == 2
    assert {row["op"]: row["change"] for row in optimize.op_diff(stack, basic)} == {
        "BatchNormalization": -2,
        "Add": -1,
        "MatMul": -1,
        "Gemm": 1,
    }
    assert optimize.op_diff(basic, basic) == []


def test_level_table_writes_every_level(stack, tmp_path):
    rows = optimize.level_table(stack, tmp_path, "stack")
    assert [row["level"] for row in rows] == list(optimize.LEVELS)
    assert rows[0]["nodes"] == 10 and rows[2]["nodes"] < rows[1]["nodes"] < rows[0]["nodes"]
    assert all((tmp_path / f"stack_{level}.onnx").is_file() for level in optimize.LEVELS)
    extended = set(rows[2]["ops"].split(", "))
    for row in rows[3:]:  # the NCHWc rewrite depends on the CPU (and ONNX_LAB_KERNELS): whatever it adds is NCHWc
        assert all(op.startswith("com.microsoft.nchwc:") for op in set(row["ops"].split(", ")) - extended), row


def test_all_levels_agree_numerically(stack):
    x = np.random.default_rng(0).normal(size=(3, 3, 8, 8)).astype(np.float32)
    outputs = optimize.run_all_levels(stack, {"x": x})
    for level, result in outputs.items():
        compare(outputs["disable"][0], result[0], name=level, atol=1e-4, rtol=1e-3)


def test_ort_format_file_loads_and_matches(stack, tmp_path):
    ort_file = optimize.optimize_to_file(stack, "extended", tmp_path / "stack.ort", ort_format=True)
    assert ort_file.read_bytes()[4:8] == b"ORTM"  # the FlatBuffer file identifier of .ort models
    x = np.ones((1, 3, 8, 8), np.float32)
    compare(open_session(stack).run(None, {"x": x})[0], open_session(ort_file).run(None, {"x": x})[0], atol=1e-5)


def test_creation_time_and_errors(stack, tmp_path):
    timing = optimize.creation_time(stack, "basic", repeat=2)
    assert timing.runs == 2 and timing.name == "create@basic" and timing.batch_size == 1
    with pytest.raises(ValueError, match="repeat >= 1"):
        optimize.creation_time(stack, "basic", repeat=0)
    with pytest.raises(FileNotFoundError, match="no ONNX model at"):
        optimize.optimize_to_file(tmp_path / "missing.onnx", "basic", tmp_path / "out.onnx")
    with pytest.raises(TypeError, match=r"expected an onnx\.ModelProto"):
        optimize.op_counts(42)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(Exception, match=r"INVALID_PROTOBUF.*garbage\.onnx"):
        optimize.optimize_to_file(garbage, "basic", tmp_path / "out.onnx")
    assert isinstance(onnx.load(optimize.optimize_to_file(stack, "disable", tmp_path / "same.onnx")), onnx.ModelProto)


def test_time_sessions_builds_one_session_at_a_time_and_keeps_the_fastest_round(stack):
    x = np.ones((1, 3, 8, 8), np.float32)
    alive, built = [], []

    class Tracked:
        def __init__(self, level):
            alive.append(level)
            built.append(level)
            self.session = open_session(stack, optimization=level, threads=1)
            self.level = level

        def run(self, outputs, feeds):
            assert alive == [self.level], f"two sessions exist at once: {alive}"
            return self.session.run(outputs, feeds)

        def __del__(self):
            alive.remove(self.level)

    timings = optimize.time_sessions(
        {level: (lambda level=level: Tracked(level)) for level in ("disable", "all")},
        {"x": x},
        baseline="disable",
        warmup=1,
        repeat=3,
        rounds=2,
    )
    assert built == ["disable", "all"] * 2 and alive == []
    for table in (timings.latency, timings.cpu_time):
        assert [t.name for t in table.timings] == ["disable", "all"] and all(t.runs == 3 for t in table.timings)
        assert table.ratio("disable") == 1 and table.baseline == "disable"


def test_cpu_time_counts_the_work_not_waiting():
    class Sleeper:  # waits without computing: wall-clock time, but next to no CPU time
        def run(self, outputs, feeds):
            time.sleep(0.002)

    timings = optimize.time_sessions({"sleep": Sleeper}, {}, baseline="sleep", warmup=0, repeat=3, rounds=1)
    assert timings.latency.get("sleep").median_ms >= 2  # time.sleep waits at least that long
    assert timings.cpu_time.get("sleep").cpu_median_ms < 0.2 and timings.cpu_time.clock == "cpu"
    assert timings.latency.clock == "wall" and timings.latency.load is timings.cpu_time.load is not None
    with pytest.raises(KeyError, match="baseline 'basic' is not among"):
        optimize.time_sessions({"all": lambda: None}, {}, baseline="basic")
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        optimize.time_sessions({"all": lambda: None}, {}, baseline="all", rounds=0)


def test_level_latency_times_every_level_with_pinned_threads(stack):
    timings = optimize.level_latency(stack, {"x": np.ones((2, 3, 8, 8), np.float32)}, batch_size=2, warmup=1, repeat=2, rounds=1)
    for table in (timings.latency, timings.cpu_time):
        assert [t.name for t in table.timings] == list(optimize.LEVELS) and table.baseline == "disable"
        assert all(t.batch_size == 2 and t.runs == 2 for t in table.timings)
    for threads in (0, True, 1.5):
        with pytest.raises(ValueError, match="threads must be pinned"):
            optimize.level_latency(stack, {}, threads=threads)
