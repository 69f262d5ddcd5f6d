"""No input gets a 5xx: generated request bodies and headers, then a corpus of hostile inputs, against /predict and /admin/routing.

The service runs in-process (the ``in_process_shared`` client of tests/conftest.py, lifespan included). Every answer must be a 2xx or a
4xx whose JSON ``detail`` is readable text of bounded length: what the client sent is echoed only as a
short excerpt. Hypothesis runs a fixed number of examples from a fixed seed (``derandomize``): the same
inputs on every machine, a bounded run time in ``make test``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from labsupport.models.digits_cnn import ensure_digits_cnn
from onnx_service.app import create_app
from onnx_service.config import Settings

MAX_DETAIL = 600  # characters: the longest message the service writes, with its bounded excerpts
EXAMPLES = 300


@pytest.fixture(scope="module")
def client(in_process_shared):
    http = in_process_shared(create_app(Settings(model=str(ensure_digits_cnn()), max_body_bytes=65_536, admin_token="secret")))
    assert in_process_shared.after_warm_up(http).status_code == 200
    return http


def reshape_classifier(path: Path) -> Path:
    """A valid classifier image [batch, 1, h, w] -> Reshape [-1, 64] -> MatMul -> [batch, 10]: free h and w, but only h*w = 64 runs."""
    weight = numpy_helper.from_array(np.random.default_rng(0).normal(size=(64, 10)).astype(np.float32), "weight")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["image", "shape"], ["flat"]), helper.make_node("MatMul", ["flat", "weight"], ["logits"])],
        "free_sizes",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, "h", "w"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(np.array([-1, 64], np.int64), "shape"), weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.fixture(scope="module")
def free_sizes_client(tmp_path_factory, in_process_shared):
    model = reshape_classifier(tmp_path_factory.mktemp("free") / "free_sizes.onnx")
    http = in_process_shared(create_app(Settings(model=str(model), max_body_bytes=65_536)))
    assert in_process_shared.after_warm_up(http).status_code == 200  # warm-up's 1x1 guess fails; the service serves anyway
    return http


def latin1(headers: dict[str, str]) -> dict[str, bytes]:
    """Header values as the bytes a client puts on the wire (HTTP headers are latin-1)."""
    return {name: value.encode("latin-1") for name, value in headers.items()}


def _refuse_constant(token: str) -> None:
    raise ValueError(f"{token} is not JSON")


def assert_client_error_or_success(response) -> None:
    """2xx with a strict JSON body (no NaN or Infinity), or a 4xx with a JSON {"error", "detail"} whose detail is printable and bounded."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code < 300 and response.headers.get("content-type", "").startswith("application/json"):
        json.loads(response.text, parse_constant=_refuse_constant)  # what JSON.parse or serde_json would accept
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body.get("error"), str) and isinstance(body.get("detail"), str), body
        assert body["detail"].isprintable() and 0 < len(body["detail"]) <= MAX_DETAIL, body["detail"][:MAX_DETAIL]


numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, 255, 2**63, -(2**63) - 1, 1e38, 3.5e38, -1e309 / 1e300]),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20)),
    lambda children: st.one_of(st.lists(children, max_size=9), st.dictionaries(st.text(max_size=12), children, max_size=4)),
    max_leaves=80,
)


def nested_lists(depth: int):
    """Lists of numbers nested ``depth`` deep, of random (often wrong) lengths: near-miss tensors."""
    leaf = st.lists(numbers, min_size=0, max_size=9)
    for _ in range(depth - 1):
        leaf = st.lists(leaf, min_size=0, max_size=3 if depth > 3 else 9)
    return leaf


