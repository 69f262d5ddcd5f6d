"""deploy/node/classify.js with onnxruntime-node, run for real and compared with ONNX Runtime in Python."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from labsupport.course.compare import compare
from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import edge, nodejs

# onnxruntime-node 1.30 and onnxruntime 1.31 (Python) run the same CPU kernels: logits must agree to
# 1e-5 absolute + 1e-5 relative, probabilities to 1e-6, predictions exactly.
LOGIT_ATOL, LOGIT_RTOL, PROBABILITY_ATOL = 1e-5, 1e-5, 1e-6
NODE_IMAGES = 32


@pytest.fixture(scope="module")
def model():
    return ensure_digits_cnn()


@pytest.fixture
def node_ready(require_tool, prerequisite):
    """node and deploy/node/node_modules: fail in CI when missing, skip elsewhere."""
    node = require_tool("node", "the Node.js test runs deploy/node/classify.js (install Node.js 18+)")
    prerequisite(
        (nodejs.node_dir() / "node_modules" / "onnxruntime-node").is_dir(), "deploy/node/node_modules is missing: run `make js-deps`"
    )
    return node


def test_package_json_pins_onnxruntime_node_and_lockfile_matches():
    package = json.loads((nodejs.node_dir() / "package.json").read_text())
    lock = json.loads((nodejs.node_dir() / "package-lock.json").read_text())
    assert package["dependencies"] == {"onnxruntime-node": nodejs.ORT_NODE_VERSION}
    assert lock["packages"]["node_modules/onnxruntime-node"]["version"] == nodejs.ORT_NODE_VERSION


def test_write_images_json_round_trips(tmp_path):
    test = load_digits().test
    path = edge.write_images_json(test.images[:4], tmp_path / "sub" / "images.json", labels=test.labels[:4])
    payload = json.loads(path.read_text())
    np.testing.assert_allclose(np.array(payload["images"]), test.images[:4].reshape(4, 64), atol=1e-7)
    assert payload["labels"] == test.labels[:4].tolist()


@pytest.mark.node
def test_node_matches_onnxruntime_in_python(tmp_path, model, node_ready):
    test = load_digits().test
    images_json = edge.write_images_json(test.images[:NODE_IMAGES], tmp_path / "images.json", labels=test.labels[:NODE_IMAGES])
    result = nodejs.run_node_classifier(images_json, model, node=node_ready)
    reference = edge.python_reference(model, test.images[:NODE_IMAGES])

    assert result["runtime"] == "onnxruntime-node" and result["version"] == nodejs.ORT_NODE_VERSION
    assert result["input"] == {"name": "image", "dims": [NODE_IMAGES, 1, 8, 8]}
    assert result["output"] == {"name": "logits", "dims": [NODE_IMAGES, 10]}
    assert result["count"] == NODE_IMAGES and result["labels"] == test.labels[:NODE_IMAGES].tolist()
    compare(reference["logits"], result["logits"], atol=LOGIT_ATOL, rtol=LOGIT_RTOL, name="node logits")
    compare(reference["probabilities"], result["probabilities"], atol=PROBABILITY_ATOL, rtol=0, name="node probabilities")
    assert result["predictions"] == reference["predictions"].tolist()


@pytest.mark.node
@pytest.mark.parametrize(
    ("document", "message"),
    [
        ('{"images": [[0.5, 0.5]]}', "image 0 must be a list of 64 numbers"),
        ('{"images": []}', "at least one image"),
        ("not json", "cannot read"),
        ('{"images": [[' + ",".join(["0"] * 63) + ', "x"]]}', "pixel 63 is not a finite number"),
    ],
)
def test_node_program_rejects_bad_input_with_a_clear_message(tmp_path, model, node_ready, document, message):
    path = tmp_path / "bad.json"
    path.write_text(document)
    with pytest.raises(RuntimeError, match="status 2") as caught:
        nodejs.run_node_classifier(path, model, node=node_ready)
    assert message in str(caught.value)


@pytest.mark.node
def test_node_program_usage_errors(tmp_path, model, node_ready):
    done = subprocess.run([node_ready, "classify.js", "--model"], cwd=nodejs.node_dir(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--model needs a value" in done.stderr and "usage:" in done.stderr
    images = edge.write_images_json(load_digits().test.images[:1], tmp_path / "one.json")
    with pytest.raises(FileNotFoundError, match=r"model_path .* does not exist"):
        nodejs.run_node_classifier(images, tmp_path / "missing.onnx", node=node_ready)
    with pytest.raises(FileNotFoundError, match=r"node not found|No such file"):
        nodejs.run_node_classifier(images, model, node=str(tmp_path / "no-node"))


def test_run_node_classifier_without_node(monkeypatch, tmp_path, model):
    monkeypatch.setattr(nodejs, "node_executable", lambda: None)
    with pytest.raises(FileNotFoundError, match="node not found on PATH"):
        nodejs.run_node_classifier(tmp_path / "x.json", model)


def test_run_node_classifier_without_npm_packages(monkeypatch, tmp_path, model):
    monkeypatch.setattr(nodejs, "node_dir", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match="ONNXRUNTIME_NODE_INSTALL=skip npm ci"):
        nodejs.run_node_classifier(tmp_path / "x.json", model, node="node")


@pytest.fixture(scope="module")
def heavy_model(tmp_path_factory):
    from labsupport.models.heavy_classifier import write_heavy_classifier

    return write_heavy_classifier(tmp_path_factory.mktemp("heavy") / "heavy.onnx")


def test_session_run_blocks_the_event_loop_on_the_main_thread_but_not_in_a_worker(heavy_model, node_ready):
    on_main = nodejs.node_event_loop(heavy_model, "main", runs=2, batch=64)
    in_worker = nodejs.node_event_loop(heavy_model, "worker", runs=2, batch=64)
    assert on_main.mode == "main" and in_worker.mode == "worker" and len(on_main.runs) == len(in_worker.runs) == 2
    assert min(on_main.run_ms) > 20, "the model must run long enough to see the heartbeat stop"
    assert all(gap >= 0.9 * ms for gap, ms in zip(on_main.longest_gap_ms, on_main.run_ms, strict=True))
    assert all(gap < 0.5 * ms for gap, ms in zip(in_worker.longest_gap_ms, in_worker.run_ms, strict=True))


def test_event_loop_trace_measures_the_longest_gap_inside_each_run():
    trace = nodejs.EventLoopTrace("main", runs=[(10.0, 20.0), (30.0, 40.0)], heartbeats=[5.0, 12.0, 13.0, 25.0, 31.0, 39.0])
    assert trace.run_ms == [10.0, 10.0]
    assert trace.longest_gap_ms == [7.0, 8.0]  # 13 -> 20 in the first run, 31 -> 39 in the second


def test_event_loop_program_rejects_bad_arguments(model, node_ready):
    with pytest.raises(ValueError, match="mode must be 'main'"):
        nodejs.node_event_loop(model, "thread")
    with pytest.raises(RuntimeError, match="--runs must be a whole number"):
        nodejs.node_event_loop(model, "main", runs=0)
