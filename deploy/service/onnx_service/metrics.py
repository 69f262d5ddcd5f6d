"""Request metrics in the Prometheus text exposition format (version 0.0.4), without extra dependencies.

Each worker process keeps its own numbers: with several uvicorn workers, a scrape sees the worker
that answered it (production setups scrape every replica, or use prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
QUEUE_BUCKETS = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _labels(pairs: dict[str, str]) -> str:
    if not pairs:
        return ""
    escaped = (
        f'{key}="{str(value).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), "")}"'
        for key, value in pairs.items()
    )
    return "{" + ",".join(escaped) + "}"


_VERSIONS_HELP = "/predict requests answered, by model version and alias."
_SHADOW_HELP = "Examples run by the shadow version: agree/disagree with the answer served, skipped (busy), failed."


def _counter_lines(name: str, help_text: str, label_names: tuple[str, ...], counts: Mapping[tuple[str, ...], float]) -> list[str]:
    """HELP, TYPE and one sample per label tuple of a labelled counter, in sorted order."""
    samples = (f"{name}{_labels(dict(zip(label_names, key, strict=True)))} {value}" for key, value in sorted(counts.items()))
    return [f"# HELP {name} {help_text}", f"# TYPE {name} counter", *samples]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _powers_of_two(limit: int) -> tuple[int, ...]:
    """Bucket bounds 1, 2, 4, ... below ``limit``, then ``limit`` itself."""
    bounds, size = [], 1
    while size < limit:
        bounds.append(size)
        size *= 2
    return (*bounds, limit)


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
            base = dict(zip(label_names, labels, strict=True))
            row = self.counts.get(labels, [0] * (len(self.buckets) + 1))
            for bound, count in zip(self.buckets, row, strict=False):  # the +Inf count follows
                out.append(f"{name}_bucket{_labels({**base, 'le': _number(bound)})} {count}")
            out.append(f"{name}_bucket{_labels({**base, 'le': '+Inf'})} {row[-1]}")
            out.append(f"{name}_sum{_labels(base)} {_number(self.sums.get(labels, 0.0))}")
            out.append(f"{name}_count{_labels(base)} {row[-1]}")
        return out


class Metrics:
    """The service's counters and histograms; thread-safe; ``render()`` gives the /metrics text."""

    def __init__(self, max_batch: int, batch_max_size: int = 0):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, str], int] = defaultdict(int)
        self.latency = Histogram(LATENCY_BUCKETS)
        self.inference = Histogram(LATENCY_BUCKETS)
        self.batch = Histogram(_powers_of_two(max_batch))
        self.in_flight = 0
        # the versions served now, one label set each (the Service sets it: a routing switch changes the answer)
        self.model_info: Callable[[], list[dict[str, str]]] = list
        # dynamic batching (batch_max_size > 0): examples per merged run, queue wait per request, queue depth
        self.batching = batch_max_size > 0
        self.run_size = Histogram(_powers_of_two(max(batch_max_size, 1)))
        self.queue_wait = Histogram(QUEUE_BUCKETS)
        self.queue_depth: Callable[[], int] = lambda: 0
        # model versions (notebook 13): requests answered per version and alias, shadow agreement per version
        self.versions: dict[tuple[str, str], int] = defaultdict(int)
        self.shadow: dict[tuple[str, str], int] = defaultdict(int)

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

    def observe_request_size(self, batch_size: int) -> None:
        """Examples in one accepted request whose inference ran in a merged batch (recorded by ``observe_batch``)."""
        with self._lock:
            self.batch.observe(batch_size)

    def observe_batch(self, examples: int, seconds: float, waits: list[float]) -> None:
        """One merged run of the batcher: its size and inference time, and how long each of its requests queued."""
        with self._lock:
            self.run_size.observe(examples)
            self.inference.observe(seconds)
            for wait in waits:
                self.queue_wait.observe(wait)

    def observe_version(self, version: str, alias: str) -> None:
        """One /predict request answered by ``version`` under ``alias`` (champion or challenger)."""
        with self._lock:
            self.versions[(version, alias)] += 1

    def observe_shadow(self, version: str, predictions: list | None, served: list, skipped: bool = False) -> None:
        """A shadow run: examples where it agreed or disagreed with the answer served, or why it did not run."""
        with self._lock:
            if predictions is None:
                self.shadow[(version, "skipped" if skipped else "failed")] += len(served)
                return
            agree = sum(1 for mine, theirs in zip(predictions, served, strict=False) if mine == theirs)
            self.shadow[(version, "agree")] += agree
            self.shadow[(version, "disagree")] += len(served) - agree

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        with self._lock:
            lines = [
                "# HELP onnx_service_requests_total HTTP requests answered, by method, path and status code.",
                "# TYPE onnx_service_requests_total counter",
                *(
                    f"onnx_service_requests_total{_labels({'method': m, 'path': p, 'status': s})} {n}"
                    for (m, p, s), n in sorted(self.requests.items())
                ),
                "# HELP onnx_service_request_duration_seconds Time from request start to response end, by path.",
                "# TYPE onnx_service_request_duration_seconds histogram",
                *self.latency.lines("onnx_service_request_duration_seconds", ("path",)),
                "# HELP onnx_service_inference_duration_seconds Time spent in session.run per /predict request"
                " (per merged batch with batching on).",
                "# TYPE onnx_service_inference_duration_seconds histogram",
                *self.inference.lines("onnx_service_inference_duration_seconds", ()),
                "# HELP onnx_service_batch_size Examples per accepted /predict request.",
                "# TYPE onnx_service_batch_size histogram",
                *self.batch.lines("onnx_service_batch_size", ()),
                "# HELP onnx_service_requests_in_flight Requests being processed now.",
                "# TYPE onnx_service_requests_in_flight gauge",
                f"onnx_service_requests_in_flight {self.in_flight}",
                "# HELP onnx_service_model_info The model versions served now, with the aliases that route to them (value is always 1).",
                "# TYPE onnx_service_model_info gauge",
                *(f"onnx_service_model_info{_labels(labels)} 1" for labels in self.model_info()),
            ]
            lines += _counter_lines("onnx_service_version_requests_total", _VERSIONS_HELP, ("version", "alias"), self.versions)
            if self.shadow:
                lines += _counter_lines("onnx_service_shadow_examples_total", _SHADOW_HELP, ("version", "outcome"), self.shadow)
            if self.batching:
                lines += [
                    "# HELP onnx_service_batcher_batch_size Examples per merged batch run by the dynamic batcher.",
                    "# TYPE onnx_service_batcher_batch_size histogram",
                    *self.run_size.lines("onnx_service_batcher_batch_size", ()),
                    "# HELP onnx_service_batcher_queue_wait_seconds Time a request waited in the batcher's queue.",
                    "# TYPE onnx_service_batcher_queue_wait_seconds histogram",
                    *self.queue_wait.lines("onnx_service_batcher_queue_wait_seconds", ()),
                    "# HELP onnx_service_batcher_queue_depth Requests waiting in the batcher's queue now.",
                    "# TYPE onnx_service_batcher_queue_depth gauge",
                    f"onnx_service_batcher_queue_depth {self.queue_depth()}",
                ]
        return "\n".join(lines) + "\n"
