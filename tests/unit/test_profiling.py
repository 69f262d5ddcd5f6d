"""labsupport.onnxutil.profiling: ORT's profiler, the JSON trace, per-operator time and node placement."""

import json
from collections import Counter

import matplotlib
import numpy as np
import onnx
import pytest

from labsupport.course.paths import artifacts_dir
from labsupport.models.conv_bn_relu import conv_bn_relu_model
from labsupport.onnxutil import profiling
from labsupport.onnxutil.sessions import session_options

matplotlib.use("Agg")

MODEL = conv_bn_relu_model(blocks=1, channels=4, size=8)  # hand-built: no training, no artifact
FEEDS = {"x": np.zeros((4, 3, 8, 8), np.float32)}


@pytest.fixture(scope="module")
def unoptimized_profile(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("profiles") / "digits"
    options = session_options(optimization="disable")
    return profiling.profile_session(MODEL, FEEDS, runs=3, options=options, prefix=prefix)


def _write(path, events):
    path.write_text(json.dumps(events), encoding="utf-8")
    return path


def _kernel(node, op, dur, provider="CPUExecutionProvider"):
    return {"cat": "Node", "name": f"{node}_kernel_time", "dur": dur, "ts": 0, "ph": "X", "args": {"op_name": op, "provider": provider}}


def test_profile_counts_every_node_of_the_graph_per_run(unoptimized_profile):
    graph_ops = Counter(node.op_type for node in MODEL.graph.node)
    assert unoptimized_profile.path.name.startswith("digits") and unoptimized_profile.path.suffix == ".json"
    table = unoptimized_profile.op_table()
    assert dict(zip(table["op_type"], table["calls"], strict=True)) == {op: 3 * count for op, count in graph_ops.items()}
    assert table["share"].sum() == pytest.approx(1.0)
    assert list(table["total_us"]) == sorted(table["total_us"], reverse=True)
    assert unoptimized_profile.hottest_op() == table["op_type"].iloc[0]
    assert unoptimized_profile.total_ms() == pytest.approx(table["total_us"].sum() / 1e3)


def test_placement_comes_from_the_provider_field(unoptimized_profile):
    nodes = MODEL.graph.node
    placed = unoptimized_profile.node_providers()
    assert set(placed) == {node.name for node in nodes}
    assert {provider for _, provider in placed.values()} == {"CPUExecutionProvider"}
    frame = unoptimized_profile.placement()
    assert frame.to_dict("records") == [
        {"provider": "CPUExecutionProvider", "nodes": len(nodes), "op types": ", ".join(sorted({n.op_type for n in nodes}))}
    ]


def test_hottest_op_sums_time_per_type_and_skips_session_events(tmp_path):
    events = [
        {"cat": "Session", "name": "session_initialization", "dur": 10_000, "ts": 0, "ph": "X", "args": {}},
        _kernel("conv_a", "Conv", 60),
        _kernel("conv_b", "Conv", 50),
        _kernel("matmul", "MatMul", 80),
        {"cat": "Node", "name": "conv_a_fence_before", "dur": 999, "ts": 0, "ph": "X", "args": {"op_name": "Conv"}},
    ]
    profile = profiling.Profile.load(_write(tmp_path / "p.json", events))
    assert profile.hottest_op() == "Conv"
    expected = {"op_type": "Conv", "calls": 2, "total_us": 110.0, "mean_us": 55.0, "share": 110 / 190}
    assert profile.op_table().to_dict("records")[0] == expected


def test_placement_splits_nodes_between_providers(tmp_path):
    events = [
        _kernel("conv", "Conv", 5, "CUDAExecutionProvider"),
        _kernel("gemm", "Gemm", 5, "CUDAExecutionProvider"),
        _kernel("nms", "NonMaxSuppression", 5),
        _kernel("conv", "Conv", 6, "CUDAExecutionProvider"),
    ]
    profile = profiling.Profile.load(_write(tmp_path / "p.json", events))
    assert profile.node_providers() == {
        "conv": ("Conv", "CUDAExecutionProvider"),
        "gemm": ("Gemm", "CUDAExecutionProvider"),
        "nms": ("NonMaxSuppression", "CPUExecutionProvider"),
    }
    assert profile.placement().to_dict("records") == [
        {"provider": "CUDAExecutionProvider", "nodes": 2, "op types": "Conv, Gemm"},
        {"provider": "CPUExecutionProvider", "nodes": 1, "op types": "NonMaxSuppression"},
    ]


def test_load_trace_rejects_what_is_not_a_profile(tmp_path):
    with pytest.raises(FileNotFoundError, match="end_profiling"):
        profiling.load_trace(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(profiling.TraceError, match="not JSON"):
        profiling.load_trace(tmp_path / "bad.json")
    with pytest.raises(profiling.TraceError, match="list of events"):
        profiling.load_trace(_write(tmp_path / "dict.json", {"traceEvents": []}))
    session_only = _write(tmp_path / "s.json", [{"cat": "Session", "name": "x", "dur": 1}])
    assert profiling.load_trace(session_only)[0]["name"] == "x"
    with pytest.raises(profiling.TraceError, match="no kernel events"):
        profiling.Profile.load(session_only)


def test_profile_session_rejects_bad_arguments():
    with pytest.raises(ValueError, match="runs"):
        profiling.profile_session(MODEL, FEEDS, runs=0)
    with pytest.raises(ValueError, match="feeds"):
        profiling.profile_session(MODEL, {})


def test_profile_session_default_prefix_goes_under_artifacts(tmp_path):
    profile = profiling.profile_session(MODEL.SerializeToString(), FEEDS, runs=1)
    try:
        assert profile.path.parent == artifacts_dir() / "profiles"
    finally:
        profile.path.unlink()


def test_plot_has_one_bar_per_operator_type(unoptimized_profile):
    figure = profiling.plot_op_times(unoptimized_profile)
    ax = figure.axes[0]
    assert len(ax.patches) == len(unoptimized_profile.op_table())
    assert [label.get_text() for label in ax.get_yticklabels()][-1] == unoptimized_profile.hottest_op()
    matplotlib.pyplot.close(figure)


def test_profile_session_asks_for_the_named_outputs_but_the_whole_graph_runs(tmp_path):
    two_heads = onnx.ModelProto.FromString(MODEL.SerializeToString())
    two_heads.graph.node.append(onnx.helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1))
    two_heads.graph.output.append(onnx.helper.make_tensor_value_info("probabilities", onnx.TensorProto.FLOAT, ["N", 10]))
    profile = profiling.profile_session(two_heads.SerializeToString(), FEEDS, runs=2, output_names=["logits"], prefix=tmp_path / "heads")
    assert Counter(k.op_type for k in profile.kernels)["Softmax"] == 2  # ORT does not prune what no requested output needs
