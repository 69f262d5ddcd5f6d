"""labsupport.topics.lifecycle (notebook 13): versions in a local MLflow registry, the promotion gate, aliases to the service."""

from __future__ import annotations

import os

import httpx
import numpy as np
import pytest

from labsupport.course.data import Split, load_digits
from labsupport.models.contract import accuracy, onnx_logits
from labsupport.models.digits_cnn import ensure_digits_cnn, load_digits_cnn, predict_logits
from labsupport.topics import gates, lifecycle, serving

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


def _appoint(registry, version):
    """A champion set by hand, recorded as served (what first_champion does on a registry that has none yet)."""
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, version)
    registry.client.set_model_version_tag(registry.name, version, lifecycle.SERVED, "set by the test")


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


def test_gate_refuses_parity_accuracy_and_latency_failures(registry, split):
    budgets = lifecycle.Budgets()
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, registry.built["cnn"])
    broken = gates.gate(registry, registry.built["mislabeled"], split, budgets)
    assert not broken.passed and [c.name for c in broken.checks if not c.passed] == ["parity", "accuracy"]
    assert "REFUSED" in str(broken) and "FAIL parity" in str(broken) and "champion version 1 on the same split" in str(broken)
    # a version that is right but slower than the champion allows (the budget is a ratio to the champion's latency)
    slow = gates.gate(registry, registry.built["optimized"], split, lifecycle.Budgets(max_latency_ratio=1e-3))
    assert [c.name for c in slow.checks if not c.passed] == ["latency"]
    assert "x champion version 1's" in str(slow)
    refused = gates.promote(registry, registry.built["mislabeled"], split, budgets)
    assert not refused.passed and registry.version_of(lifecycle.CHAMPION) == registry.built["cnn"]  # the alias did not move


def test_the_gate_re_measures_the_champion_on_the_gate_split(registry, split):
    cnn = registry.built["cnn"]
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, cnn)
    logged = registry.tags(cnn)["accuracy"]
    # a champion tag claiming 100%: the gate must not believe it, it re-runs the champion on the same split
    registry.client.set_model_version_tag(registry.name, cnn, "accuracy", "1.000000")
    try:
        report = gates.gate(registry, registry.built["optimized"], split)
    finally:
        registry.client.set_model_version_tag(registry.name, cnn, "accuracy", logged)
    assert report.passed, str(report)


def test_the_gate_fails_closed_when_the_store_cannot_be_read(registry, split, monkeypatch):
    from mlflow.exceptions import MlflowException

    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, registry.built["cnn"])

    def locked(*args, **kwargs):
        raise MlflowException("(sqlite3.OperationalError) database is locked")

    monkeypatch.setattr(registry.client, "get_registered_model", locked)
    report = gates.promote(registry, registry.built["optimized"], split)
    assert not report.passed and [c.name for c in report.checks] == ["records"]
    assert "database is locked" in str(report)
    monkeypatch.undo()
    assert registry.version_of(lifecycle.CHAMPION) == registry.built["cnn"]  # nothing moved


def test_the_gate_fails_closed_when_the_champion_has_no_evidence(registry, split, monkeypatch):
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, registry.built["cnn"])
    real_tags = registry.tags
    monkeypatch.setattr(registry, "tags", lambda version: {} if version == registry.built["cnn"] else real_tags(version))
    report = gates.gate(registry, registry.built["optimized"], split)
    assert not report.passed and "IntegrityError: version 1" in str(report)


def test_a_tampered_registered_file_is_refused(tmp_path, split, reference):
    registry = lifecycle.open_registry(tmp_path / "store", fresh=True)
    version = lifecycle.log_version(registry, ensure_digits_cnn(), reference, split, "digits CNN")
    path = registry.model_path(version)
    path.write_bytes(path.read_bytes() + b"\0")  # one byte appended after registration
    with pytest.raises(lifecycle.IntegrityError, match=r"version 1: the registered file's sha256 is .* the registry recorded [0-9a-f]{64}"):
        registry.model_path(version)
    report = gates.gate(registry, version, split)
    assert not report.passed and "sha256" in str(report)
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, version)
    with pytest.raises(lifecycle.IntegrityError):
        lifecycle.load_by_alias(registry, lifecycle.CHAMPION)
    with pytest.raises(lifecycle.IntegrityError):
        lifecycle.routing_document(registry)


