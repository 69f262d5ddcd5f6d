"""Model versions in deploy/service (notebook 13): aliases, a deterministic split, shadow runs, switching under load."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from labsupport.course.data import load_digits
from labsupport.models.contract import IR_VERSION, OPSET
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.models.digits_sklearn import ensure_digits_sklearn
from labsupport.models.heavy_classifier import write_heavy_classifier
from labsupport.topics import loadgen, serving
from onnx_service import model as svc_model
from onnx_service import routing
from onnx_service.app import create_app, freeze_start_up_objects
from onnx_service.config import Settings

TOKEN = "test-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    folder = tmp_path_factory.mktemp("versions")
    other = write_heavy_classifier(folder / "other.onnx", hidden=64, layers=2)  # same input as the CNN, other answers
    return {"1": str(ensure_digits_cnn()), "2": str(other)}


@pytest.fixture(scope="module")
def images():
    return load_digits().test.images


def _document(versions, champion="1", challenger="2", percent=0, shadow=None):
    return {
        "versions": versions,
        "aliases": {"champion": champion, "challenger": challenger},
        "challenger_percent": percent,
        "shadow": shadow,
    }


def _shadow_counts(client) -> dict[str, float]:
    samples = loadgen.parse_metrics(client.get("/metrics").text)
    key = "onnx_service_shadow_examples_total"
    return {
        outcome: samples.get((key, (("outcome", outcome), ("version", "2"))), 0) for outcome in ("agree", "disagree", "skipped", "failed")
    }


def _wait_for_shadow(client, examples: int, timeout: float = 30.0) -> dict[str, float]:
    """The shadow counters once they account for ``examples`` (shadow runs finish in the background)."""
    deadline = time.monotonic() + timeout
    counted = _shadow_counts(client)
    while sum(counted.values()) < examples and time.monotonic() < deadline:
        time.sleep(0.01)
        counted = _shadow_counts(client)
    return counted


def _predict(session, images):
    return session.run(None, {"image": images})[0].argmax(axis=1).tolist()


def test_buckets_are_stable_and_spread():
    assert routing.bucket("user-42") == routing.bucket("user-42")
    buckets = [routing.bucket(f"user-{i}") for i in range(10_000)]
    assert min(buckets) >= 0 and max(buckets) <= 99
    share = sum(b < 10 for b in buckets) / len(buckets)
    assert 0.08 < share < 0.12  # 10% of keys to the challenger


def test_a_non_ascii_key_is_bucketed_as_the_client_hashes_its_utf8_bytes(tmp_path, versions, images, in_process):
    key = "café"
    misread = key.encode("utf-8").decode("latin-1")  # what a server hands over when it decodes the header as latin-1
    percent = max(routing.bucket(key), routing.bucket(misread))  # exactly one of the two buckets lies below it
    expected = "challenger" if routing.bucket(key) < percent else "champion"
    routing_file = tmp_path / "routing.json"
    routing_file.write_text(json.dumps(_document(versions, percent=percent)))
    client = in_process(create_app(Settings(model=versions["1"], routing=str(routing_file))))
    response = client.post("/predict", json=serving.payload(images[:1]), headers={"x-request-key": key.encode("utf-8")})
    assert response.json()["alias"] == expected  # as the client computes bucket("café"), not bucket of the misread text
    assert routing.key_from_header(misread) == key and routing.key_from_header(None) is None


def test_split_by_request_key_and_shadow_counts(tmp_path, versions, images, in_process):
    routing_file = tmp_path / "routing.json"
    routing_file.write_text(json.dumps(_document(versions, percent=30, shadow="2")))
    sessions = {name: ort.InferenceSession(path, providers=["CPUExecutionProvider"]) for name, path in versions.items()}
    client = in_process(create_app(Settings(model=versions["1"], routing=str(routing_file))))
    served, champion_examples = {}, 0
    for i in range(60):
        key = f"user-{i}"
        response = client.post("/predict", json=serving.payload(images[i : i + 2]), headers={"x-request-key": key})
        body = response.json()
        want = "2" if routing.bucket(key) < 30 else "1"
        assert (body["version"], body["alias"]) == (want, "challenger" if want == "2" else "champion")
        assert response.headers["x-model-version"] == want
        assert body["predictions"] == _predict(sessions[want], images[i : i + 2])
        served[key] = want
        champion_examples += 2 if want == "1" else 0
    again = client.post("/predict", json=serving.payload(images[:1]), headers={"x-request-key": "user-7"}).json()
    assert again["version"] == served["user-7"]  # the same key, the same version
    assert client.post("/predict", json=serving.payload(images[:1])).json()["version"] == "1"  # no key: champion
    champion_examples += 1 + (again["version"] == "1")
    counted = _wait_for_shadow(client, champion_examples)
    samples = loadgen.parse_metrics(client.get("/metrics").text)
    champion_requests = sum(v == "1" for v in served.values()) + 1 + (served["user-7"] == "1")
    assert counted["failed"] == 0
    assert counted["agree"] + counted["disagree"] + counted["skipped"] == champion_examples  # every example the champion served
    assert counted["agree"] + counted["disagree"] > 0
    assert samples[("onnx_service_version_requests_total", (("alias", "champion"), ("version", "1")))] == champion_requests


def test_the_shadow_runs_only_on_requests_the_champion_answers(tmp_path, versions, images, in_process):
    third = str(write_heavy_classifier(tmp_path / "third.onnx", hidden=32, layers=1))
    document = _document({**versions, "3": third}, percent=100, shadow="3")  # every keyed request goes to the challenger
    (tmp_path / "routing.json").write_text(json.dumps(document))
    client = in_process(create_app(Settings(model=versions["1"], routing=str(tmp_path / "routing.json"))))
    for i in range(10):
        assert client.post("/predict", json=serving.payload(images[:2]), headers={"x-request-key": f"k{i}"}).json()["version"] == "2"
    assert client.post("/predict", json=serving.payload(images[:3])).json()["alias"] == "champion"  # no key: the champion
    deadline = time.monotonic() + 30
    counted: dict[str, float] = {}
    while sum(counted.values()) < 3 and time.monotonic() < deadline:
        samples = loadgen.parse_metrics(client.get("/metrics").text)
        counted = {
            dict(labels)["outcome"]: value for (name, labels), value in samples.items() if name == "onnx_service_shadow_examples_total"
        }
        time.sleep(0.01)
    time.sleep(0.2)
    samples = loadgen.parse_metrics(client.get("/metrics").text)
    counted = {dict(labels)["outcome"]: value for (name, labels), value in samples.items() if name == "onnx_service_shadow_examples_total"}
    assert sum(counted.values()) == 3, counted  # the champion's 3 examples; none of the challenger's 20


def test_a_routing_switch_in_batching_mode_closes_the_replaced_batchers(tmp_path, versions, images, caplog, in_process):
    import gc

    copies = []
    for i in range(3):
        copies.append(tmp_path / f"copy{i}.onnx")
        copies[-1].write_bytes(Path(versions["1"]).read_bytes())
    app = create_app(Settings(model=versions["1"], admin_token=TOKEN, batching=True))
    with caplog.at_level("ERROR"):
        client = in_process(app)
        for copy in copies:
            switched = client.put("/admin/routing", json={"versions": {"v": str(copy)}, "aliases": {"champion": "v"}}, headers=AUTH)
            assert switched.status_code == 200, switched.text
            for _ in range(3):
                assert client.post("/predict", json=serving.payload(images[:1])).status_code == 200
        deadline = time.monotonic() + 10
        while app.state.service._background and time.monotonic() < deadline:  # the replaced batchers are closing
            time.sleep(0.01)
        gc.collect()  # a Batcher whose collector still ran would be destroyed here, with asyncio's ERROR
        assert client.post("/predict", json=serving.payload(images[:2])).status_code == 200
        in_process.close()  # the lifespan's shutdown logs no ERROR either
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert not errors, errors


@pytest.mark.parametrize("batching", [False, True], ids=["threadpool", "batching"])
def test_a_switch_away_from_the_start_up_version_releases_its_session_in_a_frozen_serving_process(versions, batching, in_process):
    import gc
    import weakref

    app = create_app(Settings(model=versions["1"], admin_token=TOKEN, batching=batching))
    (start_up_version,) = app.state.service.routing.versions.values()
    start_up_session = weakref.ref(start_up_version.model.session)
    del start_up_version
    freeze_start_up_objects()  # as the serving process does after start-up
    try:
        client = in_process(app)
        # switched before the warm-up ends, the start-up model would still be running it: switch once ready, as a load
        # balancer would
        assert in_process.after_warm_up(client).status_code == 200
        switched = client.put("/admin/routing", json={"versions": {"2": versions["2"]}, "aliases": {"champion": "2"}}, headers=AUTH)
        assert switched.status_code == 200, switched.text
        deadline = time.monotonic() + 10
        while app.state.service._background and time.monotonic() < deadline:  # the replaced batcher is closing
            time.sleep(0.01)
        gc.collect()
        assert start_up_session() is None  # nothing the service keeps still holds the start-up model
    finally:
        gc.unfreeze()


def test_admin_api_needs_a_token_and_refuses_bad_documents(versions, in_process):
    sklearn_model = str(ensure_digits_sklearn())
    closed = in_process(create_app(Settings(model=versions["1"])))
    assert closed.put("/admin/routing", json=_document(versions)).status_code == 403
    client = in_process(create_app(Settings(model=versions["1"], admin_token=TOKEN)))
    assert client.get("/admin/routing").status_code == 401
    assert client.put("/admin/routing", json=_document(versions), headers={"authorization": "Bearer wrong"}).status_code == 401
    cases = [
        ({"versions": versions}, "name the champion"),
        (_document(versions, champion="9"), "point at listed versions"),
        (_document(versions, percent=101), "0-100"),
        (_document(versions, shadow="7"), '"shadow" must be one of'),
        (
            _document({**versions, "3": sklearn_model}, champion="3"),
            "version 3 takes \\[n, 64\\] float32 with at most 64 example\\(s\\); the service takes \\[n, 1, 8, 8\\] float32",
        ),
        (_document({**versions, "2": "missing.onnx"}), "model file not found"),
        (_document({**versions, "2": "/x/" + "y" * 1020}), r"model file not found: \.\.\.'y{60}' \(1023 characters\)"),
        (
            _document({**versions, "2": "/" + "z" * 1000}),
            r"cannot read the model file \.\.\.'z{60}' \(1001 characters\): OSError: [^/]{1,60}$",  # the reason, not the path again
        ),
        ({**_document(versions, percent=10), "challenger_precent": 50}, "unknown field.*challenger_precent"),
        (_document({**versions, "2": {"path": versions["2"], "sha256": "ABC"}}), "version 2: sha256 must be 64 lower-case hex"),
        (
            _document({**versions, "2": {"path": versions["2"], "sha": "0" * 64}}),
            "version 2: expected a path or .*fields 'path', 'sha'",
        ),
        (_document({**versions, "2": {"sha256": "0" * 64}}), "version 2: expected a path or .*fields 'sha256'"),
        (
            _document({**versions, "2": {"path": versions["2"], "sha256": "0" * 64}}),
            "version 2: other.onnx has sha256 [0-9a-f]{64}, the document expects 0{64}",
        ),
    ]
    for document, message in cases:
        response = client.put("/admin/routing", json=document, headers=AUTH)
        assert response.status_code == 422, document
        assert re.search(message, response.json()["detail"]), response.json()["detail"]
    assert client.get("/admin/routing", headers=AUTH).json()["aliases"] == {"champion": Path(versions["1"]).stem}


def _fixed_batch_copy(source: str, path: Path, batch: int) -> str:
    """The model with its input's batch dimension fixed to ``batch``."""
    import onnx

    proto = onnx.load(source)
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
    onnx.save(proto, path)
    return str(path)


