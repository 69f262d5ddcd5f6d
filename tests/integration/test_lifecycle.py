"""labsupport.topics.lifecycle (notebook 13): versions in a local MLflow registry, the promotion gate, aliases to the service."""

from __future__ import annotations

import os

import httpx
import numpy as np
import pytest

from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn, load_digits_cnn, predict_logits
from labsupport.topics import lifecycle, serving

pytestmark = pytest.mark.slow
TOKEN = "lifecycle-test"


@pytest.fixture(scope="module")
def split():
    return load_digits().test


@pytest.fixture(scope="module")
def reference(split):
    return predict_logits(load_digits_cnn(), split.images)


@pytest.fixture(scope="module")
def registry(tmp_path_factory, split, reference):
    folder = tmp_path_factory.mktemp("registry")
    registry = lifecycle.open_registry(folder / "store", fresh=True)
    cnn = ensure_digits_cnn()
    registry.built = {
        "cnn": lifecycle.log_version(registry, cnn, reference, split, "digits CNN"),
        "optimized": lifecycle.log_version(
            registry, lifecycle.optimized_copy(cnn, folder / "optimized.onnx"), reference, split, "optimized build"
        ),
        "mislabeled": lifecycle.log_version(
            registry, lifecycle.mislabeled_copy(cnn, folder / "mislabeled.onnx"), reference, split, "label-order bug"
        ),
    }
    return registry


def test_mlflow_stays_offline_and_local(registry):
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true" and os.environ["DO_NOT_TRACK"] == "true"
    assert (registry.folder / "mlflow.db").is_file() and (registry.folder / "mlruns").is_dir()
    assert registry.client._tracking_client.tracking_uri.startswith("sqlite:///")


def test_versions_carry_their_facts_and_load_back_by_alias(registry, split):
    built = registry.built
    assert [built["cnn"], built["optimized"], built["mislabeled"]] == ["1", "2", "3"]
    tags = registry.tags(built["cnn"])
    assert tags["parity"] == "passed" and tags["opset"] == "20" and len(tags["sha256"]) == 64
    assert float(tags["accuracy"]) > 0.95
    assert registry.tags(built["mislabeled"])["parity"] == "failed"
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHALLENGER, built["optimized"])
    proto = lifecycle.load_by_alias(registry, lifecycle.CHALLENGER)
    assert proto.SerializeToString() == registry.model_path(built["optimized"]).read_bytes()


def test_gate_refuses_parity_accuracy_and_latency_failures(registry, split, tmp_path, reference):
    budgets = lifecycle.Budgets(max_latency_ms=50.0)
    assert lifecycle.promote(registry, registry.built["cnn"], split, budgets).passed
    broken = lifecycle.gate(registry, registry.built["mislabeled"], split, budgets)
    assert not broken.passed and [c.name for c in broken.checks if not c.passed] == ["parity", "accuracy"]
    assert "REFUSED" in str(broken) and "FAIL parity" in str(broken)
    # a version that is right but too slow for its budget
    slow = lifecycle.gate(registry, registry.built["optimized"], split, lifecycle.Budgets(max_latency_ms=1e-6))
    assert [c.name for c in slow.checks if not c.passed] == ["latency"]
    refused = lifecycle.promote(registry, registry.built["mislabeled"], split, budgets)
    assert not refused.passed and registry.version_of(lifecycle.CHAMPION) == registry.built["cnn"]  # the alias did not move


def test_promote_then_roll_back_moves_the_aliases(registry, split):
    budgets = lifecycle.Budgets(max_latency_ms=50.0)
    cnn, optimized = registry.built["cnn"], registry.built["optimized"]
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, cnn)
    assert lifecycle.promote(registry, optimized, split, budgets).passed
    assert (registry.version_of(lifecycle.CHAMPION), registry.version_of(lifecycle.PREVIOUS)) == (optimized, cnn)
    assert lifecycle.rollback(registry) == cnn
    assert (registry.version_of(lifecycle.CHAMPION), registry.version_of(lifecycle.PREVIOUS)) == (cnn, optimized)
    rows = {row["version"]: row for row in lifecycle.version_table(registry)}
    assert "champion" in rows[cnn]["aliases"] and rows["3"]["parity"] == "failed"


def test_routing_document_and_push_to_the_service(registry, split):
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, registry.built["cnn"])
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHALLENGER, registry.built["optimized"])
    document = lifecycle.routing_document(registry, challenger_percent=20, shadow=True)
    assert document["aliases"] == {"champion": "1", "challenger": "2"} and document["shadow"] == "2"
    assert all(os.path.isfile(path) for path in document["versions"].values())
    with serving.start(registry.model_path(lifecycle.CHAMPION), admin_token=TOKEN) as service:
        served = lifecycle.push_routing(service.url, TOKEN, document)
        assert served["aliases"] == document["aliases"] and served["challenger_percent"] == 20
        answer = httpx.post(service.url + "/predict", json=serving.payload(split.images[:3]), headers={"x-request-key": "k"}).json()
        assert answer["version"] in {"1", "2"} and len(answer["predictions"]) == 3
        with pytest.raises(RuntimeError, match="refused the routing \\(401\\)"):
            lifecycle.push_routing(service.url, "wrong", document)
    with pytest.raises(ValueError, match="only calls services on this machine"):
        lifecycle.push_routing("http://example.com", TOKEN, document)


def test_mislabeled_copy_rotates_the_classes(tmp_path, split):
    path = lifecycle.mislabeled_copy(ensure_digits_cnn(), tmp_path / "m.onnx", shift=1)
    original, rotated = (lifecycle._logits(p, split.images[:20]) for p in (ensure_digits_cnn(), path))
    np.testing.assert_array_equal(rotated, original[:, np.roll(np.arange(10), 1)])
    assert (rotated.argmax(axis=1) != original.argmax(axis=1)).all()
