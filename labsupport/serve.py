"""Start the course's inference service (``deploy/service``) as a real process, and load-test it.

Introduced in notebook 08. ``start(model)`` runs ``python -m deploy.service`` on loopback port 0
(the service binds a free port itself and logs it; no probe-then-bind race) and waits for ``/ready``; the returned ``Service`` is a context manager whose ``stop()``
shuts it down with SIGTERM (graceful) and returns the exit status. ``load_test`` sends a bounded
number of requests at a fixed concurrency (asyncio clients, one keep-alive connection each) and
reports throughput and p50/p99 latency. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import ParseResult, urlparse

import numpy as np

from labsupport.paths import repo_root

SERVICE_MODULE = "deploy.service"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MAX_REQUESTS = 50_000
MAX_CONCURRENCY = 64
MAX_SECONDS = 300.0


_RUNNING: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()
_LOGS: list[Path] = []


def _stop_leftovers() -> None:
    """At interpreter exit (kernel shutdown, end of pytest), stop services never stopped and delete their logs."""
    for process in list(_RUNNING):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
    for log in _LOGS:
        log.unlink(missing_ok=True)


atexit.register(_stop_leftovers)


def _child_setup(cpus: frozenset[int] | None) -> Callable[[], None]:
    """The function run in the child between fork and exec: pin it to ``cpus`` (if given), tie its life to ours."""

    def setup() -> None:  # pragma: no cover - runs in the child
        if cpus:
            os.sched_setaffinity(0, cpus)
        _die_with_parent()

    return setup


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM the service when the process that started it dies (a crashed or killed kernel)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


class ServiceError(RuntimeError):
    """The service did not start (its log tail is in the message) or did not stop in time."""


def service_package() -> ModuleType:
    """The ``deploy.service.onnx_service`` package, importable in-process (config, model, validation, triton)."""
    root = str(repo_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(f"{SERVICE_MODULE}.onnx_service")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def service_env(model: str | Path, port: int, **settings: object) -> dict[str, str]:
    """The environment for the service process: ``ONNX_SERVICE_*`` from ``model``, ``port`` and keyword settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ONNX_SERVICE_")}
    env.update({"ONNX_SERVICE_MODEL": str(Path(model).resolve()), "ONNX_SERVICE_PORT": str(port), "ONNX_SERVICE_HOST": "127.0.0.1"})
    for key, value in settings.items():
        if value is not None:
            env["ONNX_SERVICE_" + key.upper()] = str(int(value) if isinstance(value, bool) else value)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Service:
    """A running service process: ``url``, ``port``, ``log_text()``, ``stop()``; use it in a ``with`` block."""

    process: subprocess.Popen
    url: str
    port: int
    log_path: Path
    settings: dict[str, object] = field(default_factory=dict)

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        """Everything the service printed so far (uvicorn and service log lines)."""
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM (uvicorn finishes in-flight requests and exits), SIGKILL after ``timeout``; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return int(self.process.returncode)


def _check_loopback(url: str) -> None:
    host = urlparse(url).hostname
    if host not in LOOPBACK:
        raise ValueError(f"the course only calls services on this machine (127.0.0.1); got host {host!r}")


_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def _bound_port(log_text: str) -> int | None:
    """The port the service bound, from uvicorn's "Uvicorn running on http://127.0.0.1:PORT" log line."""
    match = _LISTENING.search(log_text)
    return int(match.group(1)) if match else None


