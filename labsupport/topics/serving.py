"""Start the course's inference service (the ``onnx_service`` package of ``deploy/service``) as a real process, and load-test it.

Introduced in notebook 08. ``start(model)`` runs ``python -m onnx_service`` on loopback port 0: the
service binds a free port itself and prints ``onnx_service: listening on http://127.0.0.1:PORT``,
which ``start`` reads from its log (with a deadline), then it waits for ``/ready``. The returned
``Service`` is a context manager whose ``stop()`` shuts it down with SIGTERM (graceful) and
returns the exit status. ``load_test`` sends a bounded number of requests at a fixed concurrency
(asyncio clients, one keep-alive connection each) and reports throughput and p50/p99 latency.
Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import ParseResult, urlparse

import numpy as np

from onnx_service import LISTENING, PARENT_PID

SERVICE_MODULE = "onnx_service"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MAX_REQUESTS = 50_000
MAX_CONCURRENCY = 64
MAX_SECONDS = 300.0
REQUEST_TIMEOUT = 30.0  # seconds one request of a load test may take before it counts as failed


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


def _pin(process: subprocess.Popen, cpus: set[int] | None) -> None:
    """Pin the started service to ``cpus`` from this process (no code runs in the child between fork and exec).

    The service creates its threads later, at model load, and they inherit the mask.
    """
    if cpus:
        try:
            os.sched_setaffinity(process.pid, cpus)
        except OSError:
            process.kill()
            raise


class ServiceError(RuntimeError):
    """The service did not start (its log tail is in the message) or did not stop in time."""


def service_env(model: str | Path, port: int = 0, **settings: object) -> dict[str, str]:
    """The environment for the service process: ``ONNX_SERVICE_*`` from ``model``, ``port`` (0: any free one) and settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ONNX_SERVICE_")}
    env.update({"ONNX_SERVICE_MODEL": str(Path(model).resolve()), "ONNX_SERVICE_PORT": str(port), "ONNX_SERVICE_HOST": "127.0.0.1"})
    for key, value in settings.items():
        if value is not None:
            env["ONNX_SERVICE_" + key.upper()] = str(int(value) if isinstance(value, bool) else value)
    env["PYTHONUNBUFFERED"] = "1"
    env[PARENT_PID] = str(os.getpid())  # the service exits when this process dies (a crashed or killed kernel)
    return env


@dataclass
class Service:
    """A running service process: ``url``, ``port``, ``log_text()``, ``stop()``; use it in a ``with`` block."""

    process: subprocess.Popen
    url: str
    port: int
    log_path: Path

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


def require_loopback(url: str) -> None:
    """Refuse any URL whose host is not this machine (the course only calls its own services)."""
    host = urlparse(url).hostname
    if host not in LOOPBACK:
        raise ValueError(f"the course only calls services on this machine (127.0.0.1); got host {host!r}")


def _bound_port(log_text: str) -> int | None:
    """The port the service bound, from its ``onnx_service: listening on http://127.0.0.1:PORT`` line."""
    match = re.search(re.escape(LISTENING) + r"http://127\.0\.0\.1:(\d+)", log_text)
    return int(match.group(1)) if match else None


def _launch(env: dict[str, str], cpus: set[int] | None, launcher: Sequence[str] = ()) -> tuple[subprocess.Popen, Path]:
    """Start ``python -m onnx_service`` with ``env``, its output going to a fresh log file; returns the process and the log."""
    handle, log_name = tempfile.mkstemp(prefix="onnx-service-", suffix=".log")
    log_path = Path(log_name)
    _LOGS.append(log_path)
    with os.fdopen(handle, "wb") as log:
        process = subprocess.Popen(
            [*launcher, sys.executable, "-m", SERVICE_MODULE],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the notebook does not reach it; stop() does
        )
    _RUNNING.add(process)
    _pin(process, cpus)
    return process, log_path


def _wait_until_ready(service: Service, timeout: float) -> bool:
    """Read the port from the service's log, then poll GET /ready until 200; False after ``timeout`` seconds."""
    import httpx

    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if service.process.poll() is not None:
                raise ServiceError(
                    f"the service exited with status {service.process.returncode} before it was ready:\n{service.log_text()[-2000:]}"
                )
            port = service.port or _bound_port(service.log_text())
            if port:
                service.port, service.url = port, f"http://127.0.0.1:{port}"
                try:
                    if client.get(service.url + "/ready").status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
    return False