def _zeros_image(side: int):
    """Bodies with one example of zeros of size side x side (or a 2-example batch): every size the free signature allows."""
    return st.sampled_from([np.zeros((1, side, side)), np.zeros((2, 1, side, 64 // side if 64 % side == 0 else side))]).map(
        lambda image: json.dumps({"inputs": image.tolist()}).encode()
    )


inputs_bodies = st.builds(
    lambda value, extra: json.dumps({"inputs": value, **extra}).encode(),
    st.one_of(json_values, st.integers(1, 5).flatmap(nested_lists)),
    st.dictionaries(st.text(max_size=30), json_values, max_size=2),
)
bodies = st.one_of(inputs_bodies, json_values.map(lambda value: json.dumps(value).encode()), st.binary(max_size=300))
content_types = st.one_of(
    st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", "", "application/problem+json", "JSON"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=200),
)
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=100)


@settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies, content_type=content_types, request_key=header_values, authorization=header_values)
def test_generated_requests_never_get_a_5xx(client, body, content_type, request_key, authorization):
    headers = {"content-type": content_type, "x-request-key": request_key, "authorization": authorization}
    assert_client_error_or_success(client.post("/predict", content=body, headers=latin1(headers)))


@settings(max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(inputs_bodies, st.integers(1, 12).flatmap(_zeros_image)))
def test_generated_requests_to_a_model_with_free_sizes_never_get_a_5xx(free_sizes_client, body):
    assert_client_error_or_success(free_sizes_client.post("/predict", content=body, headers={"content-type": "application/json"}))


@pytest.mark.parametrize(("side", "status"), [(8, 200), (4, 422), (1, 422), (16, 422)])
def test_a_size_the_free_signature_allows_but_the_model_refuses_gets_a_422_that_says_why(free_sizes_client, side, status):
    response = free_sizes_client.post("/predict", json={"inputs": np.zeros((1, side, side)).tolist()})
    assert response.status_code == status, response.text[:300]
    if status == 422:
        assert response.json()["error"] == "model_refused_input" and f"shape [1, 1, {side}, {side}]" in response.json()["detail"]
    if side == 16:  # ORT runs it, but a Reshape [-1, 64] of 256 values gives 4 rows for 1 example: never 4 predictions
        assert "answered [4] rows for the 1 example(s)" in response.json()["detail"]


MODEL_PATH = str(ensure_digits_cnn())
names = st.one_of(st.sampled_from(["1", "2", "v🚀", "\ud800", "é", "a" * 65, "", "champion"]), st.text(max_size=8))
paths = st.one_of(st.sampled_from([MODEL_PATH, "/nonexistent/" + "y" * 5000, "\ud800.onnx", "", "/", "\x00"]), st.text(max_size=20))
alias_values = st.one_of(names, st.lists(names, max_size=2), st.dictionaries(names, names, max_size=2), json_values)
routing_documents = st.fixed_dictionaries(
    {
        "versions": st.one_of(st.dictionaries(names, paths, min_size=1, max_size=3), json_values),
        "aliases": st.one_of(
            st.fixed_dictionaries({"champion": alias_values}, optional={"challenger": alias_values, "x" * 5000: alias_values}),
            json_values,
        ),
    },
    optional={"challenger_percent": st.one_of(st.integers(-5, 105), json_values), "shadow": alias_values},
).map(lambda document: json.dumps(document).encode())


@settings(max_examples=80, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(routing_documents, bodies), authorization=header_values)
def test_generated_admin_requests_never_get_a_5xx(client, body, authorization):
    headers = {"content-type": "application/json", "authorization": authorization}
    assert_client_error_or_success(client.put("/admin/routing", content=body, headers=headers))
    authorized = {"content-type": "application/json", "authorization": "Bearer secret"}
    assert_client_error_or_success(client.put("/admin/routing", content=body, headers=authorized))
    # whatever the admin API accepted, the service still answers
    assert_client_error_or_success(client.post("/predict", json={"inputs": _image(0)}))
    assert_client_error_or_success(client.get("/admin/routing", headers=authorized))


def _routing(**changes: object) -> bytes:
    document = {"versions": {"1": MODEL_PATH}, "aliases": {"champion": "1"}, **changes}
    return json.dumps(document).encode()


HOSTILE_ROUTING = {
    "a list as the champion": _routing(aliases={"champion": ["1"]}),
    "an object as the champion": _routing(aliases={"champion": {"1": 1}}),
    "a list as the shadow": _routing(shadow=[]),
    "an object as the shadow": _routing(shadow={}),
    "a 5000-character path": _routing(versions={"1": "/nonexistent/" + "y" * 5000}),
    "a lone surrogate in a path": _routing(versions={"1": "\ud800.onnx"}),
    "a 5000-character alias": _routing(aliases={"champion": "1", "x" * 5000: "1"}),
    "a 2000-item percent": _routing(challenger_percent=[0] * 2000),
    "an emoji version name": _routing(versions={"v🚀": MODEL_PATH}, aliases={"champion": "v🚀"}),
    "a lone surrogate as version name": _routing(versions={"\ud800": MODEL_PATH}, aliases={"champion": "\ud800"}),
    "a 65-character version name": _routing(versions={"a" * 65: MODEL_PATH}, aliases={"champion": "a" * 65}),
    "a path that is a folder": _routing(versions={"1": "/"}),
    "a NUL byte in a path": _routing(versions={"1": "model\x00.onnx"}),
}


@pytest.mark.parametrize("case", list(HOSTILE_ROUTING))
def test_hostile_routing_documents_get_a_readable_4xx_and_change_nothing(client, case):
    authorized = {"content-type": "application/json", "authorization": "Bearer secret"}
    before = client.get("/admin/routing", headers=authorized).json()
    response = client.put("/admin/routing", content=HOSTILE_ROUTING[case], headers=authorized)
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    assert_client_error_or_success(response)
    assert client.get("/admin/routing", headers=authorized).json() == before
    predicted = client.post("/predict", json={"inputs": _image(0)})
    assert predicted.status_code == 200 and predicted.headers["x-model-version"] == before["aliases"]["champion"]


def _image(value: object) -> list:
    return [[[value] * 8 for _ in range(8)]]


LONG_KEY = "k" * 30_000
HOSTILE = {
    "5000-digit integer": b'{"inputs": ' + b"1" * 5000 + b"}",
    "5000-digit integer in a tensor": json.dumps({"inputs": _image(0)}).replace("0", "9" * 5000, 1).encode(),
    "4000-digit negative integer": b'{"inputs": [-' + b"7" * 4000 + b"]}",
    "integer beyond float32": json.dumps({"inputs": _image(10**40)}).encode(),
    "float overflowing float64": b'{"inputs": ' + json.dumps(_image(0)).replace("0", "1e400", 1).encode() + b"}",
    "NaN token": json.dumps({"inputs": _image(0)}).replace("0", "NaN", 1).encode(),
    "-Infinity token": json.dumps({"inputs": _image(0)}).replace("0", "-Infinity", 1).encode(),
    "30 000-character key": json.dumps({LONG_KEY: 1}).encode(),
    "deep list nesting": b"[" * 100_000 + b"]" * 100_000,
    "deep object nesting": b'{"a":' * 20_000 + b"1" + b"}" * 20_000,
    "70 nested lists (beyond numpy's 64 dimensions)": b'{"inputs": ' + b"[" * 70 + b"1" + b"]" * 70 + b"}",
    "null byte": b'{"inputs": \x00}',
    "lone surrogate": b'{"inputs": "\\ud800"}',
    "invalid UTF-8": b'{"inputs": "\xff\xfe"}',
    "duplicate keys": b'{"inputs": 1, "inputs": [1, 2]}',
    "empty dimension": b'{"inputs": [[[]]]}',
    "ragged rows": b'{"inputs": [[[1, 2], [3]]]}',
    "booleans": json.dumps({"inputs": _image(True)}).encode(),
    "strings": json.dumps({"inputs": _image("1")}).encode(),
    "objects": json.dumps({"inputs": _image({})}).encode(),
    "nulls": json.dumps({"inputs": _image(None)}).encode(),
    "65 examples": json.dumps({"inputs": [_image(0)] * 65}).encode(),
    "a bare number": b"1",
    "a bare string": b'"inputs"',
    "trailing garbage": json.dumps({"inputs": _image(0)}).encode() + b"}}}",
    "whitespace only": b" \n\t ",
    "body just under the limit": b'{"inputs": [' + b"0," * 32_000 + b"0]}",
    "body over the limit": b"[" + b"0," * 40_000 + b"0]",
    "1e38 pixels (finite float32; the logits overflow)": json.dumps({"inputs": _image(1e38)}).encode(),
    "-1e38 pixels": json.dumps({"inputs": _image(-1e38)}).encode(),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_bodies_get_a_readable_4xx(client, case):
    response = client.post("/predict", content=HOSTILE[case], headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    assert_client_error_or_success(response)


ACCEPTED = {  # odd but valid: Python's json reads UTF-16/32 and a UTF-8 BOM; 2**64 is a float32 value like any other
    "UTF-16 body": json.dumps({"inputs": _image(0)}).encode("utf-16"),
    "UTF-8 BOM": b"\xef\xbb\xbf" + json.dumps({"inputs": _image(0)}).encode(),
    "integer beyond int64": json.dumps({"inputs": _image(2**64)}).encode(),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_odd_but_valid_bodies_are_answered(client, case):
    response = client.post("/predict", content=ACCEPTED[case], headers={"content-type": "application/json"})
    assert response.status_code == 200 and response.json()["batch_size"] == 1, response.text[:300]


HOSTILE_HEADERS = {
    "10 000-character content type": {"content-type": "x" * 10_000},
    "latin-1 content type": {"content-type": "application/jsön"},
    "content length not a number": {"content-type": "application/json", "content-length": "1" * 5000},
    "10 000-character request key": {"content-type": "application/json", "x-request-key": "k" * 10_000},
    "non-ASCII bearer": {"content-type": "application/json", "authorization": "Bearer s\xe9cret"},
}


@pytest.mark.parametrize("case", list(HOSTILE_HEADERS))
def test_hostile_headers_never_get_a_5xx(client, case):
    body = json.dumps({"inputs": _image(0)}).encode()
    for method, path in (("POST", "/predict"), ("PUT", "/admin/routing"), ("GET", "/admin/routing")):
        assert_client_error_or_success(client.request(method, path, content=body, headers=latin1(HOSTILE_HEADERS[case])))


def test_a_5000_digit_integer_is_refused_as_out_of_range_not_as_a_type_mix(client):
    response = client.post("/predict", content=HOSTILE["5000-digit integer in a tensor"], headers={"content-type": "application/json"})
    assert response.status_code == 422 and response.json()["error"] == "not_finite", response.text[:300]
    assert "too large for float32" in response.json()["detail"]


def test_outputs_that_overflow_get_a_422_not_a_nan(client):
    response = client.post("/predict", content=HOSTILE["1e38 pixels (finite float32; the logits overflow)"])
    assert response.status_code == 422 and response.json()["error"] == "non_finite_output", response.text[:300]


def test_echoed_client_text_is_an_excerpt(client):
    response = client.post("/predict", content=HOSTILE["30 000-character key"], headers={"content-type": "application/json"})
    detail = response.json()["detail"]
    assert response.status_code == 422 and "(30000 characters)" in detail and len(detail) < MAX_DETAIL
