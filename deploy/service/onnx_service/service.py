"""The service's state and the work behind every route: inference slots, overload, shadow runs, readiness.

One ``Service`` lives in ``app.state.service``; the routers reach it through the ``get_service``
dependency. Inference slots are sized for the whole service: ``usable CPUs // (threads x workers)``
per worker process, so all workers together run at most one inference per usable CPU (unless there
are more workers than CPUs: each worker keeps one slot). A shadow run borrows one of those live
slots, never an extra one, and only when a queued request could not use it; it still competes with
live work for memory bandwidth and for the CPU the event loop needs (``make bench`` measures it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

import anyio.to_thread
import numpy as np
from anyio import CapacityLimiter
from fastapi import Depends, Request

from . import routing
from .batching import Batcher, QueueFull
from .config import Settings
from .cpus import CpuBudget
from .metrics import Metrics
from .model import LoadedModel, ModelError, load_served_model

log = logging.getLogger("onnx_service")


def slots_per_worker(usable_cpus: int, threads: int, workers: int) -> int:
    """Inferences one worker may run at once so that all workers together use at most ``usable_cpus`` CPUs."""
    return max(1, usable_cpus // (threads * workers))


class Service:
    """Settings, model contract, metrics, the routing of versions and the limits every request goes through."""

    def __init__(self, settings: Settings, model: LoadedModel, cpus: CpuBudget):
        self.settings, self.cpus = settings, cpus  # the model only through the routing: a switch away from it releases it
        self.contract = model.contract(settings.max_batch)
        self.slots = slots_per_worker(cpus.usable, settings.threads, settings.workers)
        self.inference_slots = CapacityLimiter(self.slots)
        if settings.workers * settings.threads > cpus.usable:
            log.warning(
                "%d workers x %d threads exceed the %d usable CPUs: each worker keeps one inference slot, so the CPUs are oversubscribed",
                settings.workers,
                settings.threads,
                cpus.usable,
            )
        self.shadow_running = 0  # shadow runs holding a live slot (see start_shadow)
        self.warm_up_error: str | None = None
        self.metrics = Metrics(self.contract.max_batch, batch_max_size=settings.batch_max_size if settings.batching else 0)
        self.metrics.model_info = self.served_versions
        self.routing = routing.single(settings.model_name or routing.version_name(model.name), model, self.make_batcher(model))
        self.metrics.queue_depth = self.queued
        self.in_flight = 0  # threadpool mode: requests running or waiting for an inference slot
        self.warm, self.draining = False, False
        self._background: set[asyncio.Task] = set()

    def make_batcher(self, version_model: LoadedModel) -> Batcher | None:
        """A batcher for one version when batching is on (batches never mix versions), else None."""
        if not self.settings.batching:
            return None
        contract = version_model.contract(self.settings.max_batch)
        if version_model.fixed_batch or None in contract.example_shape:
            raise ModelError(
                f"batching merges requests along the batch dimension, so it needs a model whose batch is free and every other "
                f"dimension fixed; {version_model.path.name} takes {version_model.input.describe()['shape']}: start without batching"
            )
        return Batcher(
            version_model.run,
            max_size=self.settings.batch_max_size,
            max_wait=self.settings.batch_max_wait_ms / 1000,
            queue_limit=self.settings.batch_queue_limit,
            limiter=self.inference_slots,
            observe=self.metrics.observe_batch,
        )

    def switch_routing(self, new: routing.Routing) -> None:
        """Serve ``new`` from now on; the batchers only the old routing used close once their queued requests are answered."""
        old, self.routing = self.routing, new  # one assignment: requests in flight finish on the routing they started with
        kept = {id(version.runner) for version in new.versions.values()}
        for version in old.versions.values():
            if version.runner is not None and id(version.runner) not in kept:
                self._keep_until_done(asyncio.get_running_loop().create_task(version.runner.close()))

    def _keep_until_done(self, task: asyncio.Task) -> None:
        self._background.add(task)  # a reference until it finishes (the loop keeps only weak ones)
        task.add_done_callback(self._background.discard)

    def load_version(self, path: str) -> LoadedModel:
        """Load another version of the model with the service's thread setting."""
        return load_served_model(path, threads=self.settings.threads, provider=self.settings.provider)

    def waiting_for_slot(self) -> int:
        """Threadpool mode: requests that wait for an inference slot (the running ones hold one)."""
        return max(0, self.in_flight - (int(self.inference_slots.borrowed_tokens) - self.shadow_running))

    def queued(self) -> int:
        """Requests waiting for an inference slot, in every mode."""
        return self.waiting_for_slot() + sum(v.runner.queued for v in self.routing.versions.values() if v.runner)

    def readiness(self) -> str | None:
        """Why the service should get no traffic now (None: ready)."""
        if self.draining:
            return "draining: the service is shutting down"
        if self.warm_up_error:
            return f"warm-up failed: {self.warm_up_error}"
        if not self.warm:
            return "warming up: the model's first runs have not finished"
        return None

    def served_versions(self) -> list[dict[str, str]]:
        """One label set per version served now (onnx_service_model_info): its aliases ("shadow" too), model, opset, sha256."""
        served = self.routing
        roles: dict[str, list[str]] = {name: [] for name in served.versions}
        for alias, name in served.aliases.items():
            roles[name].append(alias)
        if served.shadow:
            roles[served.shadow].append("shadow")
        return [
            {
                "version": name,
                "alias": ",".join(roles[name]) or "none",
                "name": v.model.name,
                "opset": str(v.model.opset),
                "sha256": v.model.sha256,
            }
            for name, v in served.versions.items()
        ]

    def warm_up_sizes(self, model: LoadedModel) -> tuple[int, ...]:
        """Batch sizes of the warm-up runs: 1 and the largest batch the service will run (a fixed batch: only that).

        The largest is ``max_batch`` even with batching: one request of more than ``batch_max_size`` examples runs alone.
        """
        if model.fixed_batch:
            return (model.fixed_batch,)
        largest = max(self.contract.max_batch, self.settings.batch_max_size if self.settings.batching else 1)
        return tuple(sorted({1, largest}))

    async def warm_up_failure(self, version: routing.Version) -> str | None:
        """Run ``version`` on zeros at every warm-up size; why it failed, or None.

        A version with free non-batch dimensions is the exception: each request chooses those sizes, the
        warm-up's guess (1) proves nothing about them, so a failure is logged as a warning and the version
        serves (a shape the model refuses gets 422 ``model_refused_input``).
        """
        example = [d if d is not None else 1 for d in self.contract.example_shape]
        size = 0
        try:
            for size in self.warm_up_sizes(version.model):
                zeros = np.zeros([size, *example], dtype=self.contract.dtype)
                outputs = await anyio.to_thread.run_sync(version.model.run, zeros, limiter=self.inference_slots)
                if any(len(output) != size for output in outputs):
                    raise ModelError(f"{size} examples gave outputs of {[len(output) for output in outputs]} rows")
        except Exception as error:
            failure = f"{type(error).__name__} on zeros of shape {[size, *example]}: {str(error)[:300]}"
            free = version.model.free_dimensions()
            if not free:
                return failure
            log.warning(
                "warm-up of version %s skipped: its free dimensions (%s) are set by each request, and the guess failed: %s",
                version.name,
                ", ".join(free),
                failure,
            )
        return None

    async def warm_up(self) -> None:
        """Warm up every version (the first runs allocate memory), then mark the service warm.

        A failed run is logged and kept: /ready then answers 503 with the reason instead of "warming up" for ever.
        """
        for version in list(self.routing.versions.values()):
            failure = await self.warm_up_failure(version)
            if failure:
                self.warm_up_error = failure
                log.error("warm-up of version %s failed; /ready stays 503: %s", version.name, failure)
                return
        self.warm = True

    async def warm_up_new_versions(self, new: routing.Routing) -> None:
        """Warm up the versions ``new`` loaded (not those it reuses) as start-up does; RoutingError names the first that fails."""
        served = {id(version.model) for version in self.routing.versions.values()}
        for version in new.versions.values():
            if id(version.model) in served:
                continue
            failure = await self.warm_up_failure(version)
            if failure:
                raise routing.RoutingError(f"version {version.name} failed its warm-up, so nothing changed: {failure}")

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
        """Run the shadow version on a borrowed live slot, or count it skipped.

        It starts only when no live request waits and at least two live slots are free: it takes one and
        leaves one for the next live request, so it never takes a slot a queued request could use. It never
        adds a slot; with one slot per worker it never runs (every shadow example is counted as skipped).
        """
        if self.inference_slots.available_tokens < 2 or self.queued() > 0:
            self.metrics.observe_shadow(shadow.name, None, served, skipped=True)
            return
        borrower = object()
        self.inference_slots.acquire_on_behalf_of_nowait(borrower)  # on the loop: nothing took the slot since the check
        self.shadow_running += 1
        self._keep_until_done(asyncio.get_running_loop().create_task(self._shadow_run(shadow, batch, served, borrower)))

    async def _shadow_run(self, shadow: routing.Version, batch: Any, served: list, borrower: object) -> None:
        try:
            outputs = await anyio.to_thread.run_sync(shadow.model.run, batch)  # the slot is already held
            self.metrics.observe_shadow(shadow.name, shadow.model.postprocess(outputs)["predictions"], served)
        except Exception:
            log.exception("shadow version %s failed", shadow.name)
            self.metrics.observe_shadow(shadow.name, None, served)
        finally:
            self.shadow_running -= 1
            self.inference_slots.release_on_behalf_of(borrower)


async def get_service(request: Request) -> Service:
    """FastAPI dependency: the application's Service (``async``: FastAPI runs a plain ``def`` dependency in a worker thread)."""
    return request.app.state.service


ServiceDep = Annotated["Service", Depends(get_service)]  # what a route declares to get the Service
