"""Dynamic (micro-)batching: concurrent /predict requests are queued and run through the model as one batch.

One collector task on the event loop takes the first waiting request, waits at most ``max_wait``
seconds for more while another batch is running (or until ``max_size`` examples are waiting), concatenates them, runs them in a
worker thread and hands each caller exactly its own rows. A new batch is formed only when an
inference slot is free, so under load the queue grows and the batches with it: that is where the
throughput comes from. A request that finds the batcher idle (no batch running) runs at once, so
at low load batching costs nothing; requests that arrive while a batch runs wait at most
``max_wait`` for company (notebook 08 measures both). A full queue refuses at once (``QueueFull``):
never a hang. When a merged run fails, each of its requests is run again alone: one request's values
that the model refuses fail that request only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import numpy as np
from anyio import CapacityLimiter

# (examples in the run, its inference seconds, each request's queue wait in seconds)
BatchObserver = Callable[[int, float, list[float]], None]


class QueueFull(Exception):
    """The batcher's queue holds ``limit`` requests already; the caller should retry after ``retry_after`` seconds."""

    def __init__(self, limit: int, retry_after: int = 1):
        super().__init__(f"the service is at capacity ({limit} requests queued); retry in {retry_after} s")
        self.limit, self.retry_after = limit, retry_after


@dataclass(eq=False)  # compared by identity (the queue removes a caller that left)
class _Waiting:
    rows: np.ndarray
    future: asyncio.Future
    arrived: float = field(default_factory=time.perf_counter)


class Batcher:
    """Queue requests, run them in merged batches of at most ``max_size`` examples, return each caller its rows."""

    def __init__(
        self,
        run: Callable[[np.ndarray], list[Any]],
        *,
        max_size: int,
        max_wait: float,
        queue_limit: int,
        limiter: CapacityLimiter,
        observe: BatchObserver | None = None,
    ):
        self.max_size, self.max_wait, self.queue_limit = max_size, max_wait, queue_limit
        self._run, self._limiter, self._observe = run, limiter, observe
        self._waiting: deque[_Waiting] = deque()
        self._waiting_rows = 0
        self._arrived: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None
        self._collector: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()

    @property
    def queued(self) -> int:
        """Requests waiting for a batch (not yet handed to the model)."""
        return len(self._waiting)

    def _start(self) -> None:
        # created on first use: the app is built before uvicorn's event loop exists
        if self._collector is None or self._collector.done():
            self._arrived = asyncio.Event()
            self._slots = asyncio.Semaphore(int(self._limiter.total_tokens))
            self._collector = asyncio.get_running_loop().create_task(self._collect(), name="onnx_service batcher")

    async def submit(self, rows: np.ndarray) -> list[Any]:
        """Queue one validated request (its rows); returns the model's outputs for exactly those rows."""
        self._start()
        if len(self._waiting) >= self.queue_limit:
            raise QueueFull(self.queue_limit)
        item = _Waiting(rows, asyncio.get_running_loop().create_future())
        self._waiting.append(item)
        self._waiting_rows += len(rows)
        self._arrived.set()
        try:
            return await item.future
        except asyncio.CancelledError:  # the caller went away (its client disconnected): it leaves the queue at once
            if item in self._waiting:
                self._waiting.remove(item)
                self._waiting_rows -= len(rows)
            raise

    async def close(self) -> None:
        """Stop the collector task once every queued request was answered (a version the routing no longer uses).

        Without it the pending task is destroyed with its Batcher, and asyncio logs "Task was destroyed but it is pending!".
        """
        while True:
            while self._waiting or self._running:
                await asyncio.sleep(0.01)
            if self._collector is None or self._collector.done():
                return
            self._collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._collector
            if not self._waiting:
                return
            self._start()  # a request queued while the collector was stopping (a routing that still uses us): serve it first

    async def _collect(self) -> None:
        while True:
            await self._slots.acquire()
            batch = await self._next_batch()
            if not batch:
                self._slots.release()
                continue
            task = asyncio.get_running_loop().create_task(self._execute(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _wait_for_arrival(self, timeout: float | None) -> bool:
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def _next_batch(self) -> list[_Waiting]:
        while not self._waiting:
            await self._wait_for_arrival(None)
        # an idle batcher (no batch running) runs what is waiting at once: waiting for company would only add latency
        deadline = self._waiting[0].arrived + (self.max_wait if self._running else 0.0)
        while self._waiting_rows < self.max_size:
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or not await self._wait_for_arrival(remaining):
                break
        batch: list[_Waiting] = []
        rows = 0
        while self._waiting and (not batch or rows + len(self._waiting[0].rows) <= self.max_size):
            item = self._waiting.popleft()
            self._waiting_rows -= len(item.rows)
            if not item.future.done():  # a caller that went away (cancelled) is skipped
                batch.append(item)
                rows += len(item.rows)
        return batch

    def _timed_run(self, rows: np.ndarray) -> tuple[list[Any], float]:
        start = time.perf_counter()
        outputs = self._run(rows)
        return outputs, time.perf_counter() - start

    async def _execute(self, batch: list[_Waiting]) -> None:
        try:
            await self._answer(batch)
        finally:
            self._slots.release()

    async def _answer(self, batch: list[_Waiting]) -> None:
        """Run the batch merged; when that fails, run each request alone so that each gets its own outcome.

        Schema checks cannot catch every value a model refuses (a token id beyond the vocabulary passes
        them): one request's bad values must not fail the other requests merged with it.
        """
        batch = [item for item in batch if not item.future.done()]  # a caller cancelled since the batch was formed is not run
        if not batch:
            return
        dispatched = time.perf_counter()
        rows = batch[0].rows if len(batch) == 1 else np.concatenate([item.rows for item in batch])
        try:
            outputs, seconds = await anyio.to_thread.run_sync(self._timed_run, rows, limiter=self._limiter)
        except Exception as error:
            if len(batch) == 1:
                _settle(batch[0], error=error)
                return
            for item in batch:  # isolate the failure: re-run each request on its own
                if not item.future.done():
                    await self._answer([item])
            return
        offset = 0
        for item in batch:
            count = len(item.rows)
            _settle(item, [np.asarray(output)[offset : offset + count] for output in outputs])
            offset += count
        if self._observe is not None:
            self._observe(len(rows), seconds, [dispatched - item.arrived for item in batch])


def _settle(item: _Waiting, outputs: list[Any] | None = None, error: Exception | None = None) -> None:
    """Hand one caller its outputs or its error, unless it went away (cancelled) meanwhile."""
    if item.future.done():
        return
    if error is not None:
        item.future.set_exception(error)
    else:
        item.future.set_result(outputs)
