"""Load an ONNX classifier once, verify it (exists, sha256, parses, one input), describe and run it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import providers
from .text import excerpt

# ONNX Runtime type strings -> NumPy dtypes the service accepts as model inputs
_NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int16)": np.int16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
}


class ModelError(RuntimeError):
    """The model cannot be served: missing, corrupted, wrong checksum or not a single-input classifier."""


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output: name, ONNX Runtime type string and shape (int, or a name/None for a free dim)."""

    name: str
    type: str
    shape: tuple[int | str | None, ...]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "shape": [d if isinstance(d, int) else (d or "?") for d in self.shape]}


@dataclass(frozen=True)
class InputContract:
    """What /predict accepts, derived from the model's input: dtype, one example's shape, batch limits."""

    name: str
    dtype: np.dtype
    example_shape: tuple[int | None, ...]  # None = any size (a symbolic dimension)
    max_batch: int

    def shape_text(self, batch: bool = False) -> str:
        dims = ["n"] if batch else []
        dims += ["any" if d is None else str(d) for d in self.example_shape]
        return "[" + ", ".join(dims) + "]"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


@dataclass
class LoadedModel:
    """A verified model with its ONNX Runtime session; ``run`` and ``postprocess`` serve /predict."""

    path: Path
    name: str
    sha256: str
    opset: int
    producer: str
    input: TensorSpec
    outputs: list[TensorSpec]
    session: Any
    score_output: str | None
    label_output: str | None
    fixed_batch: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def contract(self, max_batch: int) -> InputContract:
        """The request contract for this model; a fixed batch dimension in the model caps ``max_batch``."""
        dims = tuple(d if isinstance(d, int) and d > 0 else None for d in self.input.shape[1:])
        limit = min(max_batch, self.fixed_batch) if self.fixed_batch else max_batch
        return InputContract(self.input.name, np.dtype(_NUMPY_TYPES[self.input.type]), dims, limit)

    def free_dimensions(self) -> list[str]:
        """The input's non-batch dimensions each request chooses (their names, or "axis i"); [] when all are fixed."""
        return [
            d if isinstance(d, str) and d else f"axis {axis}"
            for axis, d in enumerate(self.input.shape)
            if axis > 0 and not (isinstance(d, int) and d > 0)
        ]

    def describe(self) -> dict[str, Any]:
        """Name, opset, sha256 and signature (what GET /ready shows)."""
        return {
            "name": self.name,
            "file": self.path.name,
            "sha256": self.sha256,
            "opset": self.opset,
            "producer": self.producer,
            "providers": self.session.get_providers(),
            "inputs": [self.input.describe()],
            "outputs": [spec.describe() for spec in self.outputs],
        }

    def run(self, batch: np.ndarray) -> list[Any]:
        """``session.run`` on one validated batch (thread-safe: ORT sessions may be run concurrently)."""
        wanted = [name for name in (self.label_output, self.score_output) if name]
        return self.session.run(wanted, {self.input.name: batch})

    def postprocess(self, outputs: list[Any]) -> dict[str, Any]:
        """Predicted classes and class probabilities from the raw outputs (softmax when the scores are logits)."""
        values = dict(zip([n for n in (self.label_output, self.score_output) if n], outputs, strict=True))
        result: dict[str, Any] = {}
        scores = values.get(self.score_output) if self.score_output else None
        if scores is not None:
            scores = np.asarray(scores, dtype=np.float64)
            is_distribution = bool(np.all(scores >= 0) and np.allclose(scores.sum(axis=1), 1.0, atol=1e-3))
            probabilities = scores if is_distribution else _softmax(scores)
        if self.label_output:
            result["predictions"] = np.asarray(values[self.label_output]).tolist()
        else:
            result["predictions"] = probabilities.argmax(axis=1).tolist()
        if scores is not None:
            result["probabilities"] = probabilities.tolist()
        return result


def _model_tensors(proto: Any) -> Iterator[Any]:
    """Every tensor stored in a model: its graph's (``_tensors``) and those of its model-local functions' nodes."""
    yield from _tensors(proto.graph)
    for function in proto.functions:
        yield from _node_tensors(function.node)


