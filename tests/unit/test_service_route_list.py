"""The service's routes are written down once: the metrics' path labels come from the app's routes, and the README's
endpoint table and "Code" paragraph are checked against them (no hand-kept list can fall behind a new route)."""

from __future__ import annotations

import re

import pytest

from labsupport.course.paths import repo_root
from labsupport.models.digits_cnn import ensure_digits_cnn
from onnx_service import app as service_app
from onnx_service.config import Settings

README = (repo_root() / "deploy" / "service" / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def app():
    return service_app.create_app(Settings(model=str(ensure_digits_cnn())))


def _labelled_paths(app) -> frozenset[str]:
    middleware = next(entry for entry in app.user_middleware if entry.cls is service_app.MetricsAndErrors)
    return middleware.kwargs["paths"]


def _endpoint_table() -> set[str]:
    table = README.split("## Endpoints", 1)[1].split("\n\n", 2)[1]
    return {path for row in table.splitlines()[2:] for path in re.findall(r"`(/[^`]*)`", row.split(" | ")[1])}


def test_the_metrics_label_every_route_of_the_app(app):
    routes = {route.path for route in app.routes if hasattr(route, "path")}
    api = set(app.openapi()["paths"])
    assert routes | api <= _labelled_paths(app)
    assert {"/predict", "/health", "/ready", "/metrics", "/admin/routing"} <= api


def test_the_readme_endpoint_table_lists_the_apps_routes(app):
    assert _endpoint_table() == _labelled_paths(app) - {service_app.DOCS_ASSETS}, "deploy/service/README.md, 'Endpoints'"


def test_the_readme_code_paragraph_names_each_routers_paths(app):
    code = README.split("## Code", 1)[1]
    for path in app.openapi()["paths"]:
        assert f"`{path}`" in code, f"deploy/service/README.md, 'Code', does not name {path}"