def test_promote_then_roll_back_to_a_named_version_through_the_gate(registry, split):
    cnn, optimized, mislabeled = registry.built["cnn"], registry.built["optimized"], registry.built["mislabeled"]
    _appoint(registry, cnn)
    assert gates.promote(registry, optimized, split).passed
    assert (registry.version_of(lifecycle.CHAMPION), registry.version_of(lifecycle.PREVIOUS)) == (optimized, cnn)
    assert not gates.rollback(registry, mislabeled, split).passed  # a rollback target passes the gate too
    assert registry.version_of(lifecycle.CHAMPION) == optimized
    restored = gates.rollback(registry, cnn, split)
    assert restored.passed and "version 1: may be restored" in str(restored)
    assert (registry.version_of(lifecycle.CHAMPION), registry.version_of(lifecycle.PREVIOUS)) == (cnn, None)
    assert gates.rollback(registry, cnn, split).passed  # again: not a toggle, the champion stays
    assert registry.version_of(lifecycle.CHAMPION) == cnn
    rows = {row["version"]: row for row in lifecycle.version_table(registry)}
    assert rows[optimized]["rolled back"] == "yes" and rows[cnn]["rolled back"] == "-"
    assert "champion" in rows[cnn]["aliases"] and rows["3"]["parity"] == "failed"


def test_routing_document_and_push_to_the_service(registry, split):
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, registry.built["cnn"])
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHALLENGER, registry.built["optimized"])
    document = lifecycle.routing_document(registry, challenger_percent=20, shadow=True)
    assert document["aliases"] == {"champion": "1", "challenger": "2"} and document["shadow"] == "2"
    assert all(os.path.isfile(source["path"]) for source in document["versions"].values())
    assert {source["sha256"] for source in document["versions"].values()} == {registry.tags(v)["sha256"] for v in ("1", "2")}
    with serving.start(registry.model_path(lifecycle.CHAMPION), admin_token=TOKEN) as service:
        served = lifecycle.push_routing(service.url, TOKEN, document)
        assert served["aliases"] == document["aliases"] and served["challenger_percent"] == 20
        assert "every file with its registered sha256" in lifecycle.verify_served(registry, served)
        registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, registry.built["optimized"])
        with pytest.raises(lifecycle.IntegrityError, match="the service routes"):  # moved in the registry, never pushed
            lifecycle.verify_served(registry, served)
        registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, registry.built["cnn"])
        tampered = {**served, "versions": {**served["versions"], "1": {**served["versions"]["1"], "sha256": "0" * 64}}}
        with pytest.raises(lifecycle.IntegrityError, match="loaded version 1 with sha256 0000"):
            lifecycle.verify_served(registry, tampered)
        answer = httpx.post(service.url + "/predict", json=serving.payload(split.images[:3]), headers={"x-request-key": "k"}).json()
        assert answer["version"] in {"1", "2"} and len(answer["predictions"]) == 3
        changed = {**document, "versions": {**document["versions"], "2": {**document["versions"]["2"], "sha256": "0" * 64}}}
        with pytest.raises(RuntimeError, match=r"refused the routing \(422\).*version 2: .* the document expects 0{64}"):
            lifecycle.push_routing(service.url, TOKEN, changed)  # the file is not the one the registry recorded
        assert (
            httpx.get(service.url + "/admin/routing", headers={"authorization": f"Bearer {TOKEN}"}).json()["aliases"] == served["aliases"]
        )
        with pytest.raises(RuntimeError, match="refused the routing \\(401\\)"):
            lifecycle.push_routing(service.url, "wrong", document)
    with pytest.raises(ValueError, match="only calls services on this machine"):
        lifecycle.push_routing("http://example.com", TOKEN, document)


def test_mislabeled_copy_rotates_the_classes(tmp_path, split):
    path = lifecycle.mislabeled_copy(ensure_digits_cnn(), tmp_path / "m.onnx", shift=1)
    first = Split(split.images[:20], split.labels[:20])
    original, rotated = (onnx_logits(p, first) for p in (ensure_digits_cnn(), path))
    np.testing.assert_array_equal(rotated, original[:, np.roll(np.arange(10), 1)])
    assert (rotated.argmax(axis=1) != original.argmax(axis=1)).all()


