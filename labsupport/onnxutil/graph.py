"""Reading ONNX graphs: ``summarize``, ``op_histogram``, ``load_model`` and the types of tensors.

Introduced in notebook 01 (graphs by hand) and used wherever a notebook shows what a model
contains (pictures of graphs: ``labsupport.onnxutil.draw``). Every function takes an
``onnx.ModelProto``, its bytes or the path of an ``.onnx`` file. Paths are read without their external data
(only the graph and the tensor shapes are needed), so a model of many gigabytes is summarized in
milliseconds.
"""

from __future__ import annotations

import html
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
from onnx import TensorProto

from labsupport.course.display import format_bytes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

ModelLike = str | os.PathLike[str] | bytes | onnx.ModelProto  # a path (.onnx; sessions also take .ort), the bytes or the proto
Dim = int | str | None

# element types narrower than a byte (packed two or four to a byte)
_SUB_BYTE_BITS = {
    name: bits for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2)) if hasattr(TensorProto, name)
}


# --------------------------------------------------------------------------------------------
# loading


def load_model(model: ModelLike, *, load_external_data: bool = False) -> onnx.ModelProto:
    """A ModelProto from a ModelProto (returned as is), the model's bytes or a path; clear errors for anything else.

    Raises TypeError for other types, FileNotFoundError for a missing file and ValueError for
    bytes or a file that is not an ONNX model. Used by every function of this module (notebook 01).
    """
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return _parsed(lambda: onnx.load_model_from_string(model), f"these {len(model)} bytes")
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"expected an onnx.ModelProto or the path of an .onnx file (str or pathlib.Path) or its bytes, got {type(model).__name__}"
        )
    path = Path(model)
    if not path.exists():
        raise FileNotFoundError(f"no ONNX model at {path}: the file does not exist")
    if not path.is_file():
        raise ValueError(f"{path} is not a file (expected the path of an .onnx model)")
    return _parsed(lambda: onnx.load(str(path), load_external_data=load_external_data), path.name)


def _parsed(read: Callable[[], onnx.ModelProto], what: str) -> onnx.ModelProto:
    try:
        loaded = read()
    except Exception as error:  # DecodeError, OSError, external-data errors ...
        raise ValueError(f"cannot read {what} as an ONNX model: {type(error).__name__}: {error}") from error
    if not loaded.HasField("graph") or (not loaded.graph.node and not loaded.graph.output):
        raise ValueError(f"{what} is not an ONNX model: it holds no graph (empty or not a ModelProto file)")
    return loaded


# --------------------------------------------------------------------------------------------
# small readers


def dtype_name(elem_type: int) -> str:
    """``TensorProto.FLOAT`` -> ``"float32"`` (numpy names where one exists, else the ONNX name)."""
    if elem_type == TensorProto.UNDEFINED:
        return "?"
    try:
        import numpy as np

        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:
        return TensorProto.DataType.Name(elem_type).lower()


def _bits_per_element(elem_type: int) -> int:
    name = TensorProto.DataType.Name(elem_type)
    if name in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[name]
    try:
        return 8 * onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except Exception:
        return 0


@dataclass(frozen=True)
class TensorInfo:
    """Name, element type and shape of a graph input or output (dims are int, symbolic str or None)."""

    name: str
    dtype: str
    shape: tuple[Dim, ...] | None  # None: rank unknown

    @property
    def shape_text(self) -> str:
        """``[batch, 4]``; ``[]`` for a scalar; ``?`` for an unknown rank; ``?`` for an unknown dim."""
        if self.shape is None:
            return "?"
        return "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{self.shape_text}"


def _type_info(name: str, type_proto: onnx.TypeProto) -> TensorInfo:
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tensor = getattr(type_proto, kind)
        shape: tuple[Dim, ...] | None = None
        if tensor.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None) for d in tensor.shape.dim
            )
        prefix = "sparse " if kind == "sparse_tensor_type" else ""
        return TensorInfo(name, prefix + dtype_name(tensor.elem_type), shape)
    if kind == "sequence_type":
        inner = _type_info(name, type_proto.sequence_type.elem_type)
        return TensorInfo(name, f"sequence<{inner.dtype}{inner.shape_text}>", None)
    if kind == "optional_type":
        inner = _type_info(name, type_proto.optional_type.elem_type)
        return TensorInfo(name, f"optional<{inner.dtype}{inner.shape_text}>", None)
    if kind == "map_type":
        key = dtype_name(type_proto.map_type.key_type)
        value = _type_info(name, type_proto.map_type.value_type)
        return TensorInfo(name, f"map<{key}, {value.dtype}>", None)
    return TensorInfo(name, "?", None)


def tensor_info(value: onnx.ValueInfoProto) -> TensorInfo:
    """Name, element type and shape of a graph input, output or ``value_info`` entry (notebook 01)."""
    return _type_info(value.name, value.type)


def _tensor_elements(tensor: TensorProto) -> int:
    return math.prod(tensor.dims) if tensor.dims else 1