@pytest.mark.parametrize("batching", [False, True])
def test_a_version_that_cannot_take_the_services_largest_batch_is_refused(tmp_path, versions, images, batching, in_process):
    fixed = _fixed_batch_copy(versions["1"], tmp_path / "fixed1.onnx", 1)
    client = in_process(create_app(Settings(model=versions["1"], admin_token=TOKEN, batching=batching)))
    refused = client.put("/admin/routing", json={"versions": {"f": fixed}, "aliases": {"champion": "f"}}, headers=AUTH)
    batch = client.post("/predict", json=serving.payload(images[:5]))
    assert refused.status_code == 422 and refused.json()["error"] == "bad_routing", refused.text
    assert ("at most 1 example(s); the service takes [n, 1, 8, 8] float32 with up to 64" in refused.json()["detail"]) or (
        batching and "batching merges requests" in refused.json()["detail"]
    ), refused.json()["detail"]
    assert batch.status_code == 200 and len(batch.json()["predictions"]) == 5  # the champion did not change


def test_routing_with_sha256s_serves_only_the_registered_files(tmp_path, versions, images, in_process):
    """A version named with its sha256 is reused while the loaded model has that sha256, else loaded and checked."""
    file = tmp_path / "v2.onnx"
    file.write_bytes(Path(versions["2"]).read_bytes())
    v2_sha, v1_sha = svc_model.sha256_file(file), svc_model.sha256_file(Path(versions["1"]))

    def route_to(sha256: str) -> dict:
        return _document({"1": versions["1"], "2": {"path": str(file), "sha256": sha256}}, percent=100)

    def served_sha() -> str:
        return client.get("/admin/routing", headers=AUTH).json()["versions"]["2"]["sha256"]

    client = in_process(create_app(Settings(model=versions["1"], admin_token=TOKEN)))
    assert client.put("/admin/routing", json=route_to(v2_sha), headers=AUTH).status_code == 200 and served_sha() == v2_sha
    file.write_bytes(Path(versions["1"]).read_bytes())  # another model under the same name
    assert client.put("/admin/routing", json=route_to(v2_sha), headers=AUTH).status_code == 200  # the loaded one is still v2
    assert served_sha() == v2_sha
    assert client.put("/admin/routing", json=route_to(v1_sha), headers=AUTH).status_code == 200  # a new sha256: read from disk
    answer = client.post("/predict", json=serving.payload(images[:4]), headers={"x-request-key": "k"}).json()
    session = ort.InferenceSession(versions["1"], providers=["CPUExecutionProvider"])
    assert served_sha() == v1_sha and answer["version"] == "2" and answer["predictions"] == _predict(session, images[:4])
    refused = client.put("/admin/routing", json=route_to("1" * 64), headers=AUTH)  # neither loaded nor on disk
    assert refused.status_code == 422 and f"has sha256 {v1_sha}, the document expects {'1' * 64}" in refused.json()["detail"]
    assert served_sha() == v1_sha  # a refused document changes nothing


