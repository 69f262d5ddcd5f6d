"""Model versions in deploy/service (notebook 13): aliases, a deterministic split, shadow runs, switching under load."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import httpx
import onnxruntime as ort
import pytest
from fastapi.testclient import TestClient

from labsupport import serve
from labsupport.data import load_digits
from labsupport.models import ensure_digits_cnn
from labsupport.sklearn_models import ensure_digits_sklearn

serve.service_package()
from deploy.service.onnx_service import routing  # noqa: E402
from deploy.service.onnx_service.app import create_app  # noqa: E402
from deploy.service.onnx_service.config import Settings  # noqa: E402

TOKEN = "test-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    folder = tmp_path_factory.mktemp("versions")
    other = serve.heavy_classifier(folder / "other.onnx", hidden=64, layers=2)  # same input as the CNN, other answers
    return {"1": str(ensure_digits_cnn()), "2": str(other)}


@pytest.fixture(scope="module")
def images():
    return load_digits().test.images


def _document(versions, champion="1", challenger="2", percent=0, shadow=None):
    return {"versions": versions, "aliases": {"champion": champion, "challenger": challenger}, "challenger_percent": percent, "shadow": shadow}


def _predict(session, images):
    return session.run(None, {"image": images})[0].argmax(axis=1).tolist()


def test_buckets_are_stable_and_spread():
    assert routing.bucket("user-42") == routing.bucket("user-42")
    buckets = [routing.bucket(f"user-{i}") for i in range(10_000)]
    assert 0 <= min(buckets) and max(buckets) <= 99
    share = sum(b < 10 for b in buckets) / len(buckets)
    assert 0.08 < share < 0.12  # 10% of keys to the challenger


def test_split_by_request_key_and_shadow_counts(tmp_path, versions, images):
    routing_file = tmp_path / "routing.json"
    routing_file.write_text(json.dumps(_document(versions, percent=30, shadow="2")))
    sessions = {name: ort.InferenceSession(path, providers=["CPUExecutionProvider"]) for name, path in versions.items()}
    with TestClient(create_app(Settings(model=versions["1"], routing=str(routing_file)))) as client:
        served, champion_examples = {}, 0
        for i in range(60):
            key = f"user-{i}"
            response = client.post("/predict", json=serve.payload(images[i : i + 2]), headers={"x-request-key": key})
            body = response.json()
            want = "2" if routing.bucket(key) < 30 else "1"
            assert (body["version"], body["alias"]) == (want, "challenger" if want == "2" else "champion")
            assert response.headers["x-model-version"] == want
            assert body["predictions"] == _predict(sessions[want], images[i : i + 2])
            served[key] = want
            champion_examples += 2 if want == "1" else 0
        again = client.post("/predict", json=serve.payload(images[:1]), headers={"x-request-key": "user-7"}).json()
        assert again["version"] == served["user-7"]  # the same key, the same version
        assert client.post("/predict", json=serve.payload(images[:1])).json()["version"] == "1"  # no key: champion
        champion_examples += 1 + (again["version"] == "1")
        time.sleep(0.5)  # shadow runs finish in the background
        samples = serve.parse_metrics(client.get("/metrics").text)
    champion_requests = sum(v == "1" for v in served.values()) + 1 + (served["user-7"] == "1")
    counted = {outcome: samples.get(("onnx_service_shadow_examples_total", (("outcome", outcome), ("version", "2"))), 0) for outcome in ("agree", "disagree", "skipped", "failed")}
    assert counted["failed"] == 0
    assert counted["agree"] + counted["disagree"] + counted["skipped"] == champion_examples  # every example the champion served
    assert counted["agree"] + counted["disagree"] > 0
    assert samples[("onnx_service_version_requests_total", (("alias", "champion"), ("version", "1")))] == champion_requests


def test_admin_api_needs_a_token_and_refuses_bad_documents(versions):
    sklearn_model = str(ensure_digits_sklearn())
    with TestClient(create_app(Settings(model=versions["1"]))) as closed:
        assert closed.put("/admin/routing", json=_document(versions)).status_code == 403
    with TestClient(create_app(Settings(model=versions["1"], admin_token=TOKEN))) as client:
        assert client.get("/admin/routing").status_code == 401
        assert client.put("/admin/routing", json=_document(versions), headers={"authorization": "Bearer wrong"}).status_code == 401
        cases = [
            ({"versions": versions}, "name the champion"),
            (_document(versions, champion="9"), "point at listed versions"),
            (_document(versions, percent=101), "0-100"),
            (_document(versions, shadow="7"), '"shadow" must be one of'),
            (_document({**versions, "3": sklearn_model}, champion="3"), "version 3 takes \\[64\\] float32; the service takes \\[1, 8, 8\\]"),
            (_document({**versions, "2": "missing.onnx"}), "model file not found"),
        ]
        for document, message in cases:
            response = client.put("/admin/routing", json=document, headers=AUTH)
            assert response.status_code == 422, document
            assert re.search(message, response.json()["detail"]), response.json()["detail"]
        assert client.get("/admin/routing", headers=AUTH).json()["aliases"] == {"champion": Path(versions["1"]).stem}


@pytest.mark.slow
def test_promote_and_roll_back_under_load_without_a_failed_request(versions, images):
    routing_doc = _document(versions)
    with serve.start(versions["1"], admin_token=TOKEN) as service:
        with httpx.Client(base_url=service.url, timeout=30.0, headers=AUTH) as admin:
            assert admin.put("/admin/routing", json=routing_doc).status_code == 200
            bodies = [serve.payload(images[i : i + 1]) for i in range(16)]
            outcome = {}
            load = threading.Thread(target=lambda: outcome.update(result=serve.load_test(service.url, bodies, concurrency=8, requests=1200, timeout=120)))
            load.start()
            switches = 0
            while load.is_alive() and switches < 12:  # promote 2, roll back to 1, again and again, while the load runs
                time.sleep(0.1)
                champion, challenger = ("2", "1") if switches % 2 == 0 else ("1", "2")
                response = admin.put("/admin/routing", json=_document(versions, champion=champion, challenger=challenger))
                assert response.status_code == 200, response.text
                assert response.json()["aliases"]["champion"] == champion
                switches += 1
            load.join(150)
            samples = serve.parse_metrics(admin.get("/metrics").text)
    result = outcome["result"]
    assert result.requests == 1200 and result.errors == 0 and result.statuses == {200: 1200}, result.first_error
    assert switches >= 4, "the load test ended before the aliases were switched a few times"
    served = {dict(labels)["version"]: value for (name, labels), value in samples.items() if name == "onnx_service_version_requests_total"}
    assert served.get("1", 0) > 0 and served.get("2", 0) > 0  # both versions answered during the test
    assert service.process.returncode == 0
