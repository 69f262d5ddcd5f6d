"""Probes: /health (liveness, for the orchestrator), /ready (readiness, for the load balancer) and /metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from . import routing
from .metrics import CONTENT_TYPE
from .service import ServiceDep

router = APIRouter()


@router.get("/health", summary="Liveness: the process answers (a failing probe restarts the container)")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/ready",
    summary="Readiness: warmed up and not draining (503 otherwise: send no traffic); model, limits, CPUs",
    responses={503: {"description": "warming up or draining"}},
)
async def ready(service: ServiceDep) -> JSONResponse:
    settings, routing_now = service.settings, service.routing
    reason = service.readiness()
    body: dict[str, Any] = {
        "ready": reason is None,
        **({"reason": reason} if reason else {}),
        "model": routing_now.versions[routing_now.aliases[routing.CHAMPION]].model.describe(),
        "max_batch": service.contract.max_batch,
        "max_body_bytes": settings.max_body_bytes,
        "body_timeout_seconds": settings.body_timeout_seconds,
        "concurrency_limit": settings.concurrency_limit,
        "handler": settings.handler,
        "cpus": service.cpus.as_dict(),
        "workers": settings.workers,
        "threads": settings.threads,
        "inference_slots": service.slots,
        "inference_slots_total": service.slots * settings.workers,
        "queue_limit": settings.batch_queue_limit,
        "batching": {"max_size": settings.batch_max_size, "max_wait_ms": settings.batch_max_wait_ms} if settings.batching else None,
        "aliases": dict(routing_now.aliases),
    }
    return JSONResponse(body, status_code=200 if reason is None else 503)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def prometheus(service: ServiceDep) -> Response:
    return Response(service.metrics.render(), media_type=CONTENT_TYPE)