def start(
    model: str | Path,
    *,
    workers: int = 1,
    handler: str = "threadpool",
    ready_timeout: float = 90.0,
    cpus: set[int] | None = None,
    **settings: object,
) -> Service:
    """Start ``python -m deploy.service`` for ``model`` on 127.0.0.1, port 0, and wait until GET /ready answers 200.

    The service binds a free port itself; ``Service.port`` is the one it reports. ``settings`` are
    service settings in lower case (``threads``, ``max_batch``, ``batching``, ``model_sha256``...);
    ``cpus`` pins the process to those CPUs (Linux affinity, like ``taskset``). Raises ServiceError
    with the service's own message if it exits or never gets ready.
    """
    import httpx

    if workers < 1 or workers > 8:
        raise ValueError(f"workers must be between 1 and 8 on a laptop, got {workers}")
    if cpus is not None and not hasattr(os, "sched_setaffinity"):
        raise ValueError("cpus= needs CPU affinity masks, which only Linux has")
    settings.setdefault("log_level", "info")  # the port is read from uvicorn's info line
    env = service_env(model, 0, workers=workers, handler=handler, **settings)
    handle, log_name = tempfile.mkstemp(prefix="onnx-service-", suffix=".log")
    log_path = Path(log_name)
    _LOGS.append(log_path)
    with os.fdopen(handle, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", SERVICE_MODULE],
            cwd=repo_root(),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the notebook does not reach it; stop() does
            preexec_fn=_child_setup(frozenset(cpus) if cpus else None),
        )
    _RUNNING.add(process)
    service = Service(process, "", 0, log_path, {"workers": workers, "handler": handler, **settings})
    deadline = time.monotonic() + ready_timeout
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ServiceError(f"the service exited with status {process.returncode} before it was ready:\n{service.log_text()[-2000:]}")
            port = service.port or _bound_port(service.log_text())
            if port:
                service.port, service.url = port, f"http://127.0.0.1:{port}"
                try:
                    if client.get(service.url + "/ready").status_code == 200:
                        return service
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
    service.stop()
    raise ServiceError(f"the service was not ready after {ready_timeout:.0f} s:\n{service.log_text()[-2000:]}")