def _less_accurate_copy(source, target, split):
    """A valid, less accurate release: noise on the last weight matrix, until the accuracy lies between 90% and 97.5%."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(source))
    weights = [init for init in proto.graph.initializer if len(init.dims) == 2][-1]
    clean, rng = numpy_helper.to_array(weights).copy(), np.random.default_rng(0)
    for scale in (1, 1.5, 2, 3, 4, 5, 6, 8):
        noisy = clean + rng.normal(0, scale * np.abs(clean).mean(), clean.shape).astype(clean.dtype)
        weights.CopyFrom(numpy_helper.from_array(noisy, weights.name))
        onnx.save(proto, str(target))
        if 0.9 < accuracy(onnx_logits(target, split), split.labels) < 0.975:
            return target
    raise AssertionError("no noise level gave an accuracy between 90% and 97.5%")


def test_a_rollback_is_gated_on_the_target_alone(tmp_path, split, reference):
    registry = lifecycle.open_registry(tmp_path / "store", fresh=True)
    older = _less_accurate_copy(ensure_digits_cnn(), tmp_path / "older.onnx", split)
    old = lifecycle.log_version(registry, older, onnx_logits(older, split), split, "older, less accurate")
    cnn = lifecycle.log_version(registry, ensure_digits_cnn(), reference, split, "digits CNN")
    optimized = lifecycle.log_version(registry, lifecycle.optimized_copy(ensure_digits_cnn(), tmp_path / "o.onnx"), reference, split, "opt")
    gates.first_champion(registry, old)
    with pytest.raises(ValueError, match="version 1 is champion already"):
        gates.first_champion(registry, cnn)
    assert gates.promote(registry, cnn, split).passed
    # the new champion is better offline but broken in production: back to the older, less accurate one
    report = gates.rollback(registry, old, split)
    assert report.passed, str(report)
    assert registry.version_of(lifecycle.CHAMPION) == old and "champion being replaced is not consulted" in str(report)
    # a champion whose registered file was damaged: promotion fails closed, a rollback still gets out
    registry.client.delete_model_version_tag(registry.name, cnn, lifecycle.ROLLED_BACK)  # a person clears it
    assert gates.promote(registry, optimized, split).passed  # optimized serves once: a rollback target from now on
    assert gates.promote(registry, cnn, split).passed
    damaged = registry.model_path(cnn)
    damaged.write_bytes(damaged.read_bytes() + b"\0")
    refused = gates.promote(registry, optimized, split)
    assert not refused.passed and "IntegrityError: version 2" in str(refused)
    assert gates.rollback(registry, optimized, split).passed
    assert registry.version_of(lifecycle.CHAMPION) == optimized and registry.tags(cnn)[lifecycle.ROLLED_BACK] == "true"
    # a rollback target whose own evidence fails is refused: its file changed, or its accuracy fell below its record
    assert "sha256" in str(gates.rollback(registry, cnn, split))
    registry.client.set_model_version_tag(registry.name, old, "accuracy", "0.999")
    low = gates.rollback(registry, old, split)
    assert not low.passed and [c.name for c in low.checks if not c.passed] == ["accuracy"]
    assert registry.version_of(lifecycle.CHAMPION) == optimized


def test_a_rollback_never_promotes_a_version_that_did_not_serve(tmp_path, split, reference):
    """A version promote refused cannot become champion through rollback, nor lock the good champion out."""
    import types

    registry = lifecycle.open_registry(tmp_path / "store", fresh=True)
    cnn = lifecycle.log_version(registry, ensure_digits_cnn(), reference, split, "digits CNN")
    worse = _less_accurate_copy(ensure_digits_cnn(), tmp_path / "worse.onnx", split)
    refused_version = lifecycle.log_version(registry, worse, onnx_logits(worse, split), split, "re-export, less accurate")
    gates.first_champion(registry, cnn)
    assert [c.name for c in gates.promote(registry, refused_version, split).checks if not c.passed] == ["accuracy"]
    for target, reason in ((refused_version, "FAIL served"), ("21", "not found"), ("l", "must be an integer")):  # refused; typos
        report = gates.rollback(registry, target, split)
        assert not report.passed and reason in str(report), str(report)
        assert registry.version_of(lifecycle.CHAMPION) == cnn
    assert "served_as_champion=absent" in gates.rollback_gate(registry, refused_version, split).details()
    assert lifecycle.ROLLED_BACK not in registry.tags(cnn)  # the good champion is not locked out
    assert gates.gate(registry, cnn, split).passed and gates.rollback(registry, cnn, split).passed
    # an accuracy recorded on one split is not compared with one measured on another
    for other in (split.images[:300], split.labels[:300]), (split.images[::-1], split.labels[::-1]):  # fewer; the same, reordered
        report = gates.rollback_gate(registry, cnn, types.SimpleNamespace(images=other[0], labels=other[1]))
        assert [c.name for c in report.checks if not c.passed] == ["split"], str(report)


def _state(registry):
    """The aliases and every version's tags: what a rollback may change."""
    aliases = {alias: registry.version_of(alias) for alias in (lifecycle.CHAMPION, lifecycle.PREVIOUS, lifecycle.CHALLENGER)}
    return aliases, {version: registry.tags(version) for version in ("1", "2")}