def _tensor_bytes(tensor: TensorProto) -> int:
    if tensor.data_type == TensorProto.STRING:
        return sum(len(s) for s in tensor.string_data)
    return math.ceil(_tensor_elements(tensor) * _bits_per_element(tensor.data_type) / 8)


def _walk_nodes(graph: onnx.GraphProto, include_subgraphs: bool) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        if include_subgraphs:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    yield from _walk_nodes(attribute.g, True)
                elif attribute.type == onnx.AttributeProto.GRAPHS:
                    for sub in attribute.graphs:
                        yield from _walk_nodes(sub, True)


def op_histogram(model: ModelLike, *, include_subgraphs: bool = False) -> Counter[str]:
    """How many nodes of each op type the main graph has (``Counter``; notebook 01).

    Keys are plain op types (``"MatMul"``, also for custom domains). With
    ``include_subgraphs=True`` the bodies of ``If``/``Loop``/``Scan`` nodes are counted too.
    """
    proto = load_model(model)
    return Counter(node.op_type for node in _walk_nodes(proto.graph, include_subgraphs))


# --------------------------------------------------------------------------------------------
# summarize


@dataclass
class GraphSummary:
    """What ``summarize`` found; prints as short stable text and renders as a table in a notebook."""

    graph_name: str
    producer: str
    ir_version: int
    opset: dict[str, int]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    node_count: int
    op_histogram: dict[str, int]
    parameter_count: int
    parameter_bytes: int
    initializer_count: int
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def opset_text(self) -> str:
        return ", ".join(f"{domain} {version}" for domain, version in self.opset.items()) or "none"

    @property
    def histogram_text(self) -> str:
        return ", ".join(f"{op} {count}" for op, count in self.op_histogram.items()) or "none"

    def rows(self) -> list[tuple[str, str]]:
        """The summary as (field, value) text pairs (what the table and the text show)."""
        rows = [
            ("graph", self.graph_name or "(unnamed)"),
            ("producer", self.producer or "(not set)"),
            ("IR version", str(self.ir_version)),
            ("opset", self.opset_text),
        ]
        rows += [("input", str(info)) for info in self.inputs]
        rows += [("output", str(info)) for info in self.outputs]
        rows += [
            ("nodes", str(self.node_count)),
            ("ops", self.histogram_text),
            (
                "parameters",
                f"{self.parameter_count:,} in {self.initializer_count} initializers ({format_bytes(self.parameter_bytes)})",
            ),
        ]
        rows += [(f"metadata {key}", value) for key, value in self.metadata.items()]
        return rows

    def __str__(self) -> str:
        rows = self.rows()
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's text/plain
        printer.text(str(self))

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(name)}</th>"
            f"<td style='text-align:left'><code>{html.escape(value)}</code></td></tr>"
            for name, value in self.rows()
        )
        return f"<table>{body}</table>"

    def to_frame(self) -> pd.DataFrame:
        """The rows as a pandas DataFrame with columns ``field`` and ``value``."""
        import pandas as pd

        return pd.DataFrame(self.rows(), columns=["field", "value"])


def summarize(model: ModelLike) -> GraphSummary:
    """Inputs/outputs (type, shape), node count, op histogram, parameters, opset and producer (notebook 01).

    Parameters are the elements of the main graph's initializers (dense and sparse; for packed
    formats such as MatMulNBits that is the stored elements, not the logical weights); bytes
    are computed from shapes and element types, so external data need not be present. Graph
    inputs that merely name an initializer (old IR < 4 style) are not listed as inputs.
    """
    proto = load_model(model)
    graph = proto.graph
    initializers = list(graph.initializer)
    init_names = {tensor.name for tensor in initializers}
    parameter_count = sum(_tensor_elements(t) for t in initializers)
    parameter_bytes = sum(_tensor_bytes(t) for t in initializers)
    for sparse in graph.sparse_initializer:
        init_names.add(sparse.values.name)
        parameter_count += _tensor_elements(sparse.values)
        parameter_bytes += _tensor_bytes(sparse.values) + _tensor_bytes(sparse.indices)
    producer = " ".join(part for part in (proto.producer_name, proto.producer_version) if part)
    return GraphSummary(
        graph_name=graph.name,
        producer=producer,
        ir_version=proto.ir_version,
        opset={(entry.domain or "ai.onnx"): entry.version for entry in proto.opset_import},
        inputs=[tensor_info(v) for v in graph.input if v.name not in init_names],
        outputs=[tensor_info(v) for v in graph.output],
        node_count=len(graph.node),
        op_histogram=dict(sorted(op_histogram(proto).items(), key=lambda item: (-item[1], item[0]))),
        parameter_count=parameter_count,
        parameter_bytes=parameter_bytes,
        initializer_count=len(initializers) + len(graph.sparse_initializer),
        metadata={entry.key: entry.value for entry in proto.metadata_props},
    )
