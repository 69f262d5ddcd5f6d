"""The service's state and the work behind every route: inference slots, overload, shadow runs, readiness.

One ``Service`` lives in ``app.state.service``; the routers reach it through the ``get_service``
dependency. Inference slots are sized for the whole service: ``usable CPUs // (threads x workers)``
per worker process, so all workers together never run more inferences than there are CPUs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import anyio.to_thread
import numpy as np
from anyio import CapacityLimiter
from fastapi import Request

from . import routing
from .batching import Batcher, QueueFull
from .config import Settings
from .cpus import CpuBudget
from .metrics import Metrics
from .model import LoadedModel, load_served_model

log = logging.getLogger("onnx_service")


def slots_per_worker(usable_cpus: int, threads: int, workers: int) -> int:
    """Inferences one worker may run at once so that all workers together use at most ``usable_cpus`` CPUs."""
    return max(1, usable_cpus // (threads * workers))


class Service:
    """Settings, model contract, metrics, the router of versions and the limits every request goes through."""

    def __init__(self, settings: Settings, model: LoadedModel, cpus: CpuBudget, router: routing.Router | None = None):
        self.settings, self.model, self.cpus = settings, model, cpus
        self.contract = model.contract(settings.max_batch)
        self.slots = slots_per_worker(cpus.usable, settings.threads, settings.workers)
        self.inference_slots = CapacityLimiter(self.slots)
        self.shadow_slot = CapacityLimiter(1)  # shadow runs never take a live slot (see start_shadow)
        self.metrics = Metrics(
            self.contract.max_batch,
            {"name": model.name, "opset": str(model.opset), "sha256": model.sha256},
            batch_max_size=settings.batch_max_size if settings.batching else 0,
        )
        self.router = router or routing.single(settings.model_name or model.name, model, self.make_batcher(model))
        self.metrics.queue_depth = self.queued
        self.in_flight = 0  # threadpool mode: requests running or waiting for an inference slot
        self.warm, self.draining = False, False
        self._background: set[asyncio.Task] = set()

    def make_batcher(self, version_model: LoadedModel) -> Batcher | None:
        """A batcher for one version when batching is on (batches never mix versions), else None."""
        if not self.settings.batching:
            return None
        return Batcher(
            version_model.run,
            max_size=self.settings.batch_max_size,
            max_wait=self.settings.batch_max_wait_ms / 1000,
            queue_limit=self.settings.batch_queue_limit,
            limiter=self.inference_slots,
            observe=self.metrics.observe_batch,
        )

    def load_version(self, path: str) -> LoadedModel:
        """Load another version of the model with the service's thread setting."""
        return load_served_model(path, threads=self.settings.threads)

    def waiting_for_slot(self) -> int:
        """Threadpool mode: requests that wait for an inference slot (the running ones hold one)."""
        return max(0, self.in_flight - int(self.inference_slots.borrowed_tokens))

    def queued(self) -> int:
        """Requests waiting for an inference slot, in every mode."""
        return self.waiting_for_slot() + sum(v.runner.queued for v in self.router.versions.values() if v.runner)

    def readiness(self) -> str | None:
        """Why the service should get no traffic now (None: ready)."""
        if self.draining:
            return "draining: the service is shutting down"
        if not self.warm:
            return "warming up: the model's first runs have not finished"
        return None

    async def warm_up(self) -> None:
        """Run each version on zeros (the first runs allocate memory) with a batch of 1 and a large one, then mark the service warm."""
        example = [d if d is not None else 1 for d in self.contract.example_shape]
        sizes = (1, self.settings.batch_max_size if self.settings.batching else min(self.contract.max_batch, 8))
        for version in list(self.router.versions.values()):
            for size in sizes:
                zeros = np.zeros([size, *example], dtype=self.contract.dtype)
                await anyio.to_thread.run_sync(version.model.run, zeros, limiter=self.inference_slots)
        self.warm = True

    def _timed_run(self, version_model: LoadedModel, batch: Any) -> tuple[list[Any], float]:
        start = time.perf_counter()
        outputs = version_model.run(batch)
        return outputs, time.perf_counter() - start

    async def infer(self, version: routing.Version, batch: Any) -> list[Any]:
        """The version's outputs for a validated batch: through its batcher, or one run in a worker thread.

        Raises QueueFull when ``batch_queue_limit`` requests already wait for a slot (answered 503 + Retry-After).
        """
        if version.runner is not None:
            outputs = await version.runner.submit(batch)  # queued, run with other requests' rows, sliced back
            self.metrics.observe_request_size(len(batch))
            return outputs
        if self.settings.handler == "naive":  # blocks the event loop: every other request waits (notebook 08 measures it)
            outputs, seconds = self._timed_run(version.model, batch)
        else:  # a worker thread computes; the loop keeps serving
            if self.waiting_for_slot() >= self.settings.batch_queue_limit:
                raise QueueFull(self.settings.batch_queue_limit)
            self.in_flight += 1
            try:
                outputs, seconds = await anyio.to_thread.run_sync(self._timed_run, version.model, batch, limiter=self.inference_slots)
            finally:
                self.in_flight -= 1
        self.metrics.observe_inference(len(batch), seconds)
        return outputs

    def start_shadow(self, shadow: routing.Version, batch: Any, served: list) -> None:
        """Run the shadow version in the background, or count it skipped when live work would have to wait.

        It starts only when a live inference slot is free, nothing is queued and the shadow's own single
        slot is free; it runs on that slot, so a live request never queues behind a shadow run.
        """
        live_busy = self.inference_slots.available_tokens == 0 or self.queued() > 0
        if live_busy or self.shadow_slot.available_tokens == 0:
            self.metrics.observe_shadow(shadow.name, None, served, skipped=True)
            return
        task = asyncio.get_running_loop().create_task(self._shadow_run(shadow, batch, served))
        self._background.add(task)  # a reference until it finishes (the loop keeps only weak ones)
        task.add_done_callback(self._background.discard)

    async def _shadow_run(self, shadow: routing.Version, batch: Any, served: list) -> None:
        try:
            outputs = await anyio.to_thread.run_sync(shadow.model.run, batch, limiter=self.shadow_slot)
            self.metrics.observe_shadow(shadow.name, shadow.model.postprocess(outputs)["predictions"], served)
        except Exception:
            log.exception("shadow version %s failed", shadow.name)
            self.metrics.observe_shadow(shadow.name, None, served)


def get_service(request: Request) -> Service:
    """FastAPI dependency: the application's Service."""
    return request.app.state.service
