"""The admin API (notebook 13): read and replace the routing of versions; needs ONNX_SERVICE_ADMIN_TOKEN."""

from __future__ import annotations

import hmac
import logging
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse

from . import routing
from .edge import bounded_echo
from .model import ModelError
from .service import Service, ServiceDep
from .validation import RequestError, parse_json, read_body

log = logging.getLogger("onnx_service")
MAX_DETAIL = 500  # characters of a refusal's message (a model's error can quote a long path)


class AdminRefusal(HTTPException):
    """403 when the admin API is off, 401 without the right bearer token (answered as {"error", "detail"})."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(status, detail)
        self.code = code


def require_admin(request: Request, service: ServiceDep) -> Service:
    """Dependency: the Service, once the caller sent ``Authorization: Bearer <ONNX_SERVICE_ADMIN_TOKEN>``."""
    token = service.settings.admin_token
    if not token:
        raise AdminRefusal(403, "admin_disabled", "the admin API is off: start the service with ONNX_SERVICE_ADMIN_TOKEN set")
    sent = request.headers.get("authorization", "")
    if not hmac.compare_digest(sent.encode("utf-8", "replace"), f"Bearer {token}".encode()):
        raise AdminRefusal(401, "unauthorized", "send the header Authorization: Bearer <ONNX_SERVICE_ADMIN_TOKEN>")
    return service


AdminDep = Annotated[Service, Depends(require_admin)]
REFUSALS = {401: {"description": "no or a wrong bearer token"}, 403: {"description": "the admin API is off (no ONNX_SERVICE_ADMIN_TOKEN)"}}
PUT_REFUSALS = {
    400: {"description": "not JSON"},
    413: {"description": "body too large"},
    422: {"description": "a routing document the service cannot serve; the reason in detail"},
}
router = APIRouter(prefix="/admin", responses=REFUSALS)


@router.get("/routing", summary="The versions served, their aliases, the traffic split and the shadow version")
async def get_routing(service: AdminDep) -> dict[str, Any]:
    return service.routing.describe()


@router.put("/routing", summary="Load versions and switch aliases, split or shadow without a restart", responses=PUT_REFUSALS)
async def put_routing(request: Request, service: AdminDep) -> JSONResponse:
    try:
        document = parse_json(await read_body(request, service.settings.max_body_bytes))
        new = await anyio.to_thread.run_sync(
            routing.build, document, service.routing, service.contract, service.load_version, service.make_batcher
        )
        await service.warm_up_new_versions(new)  # as at start-up: a version that cannot run is never switched to
    except RequestError as error:
        return JSONResponse(error.body(), status_code=error.status)
    except (routing.RoutingError, ModelError) as error:
        return JSONResponse({"error": "bad_routing", "detail": bounded_echo(str(error), document)[:MAX_DETAIL]}, status_code=422)
    answer = JSONResponse(new.describe())  # encoded before the switch: a document that cannot be answered changes nothing
    service.switch_routing(new)  # one assignment: requests in flight finish on the routing they started with
    log.info("routing changed: aliases %s, challenger %d%%, shadow %s", dict(new.aliases), new.challenger_percent, new.shadow)
    return answer
