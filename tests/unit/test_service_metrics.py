"""onnx_service.metrics: the Prometheus text the service renders, and series that invented requests cannot multiply."""

from __future__ import annotations

import math

from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import loadgen
from onnx_service import metrics as svc_metrics
from onnx_service.app import create_app
from onnx_service.config import Settings


def test_metrics_render_is_valid_prometheus_text():
    metrics = svc_metrics.Metrics(max_batch=8)
    metrics.model_info = lambda: [{"name": 'a"b'}]
    metrics.request_started()
    metrics.request_finished("POST", "/predict", 200, 0.003)
    metrics.observe_inference(3, 0.001)
    samples = loadgen.parse_metrics(metrics.render())
    assert samples[("onnx_service_batch_size_bucket", (("le", "2"),))] == 0
    assert samples[("onnx_service_batch_size_bucket", (("le", "4"),))] == 1
    assert samples[("onnx_service_request_duration_seconds_bucket", (("le", "0.0025"), ("path", "/predict")))] == 0
    assert samples[("onnx_service_request_duration_seconds_bucket", (("le", "0.005"), ("path", "/predict")))] == 1
    assert math.isclose(samples[("onnx_service_request_duration_seconds_sum", (("path", "/predict"),))], 0.003)
    assert 'name="a\\"b"' in metrics.render()


def test_invented_methods_and_paths_add_no_metric_series(in_process):
    http = in_process(create_app(Settings(model=str(ensure_digits_cnn()))))
    for number in range(60):
        assert http.request(f"M{number}", f"/predict{number % 3 or ''}").status_code in (404, 405)
    samples = loadgen.parse_metrics(http.get("/metrics").text)
    methods = {dict(labels)["method"] for (name, labels) in samples if name == "onnx_service_requests_total"}
    assert methods == {"other"}, methods  # 60 invented methods, one series (the scrape itself is counted once it is answered)
    counted = {labels: value for (name, labels), value in samples.items() if name == "onnx_service_requests_total"}
    assert sum(value for labels, value in counted.items() if dict(labels)["method"] == "other") == 60, counted