def start(
    model: str | Path,
    *,
    workers: int = 1,
    handler: str = "threadpool",
    ready_timeout: float = 90.0,
    cpus: set[int] | None = None,
    launcher: Sequence[str] = (),
    **settings: object,
) -> Service:
    """Start ``python -m onnx_service`` for ``model`` on 127.0.0.1, port 0, and wait until GET /ready answers 200.

    The service binds a free port itself; ``Service.port`` is the one it reports. ``settings`` are
    service settings in lower case (``threads``, ``max_batch``, ``batching``, ``model_sha256``...);
    ``cpus`` pins the process to those CPUs (Linux affinity, like ``taskset``); ``launcher`` goes before the
    Python command (e.g. ``["qemu-x86_64", "-cpu", "Haswell-v4"]``: another CPU). Raises ServiceError
    with the service's own message if it exits or never gets ready.
    """
    if workers < 1 or workers > 8:
        raise ValueError(f"workers must be between 1 and 8 on a laptop, got {workers}")
    if cpus is not None and not hasattr(os, "sched_setaffinity"):
        raise ValueError("cpus= needs CPU affinity masks, which only Linux has")
    process, log_path = _launch(service_env(model, 0, workers=workers, handler=handler, **settings), cpus, launcher)
    service = Service(process, "", 0, log_path)
    if _wait_until_ready(service, ready_timeout):
        return service
    service.stop()
    raise ServiceError(f"the service was not ready after {ready_timeout:.0f} s:\n{service.log_text()[-2000:]}")


