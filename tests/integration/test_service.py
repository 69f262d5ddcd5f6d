"""The inference service of deploy/service (notebook 08), started for real and called over HTTP on 127.0.0.1."""

from __future__ import annotations

import re
import socket
from urllib.parse import urlsplit

import httpx
import numpy as np
import onnxruntime as ort
import pytest
from playwright.sync_api import sync_playwright

from labsupport.course.compare import compare, softmax
from labsupport.course.data import load_digits
from labsupport.models.contract import IR_VERSION, OPSET
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.models.heavy_classifier import write_heavy_classifier
from labsupport.topics import loadgen, serving, web
from onnx_service import config as svc_config
from onnx_service import model as svc_model
from onnx_service.app import create_app

MAX_BATCH = 64
MAX_BODY = 200_000


@pytest.fixture(scope="module")
def model_path():
    return ensure_digits_cnn()


@pytest.fixture(scope="module")
def digits_test():
    return load_digits().test


@pytest.fixture(scope="module")
def reference(model_path, digits_test):
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return session.run(None, {"image": digits_test.images})[0]


@pytest.fixture(scope="module")
def service(model_path):
    svc = serving.start(model_path, max_batch=MAX_BATCH, max_body_bytes=MAX_BODY)
    yield svc
    assert svc.stop() == 0, svc.log_text()[-2000:]
    assert "Shutting down" in svc.log_text()


@pytest.fixture(scope="module")
def client(service):
    with httpx.Client(base_url=service.url, timeout=30.0) as http:
        yield http


def _predict_all(client, images, batch=60):
    predictions, probabilities = [], []
    for start in range(0, len(images), batch):
        response = client.post("/predict", json=serving.payload(images[start : start + batch]))
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["batch_size"] == len(images[start : start + batch])
        predictions += body["predictions"]
        probabilities += body["probabilities"]
    return np.array(predictions), np.array(probabilities)


# ---------------------------------------------------------------- happy path


def test_predictions_match_in_process_onnxruntime_on_the_test_set(client, digits_test, reference):
    predictions, probabilities = _predict_all(client, digits_test.images)
    assert predictions.tolist() == reference.argmax(axis=1).tolist()
    report = compare(softmax(reference), probabilities, atol=1e-5, rtol=1e-3, name="service vs ORT")
    assert report.passed
    assert np.mean(predictions == digits_test.labels) > 0.9


def test_one_example_without_batch_dimension(client, digits_test, reference):
    response = client.post("/predict", json={"inputs": digits_test.images[7].tolist()})
    assert response.status_code == 200
    assert response.json()["predictions"] == [int(reference[7].argmax())]
    assert response.json()["batch_size"] == 1


def test_health_and_ready_describe_the_model(client, model_path):
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/ready").json()
    assert ready["ready"] is True and ready["max_batch"] == MAX_BATCH and ready["handler"] == "threadpool"
    described = ready["model"]
    assert described["name"] == "digits_cnn" and described["file"] == "digits_cnn.onnx"
    assert described["sha256"] == svc_model.sha256_file(model_path)
    assert described["opset"] >= 17
    assert described["inputs"] == [{"name": "image", "type": "tensor(float)", "shape": ["batch", 1, 8, 8]}]
    assert described["outputs"][0]["shape"][1] == 10


