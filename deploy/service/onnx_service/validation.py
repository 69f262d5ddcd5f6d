"""Request validation derived from the model's input signature: every bad request gets a 4xx that says what was expected."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .model import InputContract
from .text import excerpt

FIELD = "inputs"
CLIENT_CLOSED = 499  # nginx's status for a client that closed the connection before the answer
_INT_DIGITS = 18  # longer integer literals are read as floats: every int kept fits int64, and no int-digits limit is hit


class RequestError(Exception):
    """A request the service refuses: HTTP ``status``, a short machine-readable ``code`` and a message for humans."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "detail": self.message}


def _parse_int(token: str) -> int | float:
    # Python refuses int() of more than 4300 digits (a plain ValueError); a long literal becomes a float
    # (inf when beyond float64), which the dtype checks of to_batch then judge
    return int(token) if len(token.lstrip("-")) <= _INT_DIGITS else float(token)


def _reject_constant(token: str) -> float:
    raise RequestError(422, "not_finite", f"the body contains {token}; inputs must be finite numbers (JSON has no NaN or Infinity)")


def check_content_type(content_type: str | None) -> None:
    """415 unless the body is declared as JSON (a missing Content-Type is accepted)."""
    if content_type is None:
        return
    media = content_type.split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise RequestError(
            415, "unsupported_media_type", f"expected Content-Type: application/json, got {excerpt(media) if media else 'nothing'}"
        )


def parse_json(body: bytes) -> Any:
    """The JSON document in ``body``; 400 when it is empty or not JSON, 422 for NaN/Infinity tokens."""
    if not body.strip():
        raise RequestError(400, "invalid_json", f'the body is empty; expected a JSON object like {{"{FIELD}": [...]}}')
    try:
        return json.loads(body, parse_constant=_reject_constant, parse_int=_parse_int)
    except RequestError:
        raise
    except RecursionError:
        raise RequestError(400, "invalid_json", "the body nests JSON too deeply") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError and any other refusal of the decoder (bounded text)
        raise RequestError(
            400, "invalid_json", f'the body is not valid JSON ({str(error)[:200]}); expected a JSON object like {{"{FIELD}": [...]}}'
        ) from None


