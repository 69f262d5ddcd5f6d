"""onnx_service.validation: a request body read into the model's batch, and every bad body answered with a 4xx that says
what was expected (in-process, on the digits CNN; tests/integration/test_service.py sends a few over HTTP)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from labsupport.models.digits_cnn import ensure_digits_cnn
from onnx_service import model as svc_model
from onnx_service import validation as svc_validation
from onnx_service.app import create_app
from onnx_service.config import Settings

MAX_BATCH = 64
MAX_BODY = 200_000


@pytest.fixture
def http(in_process):
    return in_process(create_app(Settings(model=str(ensure_digits_cnn()), max_batch=MAX_BATCH, max_body_bytes=MAX_BODY)))


GOOD = np.zeros((1, 8, 8)).tolist()
BAD_REQUESTS = [
    # (case, request kwargs, status, error code, regex the message must contain)
    ("wrong shape", {"json": {"inputs": [[0.0] * 64]}}, 422, "wrong_shape", r"shape \[1, 64\].*expected.*\[1, 8, 8\]"),
    ("wrong inner shape", {"json": {"inputs": [np.zeros((1, 8, 7)).tolist()]}}, 422, "wrong_shape", r"\[1, 8, 7\].*expected \[1, 8, 8\]"),
    ("ragged rows", {"json": {"inputs": [[[0.0] * 8] * 7 + [[0.0] * 3]]}}, 422, "wrong_shape", r"different lengths"),
    ("text values", {"json": {"inputs": [[["a"] * 8] * 8]}}, 422, "wrong_type", r"contains text.*numbers"),
    ("null values", {"json": {"inputs": [[[None] * 8] * 8]}}, 422, "wrong_type", r"null.*numbers"),
    ("booleans", {"json": {"inputs": [[[True] * 8] * 8]}}, 422, "wrong_type", r"true/false"),
    (
        "a boolean among numbers",
        {"json": {"inputs": [[[0.5] * 8] * 7 + [[0.5] * 3 + [False] + [0.5] * 4]]}},
        422,
        "wrong_type",
        r"inputs\[0\]\[7\]\[3\] is true/false; expected numbers \(float32\)",
    ),
    (
        "NaN",
        {"content": b'{"inputs": [[[NaN, 0, 0, 0, 0, 0, 0, 0]' + b", [0, 0, 0, 0, 0, 0, 0, 0]" * 7 + b"]]}"},
        422,
        "not_finite",
        r"NaN.*finite",
    ),
    ("Infinity", {"content": json.dumps({"inputs": GOOD}).replace("0.0", "Infinity", 1).encode()}, 422, "not_finite", r"Infinity.*finite"),
    (
        "float32 overflow",
        {"json": {"inputs": [[[1e300] + [0.0] * 7] + [[0.0] * 8] * 7]}},
        422,
        "not_finite",
        r"inputs\[0\]\[0\]\[0\] is not a finite float32",
    ),
    ("empty batch", {"json": {"inputs": []}}, 422, "empty_batch", r"empty.*at least one example"),
    (
        "batch too large",
        {"json": {"inputs": [GOOD] * (MAX_BATCH + 1)}},
        422,
        "batch_too_large",
        rf"{MAX_BATCH + 1} examples exceeds the maximum of {MAX_BATCH}",
    ),
    ("missing field", {"json": {"images": [GOOD]}}, 422, "missing_field", r"missing field 'inputs'.*'images'"),
    ("not an object", {"json": [GOOD]}, 422, "wrong_type", r"expected a JSON object"),
    (
        "non-JSON body",
        {"content": b"inputs=1,2,3", "headers": {"content-type": "application/json"}},
        400,
        "invalid_json",
        r"not valid JSON",
    ),
    ("empty body", {"content": b"", "headers": {"content-type": "application/json"}}, 400, "invalid_json", r"body is empty"),
    (
        "oversized body",
        {"content": b"[" + b"0," * MAX_BODY + b"0]", "headers": {"content-type": "application/json"}},
        413,
        "body_too_large",
        rf"maximum is {MAX_BODY} bytes",
    ),
    (
        "wrong content type",
        {"content": b"{}", "headers": {"content-type": "text/plain"}},
        415,
        "unsupported_media_type",
        r"application/json.*text/plain",
    ),
]


@pytest.mark.parametrize(("case", "request_kwargs", "status", "code", "message"), BAD_REQUESTS, ids=[row[0] for row in BAD_REQUESTS])
def test_bad_input_gets_a_4xx_that_says_what_was_expected(http, case, request_kwargs, status, code, message):
    kwargs = dict(request_kwargs)
    if "content" in kwargs:
        kwargs.setdefault("headers", {"content-type": "application/json"})
    response = http.post("/predict", **kwargs)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code
    assert re.search(message, body["detail"]), body["detail"]


def test_validation_returns_the_models_dtype_and_flags_single_examples():
    contract = svc_model.InputContract("image", np.dtype(np.float32), (1, 8, 8), 4)
    batch, single = svc_validation.to_batch({"inputs": GOOD}, contract)
    assert single and batch.shape == (1, 1, 8, 8) and batch.dtype == np.float32
    batch, single = svc_validation.to_batch({"inputs": [GOOD, GOOD]}, contract)
    assert not single and batch.shape == (2, 1, 8, 8)
    integer = svc_model.InputContract("ids", np.dtype(np.int64), (None,), 4)
    assert svc_validation.to_batch({"inputs": [[1, 2, 3]]}, integer)[0].dtype == np.int64
    with pytest.raises(svc_validation.RequestError, match="decimal point, an exponent or more than 18 digits"):
        svc_validation.to_batch({"inputs": [[1.5]]}, integer)
    with pytest.raises(svc_validation.RequestError, match=r"inputs\[0\]\[1\] is true/false; expected integers \(int64\)"):
        svc_validation.to_batch({"inputs": [[1, True, 3]]}, integer)  # NumPy alone would read True as 1
    nineteen_digits = svc_validation.parse_json(b'{"inputs": [[1000000000000000000]]}')  # inside int64, read as a float
    with pytest.raises(svc_validation.RequestError, match="more than 18 digits") as refused:
        svc_validation.to_batch(nineteen_digits, integer)
    assert "fractional" not in refused.value.message  # the value is a whole number: the reason must not say otherwise
    with pytest.raises(svc_validation.RequestError, match="dimension 0 should be at least 1"):
        svc_validation.to_batch({"inputs": [[]]}, integer)