def test_openapi_documents_predict(client):
    spec = client.get("/openapi.json").json()
    assert {"/predict", "/health", "/ready", "/metrics"} <= set(spec["paths"])
    body = spec["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["inputs"]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    scripts = re.findall(r'<script src="([^"]+)"', docs.text) + re.findall(r'<link[^>]+href="([^"]+)"', docs.text)
    assert scripts and all(src.startswith("/docs/assets/") for src in scripts), scripts  # no CDN: the page works offline
    bundle = client.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and "javascript" in bundle.headers["content-type"] and len(bundle.content) > 500_000


def test_docs_page_renders_predict_in_a_browser_without_internet(service, require_tool):
    require_tool(web.CHROMIUM, "the browser test drives Debian's Chromium (apt-get install chromium)")
    outside: list[str] = []

    def only_the_service(route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = web.launch_chromium(playwright)
        try:
            page = browser.new_page()
            page.route("**/*", only_the_service)
            page.goto(service.url + "/docs")
            page.wait_for_selector(".opblock-summary-path[data-path='/predict']", timeout=30_000)
            assert "ONNX Lab inference service" in page.inner_text(".info .title")
        finally:
            browser.close()
    assert outside == [], f"/docs asked other hosts: {outside}"


# ---------------------------------------------------------------- bad input

GOOD = np.zeros((1, 8, 8)).tolist()
JSON = {"content-type": "application/json"}
# one bad request per status over real HTTP; the whole table runs in-process in tests/unit/test_service_validation.py
BAD_OVER_HTTP = [
    ({"json": {"inputs": [[0.0] * 64]}}, 422, "wrong_shape"),
    ({"content": b"inputs=1,2,3", "headers": JSON}, 400, "invalid_json"),
    ({"content": b"[" + b"0," * MAX_BODY + b"0]", "headers": JSON}, 413, "body_too_large"),
    ({"content": b"{}", "headers": {"content-type": "text/plain"}}, 415, "unsupported_media_type"),
]


def test_bad_input_over_http_gets_its_4xx_and_the_server_stays_correct(client, service, digits_test, reference):
    for kwargs, status, code in BAD_OVER_HTTP:
        response = client.post("/predict", **kwargs)
        assert (response.status_code, response.json()["error"]) == (status, code), response.text
    assert service.running
    predictions, _ = _predict_all(client, digits_test.images[:120])
    assert predictions.tolist() == reference[:120].argmax(axis=1).tolist()
    # no request so far produced a server error
    samples = loadgen.parse_metrics(client.get("/metrics").text)
    requests = [dict(labels) for (name, labels) in samples if name == "onnx_service_requests_total"]
    assert not any(labels["status"].startswith("5") for labels in requests if labels["path"] != "/ready")  # /ready: 503 until warm


def test_oversized_chunked_body_without_content_length_is_cut_off(client):
    def chunks():
        yield b'{"inputs": ['
        for _ in range(MAX_BODY // 1000 + 10):
            yield b"0," * 500

    response = client.post("/predict", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers
    assert response.status_code == 413 and response.json()["error"] == "body_too_large"
    assert f"exceeds the maximum of {MAX_BODY} bytes" in response.json()["detail"]


def test_unknown_route_and_wrong_method(client):
    assert client.get("/nothing-here").status_code == 404
    assert client.get("/predict").status_code == 405


# ---------------------------------------------------------------- metrics


def test_metrics_count_requests_by_status_and_batch_sizes(client, digits_test):
    before = loadgen.parse_metrics(client.get("/metrics").text)
    key_ok = ("onnx_service_requests_total", (("method", "POST"), ("path", "/predict"), ("status", "200")))
    key_bad = ("onnx_service_requests_total", (("method", "POST"), ("path", "/predict"), ("status", "422")))
    batch_count = ("onnx_service_batch_size_count", ())
    client.post("/predict", json=serving.payload(digits_test.images[:5]))
    client.post("/predict", json=serving.payload(digits_test.images[:1]))
    client.post("/predict", json={"inputs": []})
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    after = loadgen.parse_metrics(response.text)
    assert after[key_ok] - before.get(key_ok, 0) == 2
    assert after[key_bad] - before.get(key_bad, 0) == 1
    assert after[batch_count] - before.get(batch_count, 0) == 2
    assert (
        after[("onnx_service_batch_size_bucket", (("le", "4"),))] - before.get(("onnx_service_batch_size_bucket", (("le", "4"),)), 0) == 1
    )
    latency_count = ("onnx_service_request_duration_seconds_count", (("path", "/predict"),))
    assert after[latency_count] >= after[key_ok]
    assert after[("onnx_service_request_duration_seconds_bucket", (("le", "+Inf"), ("path", "/predict")))] == after[latency_count]
    info = [labels for (name, labels) in after if name == "onnx_service_model_info"]
    assert dict(info[0])["name"] == "digits_cnn"
    assert after[("onnx_service_requests_in_flight", ())] == 1  # the scrape itself


# ---------------------------------------------------------------- start-up failures


def test_startup_with_missing_model_exits_non_zero(tmp_path):
    result = serving.run_to_exit(tmp_path / "missing.onnx")
    assert result.returncode == 2
    assert "cannot start: model file not found" in result.stderr and "missing.onnx" in result.stderr


def test_startup_with_wrong_sha256_exits_non_zero(model_path):
    result = serving.run_to_exit(model_path, model_sha256="ab" * 32)
    assert result.returncode == 2
    assert "model sha256 mismatch" in result.stderr and "ab" * 32 in result.stderr


def test_startup_with_corrupted_model_exits_non_zero(tmp_path, model_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(model_path.read_bytes()[:2000] + b"\xff" * 64)
    result = serving.run_to_exit(broken)
    assert result.returncode == 2
    assert "not a valid ONNX model" in result.stderr or "cannot load" in result.stderr


def test_startup_with_invalid_setting_exits_non_zero(model_path):
    result = serving.run_to_exit(model_path, max_batch="lots")
    assert result.returncode == 2
    assert "ONNX_SERVICE_MAX_BATCH='lots': expected a whole number" in result.stderr


@pytest.mark.parametrize("name", ["digits \u2713", "a\rb", "x" * 65, "\u6a21\u578b"])
def test_a_model_name_the_version_header_cannot_carry_is_refused_at_start(model_path, name):
    with pytest.raises(svc_config.ConfigError, match=r"ONNX_SERVICE_MODEL_NAME=.*expected 1-64 characters among A-Z"):
        svc_config.Settings.from_env({"ONNX_SERVICE_MODEL_NAME": name})
    with pytest.raises(svc_config.ConfigError, match="ONNX_SERVICE_MODEL_NAME"):
        create_app(svc_config.Settings(model=str(model_path), model_name=name))  # settings built in code are checked too
    result = serving.run_to_exit(model_path, model_name=name)
    assert result.returncode == 2 and "ONNX_SERVICE_MODEL_NAME" in result.stderr, result.stderr[-500:]


def test_a_file_named_outside_the_header_alphabet_serves_under_a_sanitised_version_name(tmp_path, model_path, in_process):
    renamed = tmp_path / "\u6a21\u578b v2.onnx"  # a Chinese file name: the header and metric labels take A-Z a-z 0-9 . _ - only
    renamed.write_bytes(model_path.read_bytes())
    http = in_process(create_app(svc_config.Settings.from_env({"ONNX_SERVICE_MODEL": str(renamed)})))
    answer = http.post("/predict", json={"inputs": GOOD})
    ready = http.get("/ready")
    assert answer.status_code == 200 and answer.headers["x-model-version"] == "v2" and answer.json()["version"] == "v2"
    assert answer.json()["model"] == "\u6a21\u578b v2"  # the JSON body keeps the file's own name
    assert ready.status_code in (200, 503) and ready.json()["aliases"] == {"champion": "v2"}
    unnamed = tmp_path / "\u6a21\u578b.onnx"
    unnamed.write_bytes(model_path.read_bytes())
    assert svc_model.load_served_model(unnamed).name == "\u6a21\u578b"
    assert create_app(svc_config.Settings(model=str(unnamed))).state.service.routing.aliases == {"champion": "1"}


def test_startup_on_a_port_in_use_exits_non_zero(model_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serving.run_to_exit(model_path, port=port)
    assert result.returncode == 2
    assert f"cannot start: cannot listen on 127.0.0.1:{port}" in result.stderr


def test_the_service_prints_the_port_it_bound(service):
    assert service.port > 0 and f"onnx_service: listening on http://127.0.0.1:{service.port}" in service.log_text()


def test_start_raises_with_the_service_message(tmp_path):
    with pytest.raises(serving.ServiceError, match="model file not found"):
        serving.start(tmp_path / "nope.onnx", ready_timeout=60)


# ---------------------------------------------------------------- in-process: errors, other classifiers


class _ExplodingSession:
    def run(self, *args, **kwargs):
        raise RuntimeError("secret internal detail /srv/private/path")


def test_unexpected_error_is_a_bare_500_and_the_app_keeps_serving(model_path, caplog, in_process):
    loaded = svc_model.load_served_model(model_path)
    real_session = loaded.session
    loaded.session = _ExplodingSession()
    http = in_process(create_app(svc_config.Settings(model=str(model_path)), loaded))
    response = http.post("/predict", json={"inputs": GOOD})
    assert response.status_code == 500
    assert response.json() == {"error": "internal", "detail": "internal server error; the incident was logged"}
    assert "secret" not in response.text
    assert "secret internal detail" in caplog.text  # logged for the operator
    loaded.session = real_session
    assert http.post("/predict", json={"inputs": GOOD}).status_code == 200
    metrics = loadgen.parse_metrics(http.get("/metrics").text)
    assert metrics[("onnx_service_requests_total", (("method", "POST"), ("path", "/predict"), ("status", "500")))] == 1


def test_any_classifier_scikit_learn_with_label_and_probability_outputs(tmp_path, in_process):
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    digits = load_digits()
    classifier = LogisticRegression(max_iter=300).fit(digits.train.flat, digits.train.labels)
    onx = to_onnx(classifier, digits.train.flat[:1], options={id(classifier): {"zipmap": False}}, target_opset=18)
    path = tmp_path / "logreg.onnx"
    path.write_bytes(onx.SerializeToString())
    loaded = svc_model.load_served_model(path)
    assert loaded.label_output == "label" and loaded.score_output == "probabilities"
    http = in_process(create_app(svc_config.Settings(model=str(path), max_batch=100), loaded))
    ok = http.post("/predict", json={"inputs": digits.test.flat[:100].tolist()})
    assert ok.status_code == 200
    assert ok.json()["predictions"] == classifier.predict(digits.test.flat[:100]).tolist()
    np.testing.assert_allclose(ok.json()["probabilities"], classifier.predict_proba(digits.test.flat[:100]), atol=1e-4)
    wrong = http.post("/predict", json={"inputs": digits.test.images[:2].tolist()})
    assert wrong.status_code == 422 and "expected one example of shape [64]" in wrong.json()["detail"]


def test_model_with_two_inputs_is_refused(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        "two_inputs",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", 3]) for name in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
    )
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION), path)
    with pytest.raises(svc_model.ModelError, match=r"exactly one input; 'two\.onnx' has 2: a, b"):
        svc_model.load_served_model(path)


# ---------------------------------------------------------------- serve helpers (config, validation and metrics: tests/unit/test_service_*.py)


def test_serve_helpers_refuse_bad_arguments():
    with pytest.raises(ValueError, match="only calls services on this machine"):
        loadgen.load_test("http://example.com:80", [{}], concurrency=1, requests=1)
    with pytest.raises(ValueError, match="concurrency must be between 1 and 64"):
        loadgen.load_test("http://127.0.0.1:9", [{}], concurrency=0, requests=1)
    with pytest.raises(ValueError, match="requests must be between 1 and 50000"):
        loadgen.load_test("http://127.0.0.1:9", [{}], concurrency=1, requests=10**6)
    with pytest.raises(ValueError, match="one entry per body"):
        loadgen.load_test("http://127.0.0.1:9", [{}], concurrency=1, requests=1, expected=[])
    with pytest.raises(ValueError, match="workers must be between 1 and 8"):
        serving.start("x.onnx", workers=0)
    with pytest.raises(ValueError, match="not a Prometheus sample line"):
        loadgen.parse_metrics("this is not a metric line at all {")
    assert serving.payload(np.zeros((2, 1, 8, 8), dtype=np.float32))["inputs"][1][0][7] == [0.0] * 8


def test_service_env_sets_loopback_and_settings(tmp_path):
    env = serving.service_env(tmp_path / "m.onnx", 1234, max_batch=8, access_log=True, threads=None)
    assert env["ONNX_SERVICE_HOST"] == "127.0.0.1" and env["ONNX_SERVICE_PORT"] == "1234"
    assert env["ONNX_SERVICE_MODEL"] == str((tmp_path / "m.onnx").resolve())
    assert env["ONNX_SERVICE_MAX_BATCH"] == "8" and env["ONNX_SERVICE_ACCESS_LOG"] == "1"
    assert "ONNX_SERVICE_THREADS" not in env


def test_load_test_counts_connection_errors():
    with socket.socket() as bound_only:  # bound but not listening: every connection is refused
        bound_only.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound_only.getsockname()[1]}"
        result = loadgen.load_test(url, [{"inputs": GOOD}], concurrency=2, requests=4, timeout=10)
    assert result.requests == 4 and result.errors == 4 and result.ok == 0
    assert result.statuses == {0: 4} and "ConnectError" in result.first_error
    row = result.row(variant="nothing listening")
    assert row["variant"] == "nothing listening" and row["errors"] == 4 and "health_p50_ms" not in row


def test_load_test_checks_every_answer_and_reports_the_probe(service, digits_test, reference):
    bodies = [serving.payload(digits_test.images[i : i + 1]) for i in range(4)]
    truth = [[int(reference[i].argmax())] for i in range(4)]
    good = loadgen.load_test(service.url, bodies, concurrency=3, requests=30, expected=truth, probe="/health")
    assert (good.requests, good.ok, good.errors, good.wrong, good.statuses) == (30, 30, 0, 0, {200: 30}), good.first_error
    assert good.probe_count >= 1 and good.probe_p99_ms >= good.probe_p50_ms
    misread = loadgen.load_test(service.url, bodies, concurrency=2, requests=8, expected=[[(t[0] + 1) % 10] for t in truth])
    assert (misread.ok, misread.wrong, misread.errors) == (0, 8, 0) and misread.first_error.startswith("wrong predictions for body")


def test_load_test_counts_4xx_and_keeps_serving_on_the_same_connections(service):
    too_big = {"inputs": np.zeros((MAX_BODY // 200, 1, 8, 8)).tolist()}  # over max_body_bytes: 413
    for bad, status in (({"inputs": [[0.0] * 64]}, 422), (too_big, 413)):
        result = loadgen.load_test(service.url, [{"inputs": GOOD}, bad], concurrency=2, requests=20)
        assert result.statuses == {200: 10, status: 10} and result.errors == 10, result.statuses
        assert result.first_error.startswith(f"HTTP {status}: ")


def test_measure_batching_needs_a_batching_service(service, model_path):
    from labsupport.bench import service as service_bench

    with pytest.raises(ValueError, match="batching=True"):
        service_bench.measure_batching(service, service, model_path)


def test_heavy_classifier_is_a_servable_stand_in(tmp_path):
    path = write_heavy_classifier(tmp_path / "heavy.onnx", hidden=64, layers=3)
    loaded = svc_model.load_served_model(path)
    assert loaded.input.shape == ("batch", 1, 8, 8) and loaded.score_output == "logits" and loaded.opset == OPSET
    images = load_digits().test.images[:5]
    logits = loaded.session.run(None, {"image": images})[0]
    assert logits.shape == (5, 10) and np.isfinite(logits).all()
    again = ort.InferenceSession(
        str(write_heavy_classifier(tmp_path / "again.onnx", hidden=64, layers=3)), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_array_equal(again.run(None, {"image": images})[0], logits)  # seeded: the same model twice
    with pytest.raises(ValueError, match=r"layers must be 1\.\.64"):
        write_heavy_classifier(tmp_path / "x.onnx", layers=0)