async def read_body(request: Any, limit: int) -> bytes:
    """The request's body; 413 beyond ``limit`` bytes (declared in Content-Length or counted while streaming), 499 when the client left."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise RequestError(400, "bad_content_length", f"Content-Length {excerpt(declared)} is not a number") from None
        if size > limit:
            raise RequestError(413, "body_too_large", f"the body has {size} bytes; the maximum is {limit} bytes (send smaller batches)")
    # imported here, not at module level: score.py (deploy/azureml) imports this module where starlette is not installed
    from starlette.requests import ClientDisconnect

    chunks, total = [], 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise RequestError(413, "body_too_large", f"the body exceeds the maximum of {limit} bytes (send smaller batches)")
            chunks.append(chunk)
    except ClientDisconnect:  # not a server error: recorded as 499 (nginx's "client closed request"); nobody reads the answer
        raise RequestError(
            CLIENT_CLOSED, "client_closed_request", "the client closed the connection before sending the whole body"
        ) from None
    return b"".join(chunks)


def _index_text(index: tuple[int, ...]) -> str:
    return FIELD + "".join(f"[{i}]" for i in index)


def _first_boolean(data: Any, index: tuple[int, ...] = ()) -> tuple[int, ...] | None:
    """Where the first true/false sits in nested lists (NumPy reads a mix of booleans and numbers as numbers: True -> 1)."""
    if isinstance(data, bool):
        return index
    if isinstance(data, list):
        for position, item in enumerate(data):
            found = _first_boolean(item, (*index, position))
            if found is not None:
                return found
    return None


def _numbers_word(contract: InputContract) -> str:
    return f"{'integers' if np.issubdtype(contract.dtype, np.integer) else 'numbers'} ({contract.dtype.name})"


def _as_array(payload: Any, contract: InputContract) -> tuple[Any, np.ndarray]:
    """(the "inputs" value, as an array): a JSON object with a non-empty, rectangular "inputs"."""
    example_text, batch_text = contract.shape_text(), contract.shape_text(batch=True)
    if not isinstance(payload, dict):
        raise RequestError(422, "wrong_type", f'expected a JSON object like {{"{FIELD}": [...]}}, got a JSON {type(payload).__name__}')
    if FIELD not in payload:
        fields = ", ".join(excerpt(key) for key in list(payload)[:5]) or "none"
        raise RequestError(
            422,
            "missing_field",
            f"missing field {FIELD!r}: send one example of shape {example_text} or a batch of shape {batch_text} (fields sent: {fields})",
        )
    data = payload[FIELD]
    if isinstance(data, list) and len(data) == 0:
        raise RequestError(422, "empty_batch", f"{FIELD!r} is an empty list; send at least one example of shape {example_text}")
    try:
        return data, np.asarray(data)
    except (ValueError, TypeError):
        raise RequestError(
            422,
            "wrong_shape",
            f"{FIELD!r} has rows of different lengths or too many dimensions; expected shape {example_text} or {batch_text}",
        ) from None


def _check_kind(data: Any, array: np.ndarray, contract: InputContract) -> None:
    """Numbers only: no text, true/false, objects or nulls; plain integers for an integer model."""
    kind = array.dtype.kind
    if kind in "US":
        raise RequestError(422, "wrong_type", f"{FIELD!r} contains text; expected {_numbers_word(contract)}")
    if kind == "b":
        raise RequestError(422, "wrong_type", f"{FIELD!r} contains true/false; expected {_numbers_word(contract)}")
    if kind == "O" or kind not in "iuf":
        what = "an object" if isinstance(data, dict) else "null or a mix of types"
        raise RequestError(422, "wrong_type", f"{FIELD!r} contains {what}; expected nested lists of numbers ({contract.dtype.name})")
    if np.issubdtype(contract.dtype, np.integer) and kind == "f" and array.size:
        info = np.iinfo(contract.dtype)
        if not np.isfinite(array).all() or array.min() < info.min or array.max() > info.max:
            raise RequestError(422, "out_of_range", f"{FIELD!r} has values outside {contract.dtype.name}'s range {info.min}..{info.max}")
        raise RequestError(
            422,
            "wrong_type",
            f"{FIELD!r} contains numbers written with a decimal point, an exponent or more than {_INT_DIGITS} digits; "
            f"this model takes integers ({contract.dtype.name}) written as plain integers",
        )


def _with_batch_axis(data: Any, array: np.ndarray, contract: InputContract) -> tuple[np.ndarray, bool]:
    """(the batch, whether one example was sent): the rank, no true/false inside, the batch size and every dimension checked."""
    example_text, batch_text = contract.shape_text(), contract.shape_text(batch=True)
    rank = len(contract.example_shape)
    if array.ndim not in (rank, rank + 1):
        raise RequestError(
            422,
            "wrong_shape",
            f"{FIELD!r} has shape {list(array.shape)}; expected one example of shape {example_text} or a batch of shape {batch_text}",
        )
    single = array.ndim == rank
    array = array[np.newaxis] if single else array
    boolean_at = _first_boolean(data)  # after the rank check: the nesting is at most the model's rank + 1 deep
    if boolean_at is not None:
        raise RequestError(422, "wrong_type", f"{_index_text(boolean_at)} is true/false; expected {_numbers_word(contract)}")
    if array.shape[0] == 0:
        raise RequestError(422, "empty_batch", f"{FIELD!r} holds no examples; send at least one example of shape {example_text}")
    if array.shape[0] > contract.max_batch:
        raise RequestError(
            422,
            "batch_too_large",
            f"a batch of {array.shape[0]} examples exceeds the maximum of {contract.max_batch}; split it into smaller requests",
        )
    for axis, (got, want) in enumerate(zip(array.shape[1:], contract.example_shape, strict=False)):
        if got == 0 or (want is not None and got != want):
            raise RequestError(
                422,
                "wrong_shape",
                f"each example has shape {list(array.shape[1:])}; expected {example_text} "
                f"(dimension {axis} should be {want if want is not None else 'at least 1'})",
            )
    return array, single


def _converted(array: np.ndarray, single: bool, contract: InputContract) -> np.ndarray:
    """The batch in the model's dtype: finite for a float model, within range for an integer one."""
    if np.issubdtype(contract.dtype, np.integer):
        info = np.iinfo(contract.dtype)
        if array.min() < info.min or array.max() > info.max:
            raise RequestError(422, "out_of_range", f"{FIELD!r} has values outside {contract.dtype.name}'s range {info.min}..{info.max}")
        return array.astype(contract.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.astype(contract.dtype)
    finite = np.isfinite(converted)
    if not finite.all():
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        index = index[1:] if single else index
        raise RequestError(
            422,
            "not_finite",
            f"{_index_text(index)} is not a finite {contract.dtype.name} number (too large for {contract.dtype.name}); inputs must be finite",
        )
    return converted


def to_batch(payload: Any, contract: InputContract) -> tuple[np.ndarray, bool]:
    """Validate a parsed body against ``contract``; returns (batch array of the model's dtype, whether one example was sent)."""
    data, array = _as_array(payload, contract)
    _check_kind(data, array, contract)
    array, single = _with_batch_axis(data, array, contract)
    return _converted(array, single, contract), single
