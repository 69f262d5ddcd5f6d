"""Load-test the course's inference service, and read its metrics (notebooks 08 and 13, ``python -m labsupport.bench service``).

``load_test`` sends a bounded number of requests at a fixed concurrency (asyncio clients, one
keep-alive connection each) and reports throughput and p50/p99 latency; ``parse_metrics`` reads
the Prometheus text of ``/metrics``. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import ParseResult, urlparse

import numpy as np

from labsupport.topics.serving import require_loopback

MAX_REQUESTS = 50_000
MAX_CONCURRENCY = 64
MAX_SECONDS = 300.0
REQUEST_TIMEOUT = 30.0  # seconds one request of a load test may take before it counts as failed


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