def run_to_exit(model: str | Path, timeout: float = 60.0, **settings: object) -> subprocess.CompletedProcess:
    """Run the service command expecting it to exit on its own (a start-up failure); returns rc and output text.

    Raises ServiceError if it is still running after ``timeout`` seconds (it then gets stopped).
    """
    env = service_env(model, int(settings.pop("port", 0)), **settings)
    try:
        return subprocess.run([sys.executable, "-m", SERVICE_MODULE], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ServiceError(f"the service kept running for {timeout:.0f} s instead of failing at start-up") from None


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
    probe_count: int = 0  # probe requests answered or timed out (a timed-out one counts with the time waited)
    latencies_s: tuple[float, ...] = field(default=(), repr=False)  # every request's seconds (to pool several runs)

    def row(self, **extra: object) -> dict[str, object]:
        """A flat dict for a table: extra columns first, then the measured figures."""
        data = {
            **extra,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "errors": self.errors,
            "wrong": self.wrong,
            "throughput_rps": round(self.throughput, 1),
            "p50_ms": round(self.p50_ms, 2),
            "p99_ms": round(self.p99_ms, 2),
        }
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
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {self.url.netloc}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
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


def _check_load(url: str, bodies: Sequence[dict[str, Any]], concurrency: int, requests: int, expected: Sequence[Any] | None) -> None:
    require_loopback(url)
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be between 1 and {MAX_CONCURRENCY}, got {concurrency}")
    if not 1 <= requests <= MAX_REQUESTS:
        raise ValueError(f"requests must be between 1 and {MAX_REQUESTS}, got {requests}")
    if not bodies:
        raise ValueError("bodies must hold at least one request body")
    if expected is not None and len(expected) != len(bodies):
        raise ValueError(f"expected must have one entry per body: {len(expected)} != {len(bodies)}")


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
    concurrency 64 and ``timeout`` seconds (unsent requests are then not counted). Notebook 08.
    """
    _check_load(url, bodies, concurrency, requests, expected)
    plan = _Plan(urlparse(url), [json.dumps(body).encode() for body in bodies], expected, min(timeout, MAX_SECONDS))
    return _run_in_own_loop(_load(plan, concurrency, requests, probe))


@dataclass(frozen=True)
class _Plan:
    """What every client of one load test sends, and what it checks."""

    url: ParseResult
    bodies: list[bytes]
    expected: Sequence[Sequence[int]] | None
    seconds: float


@dataclass
class _Tally:
    """What the clients of one load test saw: latencies, statuses, the reason of every bad answer, probe latencies."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[tuple[int, str]] = field(default_factory=list)
    probes: list[float] = field(default_factory=list)

    def record(self, status: int, seconds: float, reason: str) -> None:
        self.latencies.append(seconds)
        self.statuses[status] += 1
        if reason:
            self.failures.append((status, reason))

    def result(self, concurrency: int, seconds: float, probed: bool) -> LoadResult:
        sent = len(self.latencies)
        wrong = sum(1 for status, _ in self.failures if status == 200)
        return LoadResult(
            concurrency=concurrency,
            requests=sent,
            ok=self.statuses.get(200, 0) - wrong,
            errors=len(self.failures) - wrong,
            wrong=wrong,
            seconds=seconds,
            throughput=sent / seconds if seconds > 0 else float("nan"),
            p50_ms=_percentile(self.latencies, 50),
            p99_ms=_percentile(self.latencies, 99),
            statuses=dict(sorted(self.statuses.items())),
            first_error=self.failures[0][1] if self.failures else "",
            probe_p50_ms=_percentile(self.probes, 50) if probed else None,
            probe_p99_ms=_percentile(self.probes, 99) if probed else None,
            probe_count=len(self.probes),
            latencies_s=tuple(self.latencies),
        )


async def _post(connection: _Connection, plan: _Plan, body: int) -> tuple[int, str]:
    """One POST /predict of body number ``body``: its status and why the answer is bad ("" when it is right)."""
    try:
        status, content = await asyncio.wait_for(connection.request("POST", "/predict", plan.bodies[body]), REQUEST_TIMEOUT)
    except (_RequestFailed, TimeoutError) as error:
        return 0, str(error) or f"TimeoutError: no answer in {REQUEST_TIMEOUT:g} s"
    if status != 200:
        return status, f"HTTP {status}: {content[:200].decode(errors='replace')}"
    if plan.expected is not None and json.loads(content)["predictions"] != list(plan.expected[body]):
        return status, f"wrong predictions for body {body}"
    return status, ""


async def _client(plan: _Plan, numbers: Iterator[int], deadline: float, tally: _Tally) -> None:
    """One keep-alive connection sending the next request number until none is left or the deadline passed."""
    connection = _Connection(plan.url)
    try:
        for number in numbers:
            if time.monotonic() >= deadline:
                return
            started = time.perf_counter()
            status, reason = await _post(connection, plan, number % len(plan.bodies))
            tally.record(status, time.perf_counter() - started, reason)
    finally:
        connection.close()


async def _probe(url: ParseResult, path: str, done: asyncio.Event, tally: _Tally) -> None:
    """GET ``path`` every 10 ms until ``done``, recording the latency of each answer."""
    connection = _Connection(url)
    try:
        while not done.is_set():
            started = time.perf_counter()
            try:
                await asyncio.wait_for(connection.request("GET", path), REQUEST_TIMEOUT)
                tally.probes.append(time.perf_counter() - started)
            except TimeoutError:  # kept at the time waited (a lower bound): dropping it would bias p99 low when the loop blocks longest
                tally.probes.append(time.perf_counter() - started)
            except _RequestFailed:
                pass
            await asyncio.sleep(0.01)
    finally:
        connection.close()


async def _load(plan: _Plan, concurrency: int, requests: int, probe: str | None) -> LoadResult:
    tally, numbers, done = _Tally(), iter(range(requests)), asyncio.Event()
    prober = asyncio.create_task(_probe(plan.url, probe, done, tally)) if probe else None
    began = time.perf_counter()
    deadline = time.monotonic() + plan.seconds
    clients = [asyncio.create_task(_client(plan, numbers, deadline, tally)) for _ in range(concurrency)]
    _, late = await asyncio.wait(clients, timeout=plan.seconds + REQUEST_TIMEOUT + 5.0)
    for task in late:
        task.cancel()
    seconds = time.perf_counter() - began
    done.set()
    if prober:
        await prober
    return tally.result(concurrency, seconds, probed=probe is not None)


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a Prometheus text exposition: ``{(metric name, ((label, value), ...)): value}``."""
    sample = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
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