def _served_by_version(client) -> dict[str, float]:
    samples = loadgen.parse_metrics(client.get("/metrics").text)
    served: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if name == "onnx_service_version_requests_total":
            served[dict(labels)["version"]] = served.get(dict(labels)["version"], 0) + value
    return served


def _wait_for_more_answers(client, than: float, timeout: float = 60.0) -> float:
    """Wait until the service has answered more than ``than`` /predict requests; returns the count."""
    deadline = time.monotonic() + timeout
    while (answered := sum(_served_by_version(client).values())) <= than:
        assert time.monotonic() < deadline, f"no requests answered for {timeout:.0f} s"
        time.sleep(0.01)
    return answered


CONCURRENCY = 8


@pytest.mark.slow
def test_promote_and_roll_back_under_load_without_a_failed_request(versions, images):
    bodies = [serving.payload(images[i : i + 1]) for i in range(16)]
    results: list[loadgen.LoadResult] = []
    stop = threading.Event()

    def load() -> None:  # rounds of load until every switch is done
        while not stop.is_set():
            results.append(loadgen.load_test(service.url, bodies, concurrency=CONCURRENCY, requests=100, timeout=60))

    with (
        serving.start(versions["1"], admin_token=TOKEN) as service,
        httpx.Client(base_url=service.url, timeout=30.0, headers=AUTH) as admin,
    ):
        assert admin.put("/admin/routing", json=_document(versions)).status_code == 200
        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        try:
            answered = 0.0
            for switch in range(6):  # promote 2, roll back to 1, again and again, each while requests flow
                # more answers than requests in flight: some were routed after the last switch
                answered = _wait_for_more_answers(admin, answered + CONCURRENCY)
                champion, challenger = ("2", "1") if switch % 2 == 0 else ("1", "2")
                response = admin.put("/admin/routing", json=_document(versions, champion=champion, challenger=challenger))
                assert response.status_code == 200, response.text
                assert response.json()["aliases"]["champion"] == champion
            _wait_for_more_answers(admin, answered + CONCURRENCY)
        finally:
            stop.set()
            loader.join(150)
        served = _served_by_version(admin)
    assert not loader.is_alive() and results
    assert all(r.errors == 0 and r.wrong == 0 and set(r.statuses) == {200} for r in results), [r.first_error for r in results]
    assert served.get("1", 0) > 0 and served.get("2", 0) > 0  # both versions answered during the test
    assert service.process.returncode == 0