def test_a_rollback_reads_version_numbers_as_numbers(tmp_path, split, reference):
    """The champion's own number ("02", "2" or 2) changes nothing; what is not an integer of 1 or more is refused."""
    registry = lifecycle.open_registry(tmp_path / "store", fresh=True)
    cnn = ensure_digits_cnn()
    first = lifecycle.log_version(registry, cnn, reference, split, "digits CNN")
    optimized = lifecycle.optimized_copy(cnn, tmp_path / "optimized.onnx")
    second = lifecycle.log_version(registry, optimized, reference, split, "optimized build")
    gates.first_champion(registry, int(first))
    promotion = gates.promote(registry, int(second), split)  # an int is a version number too
    assert promotion.passed and promotion.version == "2", str(promotion)
    before = _state(registry)
    assert before[0] == {lifecycle.CHAMPION: "2", lifecycle.PREVIOUS: "1", lifecycle.CHALLENGER: None}
    for same in ("02", "2", 2):  # the champion's own number, however written
        report = gates.rollback(registry, same, split)
        assert report.passed and report.version == "2", str(report)
        assert [str(check) for check in report.checks] == ["PASS champion: already champion: nothing changed"]
        assert _state(registry) == before
    for typo in ("2.0", "two", " 2", "-1", "0", True, None):
        for check in (gates.rollback, gates.rollback_gate, gates.gate, gates.promote):
            report = check(registry, typo, split)
            assert not report.passed and "must be an integer of 1 or more" in str(report), str(report)
        assert _state(registry) == before
    report = gates.rollback(registry, "01", split)  # version 1, written with a leading zero
    assert report.passed and report.version == "1", str(report)
    aliases, tags = _state(registry)
    assert aliases == {lifecycle.CHAMPION: "1", lifecycle.PREVIOUS: None, lifecycle.CHALLENGER: None}
    assert tags["2"][lifecycle.ROLLED_BACK] == "true" and lifecycle.ROLLED_BACK not in tags["1"]


def test_a_rolled_back_version_cannot_come_back_quietly(registry, split):
    cnn, optimized = registry.built["cnn"], registry.built["optimized"]
    for version in (cnn, optimized):
        registry.client.delete_model_version_tag(registry.name, version, lifecycle.ROLLED_BACK)
    _appoint(registry, cnn)
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHALLENGER, optimized)
    assert gates.promote(registry, optimized, split).passed
    assert gates.rollback(registry, cnn, split).passed
    assert registry.version_of(lifecycle.CHALLENGER) is None  # no canary of the version just rolled back
    for move in (gates.promote, gates.rollback):
        report = move(registry, optimized, split)
        assert not report.passed and [c.name for c in report.checks if not c.passed] == ["history"], str(report)
        assert "FAIL history: not taken out of production by a rollback" in str(report)
    assert registry.version_of(lifecycle.CHAMPION) == cnn
    registry.client.delete_model_version_tag(registry.name, optimized, lifecycle.ROLLED_BACK)  # a person's deliberate act
    assert gates.gate(registry, optimized, split).passed


def test_the_gate_leaves_no_downloaded_copy_behind(registry, split, tmp_path, monkeypatch):
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    registry.client.set_registered_model_alias(registry.name, lifecycle.CHAMPION, registry.built["cnn"])
    assert gates.gate(registry, registry.built["cnn"], split).passed
    assert list(scratch.iterdir()) == []