def run_to_exit(model: str | Path, timeout: float = 60.0, **settings: object) -> subprocess.CompletedProcess:
    """Run the service command expecting it to exit on its own (a start-up failure); returns rc and output text.

    Raises ServiceError if it is still running after ``timeout`` seconds (it then gets stopped).
    """
    env = service_env(model, 0, **settings)
    try:
        return subprocess.run([sys.executable, "-m", SERVICE_MODULE], cwd=repo_root(), env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ServiceError(f"the service kept running for {timeout:.0f} s instead of failing at start-up") from None


def heavy_classifier(path: str | Path, hidden: int = 2048, layers: int = 8, seed: int = 0) -> Path:
    """Write a stand-in for a bigger model: digits-shaped input [batch, 1, 8, 8] -> 10 logits through ``layers`` MatMul+Relu.

    The weights are random (seeded) and shared by the hidden layers, so the file stays small while
    one inference costs ``layers * hidden**2`` multiply-adds: milliseconds, like a real model. Its
    predictions mean nothing; notebook 08 uses it to measure a server whose time goes to inference.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if not 1 <= layers <= 64 or not 8 <= hidden <= 4096:
        raise ValueError(f"layers must be 1..64 and hidden 8..4096, got layers={layers}, hidden={hidden}")
    rng = np.random.default_rng(seed)
    weights = {
        "w_in": rng.normal(0, 1 / 8, (64, hidden)),
        "w_hidden": rng.normal(0, 1 / np.sqrt(hidden), (hidden, hidden)) * np.sqrt(2),
        "w_out": rng.normal(0, 1 / np.sqrt(hidden), (hidden, 10)),
        "flat_shape": np.array([-1, 64]),
    }
    initializers = [numpy_helper.from_array(v.astype(np.int64 if k == "flat_shape" else np.float32), k) for k, v in weights.items()]
    nodes = [helper.make_node("Reshape", ["image", "flat_shape"], ["x0"]), helper.make_node("MatMul", ["x0", "w_in"], ["h0"])]
    for i in range(layers):
        nodes += [helper.make_node("Relu", [f"h{i}"], [f"r{i}"]), helper.make_node("MatMul", [f"r{i}", "w_hidden"], [f"h{i + 1}"])]
    nodes.append(helper.make_node("MatMul", [f"h{layers}", "w_out"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "heavy_classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10, producer_name="labsupport.serve")
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def payload(images: np.ndarray) -> dict[str, Any]:
    """The JSON body /predict takes for a batch of images (or one image): ``{"inputs": nested lists}``."""
    return {"inputs": np.asarray(images).tolist()}


@dataclass
class LoadResult:
    """One load-test run: counts, wall time, throughput (requests/s) and latency percentiles in milliseconds."""

    concurrency: int
    requests: int
    ok: int
    errors: int
    wrong: int
    seconds: float
    throughput: float
    p50_ms: float
    p99_ms: float
    statuses: dict[int, int]
    first_error: str = ""
    probe_p50_ms: float | None = None
    probe_p99_ms: float | None = None

    def row(self, **extra: object) -> dict[str, object]:
        """A flat dict for a table: extra columns first, then the measured figures."""
        data = {**extra, "concurrency": self.concurrency, "requests": self.requests, "errors": self.errors, "wrong": self.wrong,
                "throughput_rps": round(self.throughput, 1), "p50_ms": round(self.p50_ms, 2), "p99_ms": round(self.p99_ms, 2)}
        if self.probe_p50_ms is not None:
            data.update(health_p50_ms=round(self.probe_p50_ms, 2), health_p99_ms=round(self.probe_p99_ms or 0.0, 2))
        return data


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q)) if values else float("nan")


class _Connection:
    """One keep-alive HTTP/1.1 connection to the service: just enough protocol for its Content-Length answers.

    The load generator is not a general HTTP client: it talks to ``deploy/service`` on loopback,
    where every answer has a Content-Length. Any failure closes the connection; the next request
    opens a new one.
    """

    def __init__(self, url: ParseResult):
        self.url = url
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """Send one request and read its answer: (status, body)."""
        if self._streams is None:
            try:
                self._streams = await asyncio.open_connection(self.url.hostname, self.url.port or 80)
            except OSError as error:
                raise _RequestFailed("ConnectError", error) from None
        reader, writer = self._streams
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.url.netloc}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        try:
            writer.write(head.encode("ascii") + body)
            status_line, *header_lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines if line)}
            status, content = int(status_line.split()[1]), await reader.readexactly(int(headers["content-length"]))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, KeyError, ValueError, IndexError) as error:
            self.close()
            raise _RequestFailed("ReadError", error) from None
        except asyncio.CancelledError:  # a per-request timeout: the answer may still come, so the connection is unusable
            self.close()
            raise
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, content

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


class _RequestFailed(Exception):
    """A request that got no HTTP answer (status 0): connection refused, reset or a malformed answer."""

    def __init__(self, kind: str, error: BaseException):
        super().__init__(f"{kind}: {type(error).__name__}: {error}")


def _run_in_own_loop(coroutine: Any) -> Any:
    """Run ``coroutine`` on a fresh event loop in a helper thread (Jupyter's own loop is already running)."""
    with ThreadPoolExecutor(1, thread_name_prefix="load-test") as pool:
        return pool.submit(asyncio.run, coroutine).result()


def load_test(
    url: str,
    bodies: Sequence[dict[str, Any]],
    *,
    concurrency: int,
    requests: int,
    expected: Sequence[Sequence[int]] | None = None,
    timeout: float = 60.0,
    probe: str | None = None,
) -> LoadResult:
    """POST ``requests`` bodies (cycling through ``bodies``) to ``url``/predict from ``concurrency`` clients.

    Each client is one keep-alive connection on one asyncio event loop: the load generator costs
    little CPU, so at 32 clients it measures the service, not itself (a thread per client would
    fight over the GIL). ``expected[i]`` are the predictions body ``i`` must get (mismatches count
    as ``wrong``). ``probe`` (e.g. "/health") is polled every 10 ms meanwhile and its latency
    reported: it shows whether the event loop stays responsive. Bounded: at most 50,000 requests,
    concurrency 64 and ``timeout`` seconds (unsent requests are then not counted).
    """
    _check_loopback(url)
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be between 1 and {MAX_CONCURRENCY}, got {concurrency}")
    if not 1 <= requests <= MAX_REQUESTS:
        raise ValueError(f"requests must be between 1 and {MAX_REQUESTS}, got {requests}")
    if not bodies:
        raise ValueError("bodies must hold at least one request body")
    if expected is not None and len(expected) != len(bodies):
        raise ValueError(f"expected must have one entry per body: {len(expected)} != {len(bodies)}")
    encoded = [json.dumps(body).encode() for body in bodies]
    return _run_in_own_loop(_load(urlparse(url), encoded, concurrency, requests, expected, min(timeout, MAX_SECONDS), probe))


async def _load(
    url: ParseResult, encoded: list[bytes], concurrency: int, requests: int, expected: Sequence[Sequence[int]] | None, timeout: float, probe: str | None
) -> LoadResult:
    counter = iter(range(requests))
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    failures: list[tuple[int, str]] = []  # (status, reason) of every bad answer
    deadline = time.monotonic() + timeout

    async def client() -> None:
        connection = _Connection(url)
        try:
            for i in counter:
                if time.monotonic() >= deadline:
                    return
                body = i % len(encoded)
                start = time.perf_counter()
                try:
                    status, content = await asyncio.wait_for(connection.request("POST", "/predict", encoded[body]), 30.0)
                    reason = "" if status == 200 else f"HTTP {status}: {content[:200].decode(errors='replace')}"
                except (_RequestFailed, TimeoutError) as error:
                    status, content, reason = 0, b"", str(error) or "TimeoutError: no answer in 30 s"
                latencies.append(time.perf_counter() - start)
                statuses[status] += 1
                if not reason and expected is not None and json.loads(content)["predictions"] != list(expected[body]):
                    reason = f"wrong predictions for body {body}"
                if reason:
                    failures.append((status, reason))
        finally:
            connection.close()

    probe_latencies: list[float] = []

    async def prober(done: asyncio.Event) -> None:
        connection = _Connection(url)
        try:
            while not done.is_set():
                start = time.perf_counter()
                try:
                    await asyncio.wait_for(connection.request("GET", probe), 30.0)
                    probe_latencies.append(time.perf_counter() - start)
                except (_RequestFailed, TimeoutError):
                    pass
                await asyncio.sleep(0.01)
        finally:
            connection.close()

    done = asyncio.Event()
    probe_task = asyncio.create_task(prober(done)) if probe else None
    began = time.perf_counter()
    clients = [asyncio.create_task(client()) for _ in range(concurrency)]
    _, late = await asyncio.wait(clients, timeout=timeout + 35.0)
    for task in late:
        task.cancel()
    seconds = time.perf_counter() - began
    done.set()
    if probe_task:
        await probe_task
    sent = len(latencies)
    wrong = sum(1 for status, _ in failures if status == 200)
    return LoadResult(
        concurrency=concurrency,
        requests=sent,
        ok=statuses.get(200, 0) - wrong,
        errors=len(failures) - wrong,
        wrong=wrong,
        seconds=seconds,
        throughput=sent / seconds if seconds > 0 else float("nan"),
        p50_ms=_percentile(latencies, 50),
        p99_ms=_percentile(latencies, 99),
        statuses=dict(sorted(statuses.items())),
        first_error=failures[0][1] if failures else "",
        probe_p50_ms=_percentile(probe_latencies, 50) if probe else None,
        probe_p99_ms=_percentile(probe_latencies, 99) if probe else None,
    )


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a Prometheus text exposition: ``{(metric name, ((label, value), ...)): value}``."""
    sample = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
    label = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = sample.match(line.strip())
        if not match:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        labels = tuple(sorted(label.findall(match.group(2) or "")))
        samples[(match.group(1), labels)] = float(match.group(3))
    return samples