def _digits_like(path: Path, target_shape: list[int], seed: int = 0) -> str:
    """A model taking the CNN's input [batch, 1, 8, 8]: Reshape to ``target_shape``, MatMul to 10 logits.

    [-1, 64] runs every batch; [-1, 65] fails on every run; [1, 64] runs a batch of 1 only.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(seed).standard_normal((target_shape[-1], 10)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["image", "shape"], ["flat"]), helper.make_node("MatMul", ["flat", "weights"], ["logits"])],
        "digits_like",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(np.array(target_shape, dtype=np.int64), "shape"), numpy_helper.from_array(weights, "weights")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION), path)
    return str(path)


def _fails_from_batch(path: Path, rows: int) -> str:
    """A _digits_like model that adds row ``batch size`` of a ``rows``-row table to its logits: it fails from batch ``rows`` on."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Reshape", ["image", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "weights"], ["scores"]),
        helper.make_node("Shape", ["image"], ["shape"], end=1),
        helper.make_node("Squeeze", ["shape"], ["batch_size"]),
        helper.make_node("Gather", ["table", "batch_size"], ["row"]),  # index out of bounds from batch ``rows``
        helper.make_node("Add", ["scores", "row"], ["logits"]),
    ]
    initializers = [
        numpy_helper.from_array(np.array([-1, 64], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(np.ones((64, 10), dtype=np.float32), "weights"),
        numpy_helper.from_array(np.zeros((rows, 10), dtype=np.float32), "table"),
    ]
    graph = helper.make_graph(
        nodes,
        "fails_from_batch",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializers,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION), path)
    return str(path)


@pytest.mark.parametrize("batching", [False, True])
def test_warm_up_runs_the_largest_request_the_service_takes_at_start_up_and_on_a_switch(tmp_path, images, batching, in_process):
    served = _digits_like(tmp_path / "served.onnx", [-1, 64])
    fails_from_9 = _fails_from_batch(tmp_path / "fails_from_9.onnx", rows=9)  # batches 1-8 run: one request of 9-64 would not
    settings = Settings(admin_token=TOKEN, batching=batching, batch_max_size=8)
    starting = create_app(dataclasses.replace(settings, model=fails_from_9)).state.service
    asyncio.run(starting.warm_up())
    client = in_process(create_app(dataclasses.replace(settings, model=served)))
    refused = client.put("/admin/routing", json={"versions": {"b": fails_from_9}, "aliases": {"champion": "b"}}, headers=AUTH)
    predicted = client.post("/predict", json=serving.payload(images[:9]))
    assert not starting.warm and "on zeros of shape [64, 1, 8, 8]" in starting.warm_up_error, starting.warm_up_error
    assert refused.status_code == 422 and "on zeros of shape [64, 1, 8, 8]" in refused.json()["detail"], refused.text
    assert predicted.status_code == 200 and predicted.json()["version"] == "served"


def _model_info(client) -> dict[str, dict[str, str]]:
    samples = loadgen.parse_metrics(client.get("/metrics").text)
    return {dict(labels)["version"]: dict(labels) for (name, labels) in samples if name == "onnx_service_model_info"}


@pytest.mark.parametrize("batching", [False, True])
def test_a_switch_to_a_version_that_fails_its_warm_up_is_refused_and_changes_nothing(tmp_path, images, batching, in_process):
    served = _digits_like(tmp_path / "served.onnx", [-1, 64])
    broken = _digits_like(tmp_path / "broken.onnx", [-1, 65])
    batch1only = _digits_like(tmp_path / "batch1only.onnx", [1, 64])
    settings = Settings(model=served, admin_token=TOKEN, batching=batching, batch_max_size=8)
    client = in_process(create_app(settings))
    refusals = [
        client.put("/admin/routing", json={"versions": {"b": path}, "aliases": {"champion": "b"}}, headers=AUTH)
        for path in (broken, batch1only)
    ]
    predicted = client.post("/predict", json=serving.payload(images[:2]))
    ready = client.get("/ready")
    info = _model_info(client)
    assert [refusal.status_code for refusal in refusals] == [422, 422] and {r.json()["error"] for r in refusals} == {"bad_routing"}
    assert "version b failed its warm-up, so nothing changed" in refusals[0].json()["detail"]
    assert "on zeros of shape [64, 1, 8, 8]" in refusals[1].json()["detail"], refusals[1].json()["detail"]  # batch 1 ran, 64 did not
    assert predicted.status_code == 200 and predicted.json()["version"] == "served"
    assert ready.status_code == 200 and ready.json()["model"]["file"] == "served.onnx"
    assert list(info) == ["served"] and info["served"]["alias"] == "champion"


def test_model_info_and_ready_name_the_versions_served_after_every_switch(tmp_path, versions, in_process):
    other = _digits_like(tmp_path / "tiny2.onnx", [-1, 64], seed=2)
    client = in_process(create_app(Settings(model=versions["1"], admin_token=TOKEN)))
    before = _model_info(client)
    document = {"versions": {"a": versions["1"], "b": other}, "aliases": {"champion": "b", "challenger": "a"}, "shadow": "a"}
    assert client.put("/admin/routing", json=document, headers=AUTH).status_code == 200
    after, ready = _model_info(client), client.get("/ready").json()
    assert list(before) == ["digits_cnn"] and before["digits_cnn"]["alias"] == "champion"
    assert (
        after["b"]["alias"] == "champion" and after["b"]["name"] == "tiny2" and after["b"]["sha256"] == svc_model.sha256_file(Path(other))
    )
    assert after["a"]["alias"] == "challenger,shadow" and set(after) == {"a", "b"}
    assert ready["model"]["file"] == "tiny2.onnx" and ready["aliases"] == {"champion": "b", "challenger": "a"}


def test_the_bytes_verified_are_the_bytes_loaded_and_external_data_is_refused(tmp_path, monkeypatch):
    import onnx

    served, swapped = _digits_like(tmp_path / "model.onnx", [-1, 64], seed=1), _digits_like(tmp_path / "other.onnx", [-1, 64], seed=2)
    verified_bytes = Path(served).read_bytes()
    real_session = ort.InferenceSession

    def swap_then_load(model, *args, **kwargs):  # the file is replaced between the check and ONNX Runtime's load
        Path(served).write_bytes(Path(swapped).read_bytes())
        return real_session(model, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", swap_then_load)
    loaded = svc_model.load_served_model(served, expected_sha256=hashlib.sha256(verified_bytes).hexdigest())
    monkeypatch.undo()
    ones = np.ones((1, 1, 8, 8), dtype=np.float32)
    expected = real_session(verified_bytes, providers=["CPUExecutionProvider"]).run(None, {"image": ones})[0]
    np.testing.assert_array_equal(loaded.run(ones)[0], expected)  # it runs the model it verified, not the file swapped in

    external = tmp_path / "external.onnx"  # the weights in external.onnx.data: a swapped .data file would pass the .onnx's sha256
    onnx.save_model(onnx.load(swapped), external, save_as_external_data=True, location="external.onnx.data", size_threshold=0)
    with pytest.raises(svc_model.ModelError, match="keeps weights in external data files, which the sha256 check does not cover"):
        svc_model.load_served_model(external)


def test_external_data_in_a_model_local_function_is_refused(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    weights = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")  # raw_data: what onnx moves to a file
    body = [
        helper.make_node("Constant", [], ["w"], value=weights),  # the weights inside the function, not in the graph
        helper.make_node("Add", ["x", "w"], ["y"]),
    ]
    function = helper.make_function("local", "AddWeights", ["x"], ["y"], body, [helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("AddWeights", ["x"], ["y"], domain="local")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    model = helper.make_model(graph, functions=[function], opset_imports=opsets, ir_version=10)
    path = tmp_path / "function.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="function.onnx.data", size_threshold=0, convert_attribute=True)
    assert (tmp_path / "function.onnx.data").stat().st_size == 16  # onnx moved the function's constant out of the .onnx
    with pytest.raises(svc_model.ModelError, match="keeps weights in external data files, which the sha256 check does not cover"):
        svc_model.load_served_model(path)