def _tensors(graph: Any) -> Iterator[Any]:
    """Every tensor stored in a graph: initializers (sparse too) and tensor attributes, subgraphs included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    yield from _node_tensors(graph.node)


def _node_tensors(nodes: Any) -> Iterator[Any]:
    """The tensors in the attributes of ``nodes`` (a graph's or a function's), subgraphs included."""
    for node in nodes:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for subgraph in [*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs]:
                yield from _tensors(subgraph)


def _read_verified(path: Path, expected_sha256: str) -> tuple[bytes, str]:
    """(the file's bytes, their sha256), read once: these bytes are the ones checked and the ones loaded."""
    shown = excerpt(str(path), tail=True)  # a routing document's path comes from a client: an excerpt that keeps the file name
    try:
        if not path.exists():
            raise ModelError(f"model file not found: {shown} (set ONNX_SERVICE_MODEL to the path of an .onnx file)")
        if not path.is_file():
            raise ModelError(f"model path is not a file: {shown}")
        data = path.read_bytes()
    except (OSError, ValueError) as error:  # a name too long for the file system, a character it cannot encode, no permission
        reason = error.strerror if isinstance(error, OSError) and error.strerror else excerpt(str(error))  # OSError's text repeats the path
        raise ModelError(f"cannot read the model file {shown}: {type(error).__name__}: {reason}") from None
    actual = hashlib.sha256(data).hexdigest()
    if expected_sha256 and actual != expected_sha256.lower():
        raise ModelError(
            f"model sha256 mismatch for {excerpt(path.name, tail=True)}: expected {expected_sha256.lower()}, the file has {actual} "
            "(the file is corrupted or not the model this service was configured for)"
        )
    return data, actual


def _parse(data: bytes, path: Path) -> Any:
    """The ModelProto in ``data``; ModelError when it is not ONNX or keeps tensors in external files (not covered by the sha256)."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    try:
        proto = onnx.load_model_from_string(data)
    except Exception as error:  # protobuf's DecodeError and friends
        raise ModelError(
            f"{excerpt(path.name, tail=True)} is not a valid ONNX model: {type(error).__name__}: {excerpt(str(error))}"
        ) from None
    if any(uses_external_data(tensor) for tensor in _model_tensors(proto)):
        raise ModelError(
            f"{excerpt(path.name, tail=True)} keeps weights in external data files, which the sha256 check does not cover: the service "
            "serves single-file models (save with onnx.save_model(model, path, save_as_external_data=False))"
        )
    return proto


def _open_session(data: bytes, path: Path, threads: int, provider: str) -> Any:
    """An InferenceSession on the verified bytes (not the path: the file could change between the check and the load)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(data, options, providers=providers.prepare(provider, options))
        providers.check_started(provider, session)
    except providers.ProviderError as error:
        raise ModelError(str(error)) from None
    except Exception as error:
        raise ModelError(f"ONNX Runtime cannot load {excerpt(path.name, tail=True)}: {error}") from None
    return session


def _input_spec(session: Any, path: Path) -> TensorSpec:
    inputs = session.get_inputs()
    if len(inputs) != 1:
        names = ", ".join(arg.name for arg in inputs)
        raise ModelError(f"the service serves models with exactly one input; {excerpt(path.name, tail=True)} has {len(inputs)}: {names}")
    spec = TensorSpec(inputs[0].name, inputs[0].type, tuple(inputs[0].shape))
    if spec.type not in _NUMPY_TYPES:
        raise ModelError(f"input {spec.name!r} has type {spec.type}; supported: {', '.join(_NUMPY_TYPES)}")
    if len(spec.shape) < 1:
        raise ModelError(f"input {spec.name!r} is a scalar; a classifier needs a batch dimension")
    return spec


def _output_roles(out_specs: list[TensorSpec], path: Path) -> tuple[str | None, str | None]:
    """(the [n, classes] score output, the [n] label output): at least one of them."""
    score = next(
        (o.name for o in out_specs if o.type in {"tensor(float)", "tensor(double)", "tensor(float16)"} and len(o.shape) == 2), None
    )
    label = next((o.name for o in out_specs if o.type in {"tensor(int64)", "tensor(int32)", "tensor(string)"} and len(o.shape) == 1), None)
    if score is None and label is None:
        described = ", ".join(f"{o.name} {o.type} {list(o.shape)}" for o in out_specs)
        raise ModelError(
            f"{excerpt(path.name, tail=True)} is not a classifier: expected a [n, classes] float output or a [n] label output, got {described}"
        )
    return score, label


def load_served_model(path: str | Path, expected_sha256: str = "", threads: int = 1, name: str = "", provider: str = "cpu") -> LoadedModel:
    """Verify and load an ONNX classifier; raise ModelError with a message that says what is wrong and how to fix it."""
    path = Path(path)
    data, actual = _read_verified(path, expected_sha256)
    proto = _parse(data, path)
    session = _open_session(data, path, threads, provider)
    spec = _input_spec(session, path)
    out_specs = [TensorSpec(o.name, o.type, tuple(o.shape or ())) for o in session.get_outputs()]
    score, label = _output_roles(out_specs, path)
    opset = next((op.version for op in proto.opset_import if op.domain in ("", "ai.onnx")), 0)
    return LoadedModel(
        path=path,
        name=name or path.stem,
        sha256=actual,
        opset=int(opset),
        producer=f"{proto.producer_name} {proto.producer_version}".strip(),
        input=spec,
        outputs=out_specs,
        session=session,
        score_output=score,
        label_output=label,
        fixed_batch=spec.shape[0] if isinstance(spec.shape[0], int) and spec.shape[0] > 0 else None,
    )
