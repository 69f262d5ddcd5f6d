"""Request metrics in the Prometheus text exposition format (version 0.0.4), without extra dependencies.

Each worker process keeps its own numbers: with several uvicorn workers, a scrape sees the worker
that answered it (production setups scrape every replica, or use prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import threading
from collections import defaultdict

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _labels(pairs: dict[str, str]) -> str:
    if not pairs:
        return ""
    escaped = (f'{key}="{str(value).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), "")}"' for key, value in pairs.items())
    return "{" + ",".join(escaped) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Histogram:
    """Cumulative buckets, sum and count per label set."""

    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = tuple(sorted(buckets))
        self.counts: dict[tuple, list[int]] = defaultdict(lambda: [0] * (len(self.buckets) + 1))
        self.sums: dict[tuple, float] = defaultdict(float)

    def observe(self, value: float, labels: tuple = ()) -> None:
        row = self.counts[labels]
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                row[i] += 1
        row[-1] += 1
        self.sums[labels] += value

    def lines(self, name: str, label_names: tuple[str, ...]) -> list[str]:
        out = []
        label_sets = sorted(self.counts) or ([()] if not label_names else [])  # an unlabeled histogram starts at zero
        for labels in label_sets:
            base = dict(zip(label_names, labels))
            row = self.counts.get(labels, [0] * (len(self.buckets) + 1))
            for bound, count in zip(self.buckets, row):
                out.append(f"{name}_bucket{_labels({**base, 'le': _number(bound)})} {count}")
            out.append(f"{name}_bucket{_labels({**base, 'le': '+Inf'})} {row[-1]}")
            out.append(f"{name}_sum{_labels(base)} {_number(self.sums.get(labels, 0.0))}")
            out.append(f"{name}_count{_labels(base)} {row[-1]}")
        return out


class Metrics:
    """The service's counters and histograms; thread-safe; ``render()`` gives the /metrics text."""

    def __init__(self, max_batch: int, model_info: dict[str, str] | None = None):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, str], int] = defaultdict(int)
        self.latency = Histogram(LATENCY_BUCKETS)
        self.inference = Histogram(LATENCY_BUCKETS)
        batch_buckets, size = [], 1
        while size < max_batch:
            batch_buckets.append(size)
            size *= 2
        self.batch = Histogram(tuple(batch_buckets + [max_batch]))
        self.in_flight = 0
        self.model_info = model_info or {}

    def request_started(self) -> None:
        with self._lock:
            self.in_flight += 1

    def request_finished(self, method: str, path: str, status: int, seconds: float) -> None:
        with self._lock:
            self.in_flight -= 1
            self.requests[(method, path, str(status))] += 1
            self.latency.observe(seconds, (path,))

    def observe_inference(self, batch_size: int, seconds: float) -> None:
        with self._lock:
            self.batch.observe(batch_size)
            self.inference.observe(seconds)

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        with self._lock:
            lines = [
                "# HELP onnx_service_requests_total HTTP requests answered, by method, path and status code.",
                "# TYPE onnx_service_requests_total counter",
                *(f"onnx_service_requests_total{_labels({'method': m, 'path': p, 'status': s})} {n}" for (m, p, s), n in sorted(self.requests.items())),
                "# HELP onnx_service_request_duration_seconds Time from request start to response end, by path.",
                "# TYPE onnx_service_request_duration_seconds histogram",
                *self.latency.lines("onnx_service_request_duration_seconds", ("path",)),
                "# HELP onnx_service_inference_duration_seconds Time spent in session.run per /predict request.",
                "# TYPE onnx_service_inference_duration_seconds histogram",
                *self.inference.lines("onnx_service_inference_duration_seconds", ()),
                "# HELP onnx_service_batch_size Examples per accepted /predict request.",
                "# TYPE onnx_service_batch_size histogram",
                *self.batch.lines("onnx_service_batch_size", ()),
                "# HELP onnx_service_requests_in_flight Requests being processed now.",
                "# TYPE onnx_service_requests_in_flight gauge",
                f"onnx_service_requests_in_flight {self.in_flight}",
                "# HELP onnx_service_model_info The served model (value is always 1).",
                "# TYPE onnx_service_model_info gauge",
                f"onnx_service_model_info{_labels(self.model_info)} 1",
            ]
        return "\n".join(lines) + "\n"
