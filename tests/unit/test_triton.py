"""onnx_service.triton: the Triton model repository and config.pbtxt the service's model and settings give, without a Triton server."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from labsupport.models.digits_cnn import ensure_digits_cnn
from onnx_service import triton
from onnx_service.config import PREFIX, Settings


def test_triton_repository_structure(tmp_path):
    model = ensure_digits_cnn()
    config = triton.write_repository(model, tmp_path / "models", max_batch=32, instances=2)
    assert config == tmp_path / "models" / "digits_cnn" / "config.pbtxt"
    assert (config.parent / "1" / "model.onnx").read_bytes() == model.read_bytes()
    parsed = triton.parse_pbtxt(config.read_text())
    assert parsed["name"] == "digits_cnn" == config.parent.name
    assert parsed["backend"] == "onnxruntime" and parsed["max_batch_size"] == 32
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for key, args in (("input", session.get_inputs()), ("output", session.get_outputs())):
        assert [entry["name"] for entry in parsed[key]] == [arg.name for arg in args]
        for entry, arg in zip(parsed[key], args, strict=True):
            assert entry["data_type"] == "TYPE_FP32"
            assert entry["dims"] == list(arg.shape[1:])  # batch dimension left out when max_batch_size > 0
    assert parsed["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    assert parsed["dynamic_batching"] == {"max_queue_delay_microseconds": 100}
    assert parsed["parameters"] == [
        {"key": "intra_op_thread_count", "value": {"string_value": "1"}},
        {"key": "inter_op_thread_count", "value": {"string_value": "1"}},
    ]


def _label_classifier(path: Path) -> Path:
    """The service's contract with a scikit-learn-style ``label`` output of shape ``[batch]`` (rank 1) next to ``logits``."""
    from onnx import TensorProto, helper, numpy_helper, save

    weights = numpy_helper.from_array(np.zeros((64, 10), dtype=np.float32), "weights")
    shape = numpy_helper.from_array(np.array([-1, 64], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["image", "shape"], ["flat"]),
            helper.make_node("MatMul", ["flat", "weights"], ["logits"]),
            helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0),
        ],
        "label_classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10]),
        ],
        [weights, shape],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def test_triton_label_output_of_rank_one_gets_dims_one_and_a_reshape(tmp_path):
    model = _label_classifier(tmp_path / "label_classifier.onnx")
    parsed = triton.parse_pbtxt(triton.write_repository(model, tmp_path / "models").read_text())
    label, logits = parsed["output"]
    # Triton refuses dims: [ ] (rank >= 1); its docs write a [batch] output as dims [ 1 ] reshaped to [ ]
    assert label == {"name": "label", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}}
    assert logits == {"name": "logits", "data_type": "TYPE_FP32", "dims": [10]}
    assert all(entry["dims"] for entry in [*parsed["input"], *parsed["output"]]), "no empty dims anywhere"


# the fields of Triton's ModelDynamicBatching and ModelQueuePolicy messages (model_config.proto)
DYNAMIC_BATCHING_FIELDS = {
    "preferred_batch_size",
    "max_queue_delay_microseconds",
    "preserve_ordering",
    "priority_levels",
    "default_priority_level",
    "default_queue_policy",
    "priority_queue_policy",
}
QUEUE_POLICY_FIELDS = {"timeout_action", "default_timeout_microseconds", "allow_timeout_override", "max_queue_size"}


def test_triton_dynamic_batching_block_matches_the_service_batcher(tmp_path):
    settings = Settings(batching=True, max_batch=64, batch_max_size=32, batch_max_wait_ms=2.5, batch_queue_limit=128)
    block = triton.DynamicBatching.from_settings(settings)
    config = triton.write_repository(ensure_digits_cnn(), tmp_path, max_batch=settings.max_batch, batching=block)
    parsed = triton.parse_pbtxt(config.read_text())
    batching = parsed["dynamic_batching"]
    assert set(batching) <= DYNAMIC_BATCHING_FIELDS and set(batching["default_queue_policy"]) <= QUEUE_POLICY_FIELDS
    assert batching["max_queue_delay_microseconds"] == 2500  # the service waits in ms, Triton in microseconds
    # the service's BATCH_MAX_SIZE is a cap; Triton's guide says preferred sizes "should not be used for most models"
    assert "preferred_batch_size" not in batching
    assert batching["default_queue_policy"]["max_queue_size"] == 128  # Triton rejects beyond it, like the service's 503
    explicit = triton.DynamicBatching(preferred_batch_sizes=(8,)).text(max_batch=16)
    assert triton.parse_pbtxt(explicit)["dynamic_batching"]["preferred_batch_size"] == [8]  # only when asked for
    with pytest.raises(triton.TritonError, match="between 1 and max_batch_size 16"):
        triton.config_text("m", [], [], max_batch=16, batching=triton.DynamicBatching(preferred_batch_sizes=(32,)))


def test_triton_command_line_takes_the_batching_settings_from_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(f"{PREFIX}BATCH_MAX_WAIT_MS", "4")
    monkeypatch.setenv(f"{PREFIX}BATCH_QUEUE_LIMIT", "10")
    monkeypatch.setenv(f"{PREFIX}THREADS", "3")
    assert triton.main([str(ensure_digits_cnn()), str(tmp_path), "--from-env"]) == 0
    printed = triton.parse_pbtxt(capsys.readouterr().out)
    assert printed["dynamic_batching"] == {"max_queue_delay_microseconds": 4000, "default_queue_policy": {"max_queue_size": 10}}
    threads = {entry["key"]: entry["value"]["string_value"] for entry in printed["parameters"]}
    assert threads == {"intra_op_thread_count": "3", "inter_op_thread_count": "1"}  # the service's THREADS, per instance
    with pytest.raises(triton.TritonError, match="threads must be >= 1"):
        triton.config_text("m", [], [], threads=0)


def test_triton_without_batching_keeps_all_dims_and_refuses_bad_names(tmp_path):
    model = ensure_digits_cnn()
    parsed = triton.parse_pbtxt(triton.write_repository(model, tmp_path, name="cnn_nobatch", max_batch=0).read_text())
    assert parsed["max_batch_size"] == 0 and parsed["input"][0]["dims"] == [-1, 1, 8, 8]
    assert "dynamic_batching" not in parsed
    with pytest.raises(triton.TritonError, match="use letters, digits"):
        triton.write_repository(model, tmp_path, name="bad name/..")
    with pytest.raises(FileNotFoundError, match="model file not found"):
        triton.write_repository(tmp_path / "none.onnx", tmp_path)
    with pytest.raises(ValueError, match="missing"):
        triton.parse_pbtxt('input [ { name: "x" ')
