"""Schemathesis against the service's own OpenAPI schema (/openapi.json), in-process: every operation gets
generated requests, valid and invalid; none may get a 5xx or an answer the schema does not describe
(an undocumented status, content type, header or body). Bounded: few examples, derandomized (the same
cases on every run), well under 30 s.

Not checked: schemathesis's ``positive_data_acceptance`` (a body the schema allows is answered 2xx). The
schema gives the shape and JSON type of the inputs, but not what the model's arithmetic refuses: inputs
whose outputs overflow get 422 ``non_finite_output`` though every value is a valid number.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from labsupport.models.digits_cnn import ensure_digits_cnn
from onnx_service.app import create_app
from onnx_service.config import Settings

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance, response_schema_conformance]
TOKEN = "schemathesis-token"  # the admin routes are called with it: their answers, not only their 401s, are checked


def _app():
    app = create_app(Settings(model=str(ensure_digits_cnn()), max_batch=4, admin_token=TOKEN))
    app.state.service.warm = True  # in-process without the lifespan: the warm-up task does not run
    return app


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(max_examples=15, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_5xx_or_an_answer_the_schema_does_not_describe(case):
    case.call_and_validate(checks=CHECKS, headers={"Authorization": f"Bearer {TOKEN}"})
