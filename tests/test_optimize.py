import time

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
    extended = set(rows[2]["ops"].split(", "))
    for row in rows[3:]:  # the NCHWc rewrite depends on the CPU (and ONNX_LAB_KERNELS): whatever it adds is NCHWc
        assert all(op.startswith("com.microsoft.nchwc:") for op in set(row["ops"].split(", ")) - extended), row


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


def test_session_options_pin_threads_and_state_spinning():
    options = optimize.session_options("basic", threads=1, spinning=False)
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(RuntimeError, match="does not have configuration"):  # not set: ORT's default, spinning on
        optimize.session_options("basic").get_session_config_entry("session.intra_op.allow_spinning")
    with pytest.raises(ValueError, match="threads must be a whole number >= 0"):
        optimize.session_options("basic", threads=-1)


def test_time_sessions_builds_one_session_at_a_time_and_keeps_the_fastest_round(stack):
    x = np.ones((1, 3, 8, 8), np.float32)
    alive, built = [], []

    class Tracked:
        def __init__(self, level):
            alive.append(level)
            built.append(level)
            self.session = optimize.make_session(stack, level, threads=1)
            self.level = level

        def run(self, outputs, feeds):
            assert alive == [self.level], f"two sessions exist at once: {alive}"
            return self.session.run(outputs, feeds)

        def __del__(self):
            alive.remove(self.level)

    timings = optimize.time_sessions({level: (lambda level=level: Tracked(level)) for level in ("disable_all", "all")},
                                     {"x": x}, baseline="disable_all", warmup=1, repeat=3, rounds=2)
    assert built == ["disable_all", "all"] * 2 and alive == []
    for table in (timings.latency, timings.cpu_time):
        assert [t.name for t in table.timings] == ["disable_all", "all"] and all(t.runs == 3 for t in table.timings)
        assert table.ratio("disable_all") == 1 and table.baseline == "disable_all"


def test_cpu_time_counts_the_calling_threads_work_not_waiting():
    class Sleeper:  # waits without computing: wall-clock time, but next to no CPU time
        def run(self, outputs, feeds):
            time.sleep(0.002)

    timings = optimize.time_sessions({"sleep": Sleeper}, {}, baseline="sleep", warmup=0, repeat=3, rounds=1)
    assert timings.latency.get("sleep").median_ms >= 2 > 10 * timings.cpu_time.get("sleep").median_ms
    with pytest.raises(KeyError, match="baseline 'basic' is not among"):
        optimize.time_sessions({"all": lambda: None}, {}, baseline="basic")
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        optimize.time_sessions({"all": lambda: None}, {}, baseline="all", rounds=0)


def test_level_latency_times_every_level_with_pinned_threads(stack):
    timings = optimize.level_latency(stack, {"x": np.ones((2, 3, 8, 8), np.float32)}, batch_size=2, warmup=1, repeat=2, rounds=1)
    for table in (timings.latency, timings.cpu_time):
        assert [t.name for t in table.timings] == list(optimize.LEVELS) and table.baseline == "disable_all"
        assert all(t.batch_size == 2 and t.median_ms > 0 for t in table.timings)
    for threads in (0, True, 1.5):
        with pytest.raises(ValueError, match="threads must be pinned"):
            optimize.level_latency(stack, {}, threads=threads)
