"""Reading and drawing ONNX graphs: ``summarize``, ``op_histogram`` and ``draw``.

Introduced in notebook 01 (graphs by hand) and used wherever a notebook shows what a model
contains. Every function takes an ``onnx.ModelProto`` or the path of an ``.onnx`` file. Paths
are read without their external data (only the graph and the tensor shapes are needed), so a
model of many gigabytes is summarized and drawn in milliseconds.

``draw`` is pure matplotlib (a layered, topological layout computed here), so it needs no
system package such as graphviz and works offline, in CI and on Binder.
"""

from __future__ import annotations

import html
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Union

import onnx
from onnx import TensorProto

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

ModelLike = Union[onnx.ModelProto, str, "os.PathLike[str]"]
Dim = Union[int, str, None]

# element types narrower than a byte (packed two or four to a byte)
_SUB_BYTE_BITS = {
    name: bits
    for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(TensorProto, name)
}


# --------------------------------------------------------------------------------------------
# loading


def load_model(model: ModelLike, *, load_external_data: bool = False) -> onnx.ModelProto:
    """A ModelProto from a ModelProto (returned as is) or a path; clear errors for anything else.

    Raises TypeError for other types, FileNotFoundError for a missing file and ValueError for a
    file that is not an ONNX model. Used by every function of this module (notebook 01).
    """
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"expected an onnx.ModelProto or the path of an .onnx file (str or pathlib.Path), "
            f"got {type(model).__name__}"
        )
    path = Path(model)
    if not path.exists():
        raise FileNotFoundError(f"no ONNX model at {path}: the file does not exist")
    if not path.is_file():
        raise ValueError(f"{path} is not a file (expected the path of an .onnx model)")
    try:
        loaded = onnx.load(str(path), load_external_data=load_external_data)
    except Exception as error:  # DecodeError, OSError, external-data errors ...
        raise ValueError(f"cannot read {path.name} as an ONNX model: {type(error).__name__}: {error}") from error
    if not loaded.HasField("graph") or (not loaded.graph.node and not loaded.graph.output):
        raise ValueError(f"{path.name} is not an ONNX model: it holds no graph (empty or not a ModelProto file)")
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
                d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None)
                for d in tensor.shape.dim
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


def _value_info(value: onnx.ValueInfoProto) -> TensorInfo:
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


def format_bytes(size: int) -> str:
    """``1536`` -> ``"1.5 KB"`` (1 KB = 1024 bytes; one decimal, stable for notebook outputs)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


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
        inputs=[_value_info(v) for v in graph.input if v.name not in init_names],
        outputs=[_value_info(v) for v in graph.output],
        node_count=len(graph.node),
        op_histogram=dict(sorted(op_histogram(proto).items(), key=lambda item: (-item[1], item[0]))),
        parameter_count=parameter_count,
        parameter_bytes=parameter_bytes,
        initializer_count=len(initializers) + len(graph.sparse_initializer),
        metadata={entry.key: entry.value for entry in proto.metadata_props},
    )


# --------------------------------------------------------------------------------------------
# draw


def _shape_label(info: TensorInfo | None) -> str:
    if info is None or info.shape is None:
        return ""
    dims = ",".join("?" if d is None else str(d) for d in info.shape)
    prefix = "" if info.dtype == "float32" else info.dtype
    return f"{prefix}[{dims}]"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _known_types(proto: onnx.ModelProto) -> dict[str, TensorInfo]:
    """Types of every named tensor, after shape inference on a copy when it succeeds."""
    inferred = proto
    try:
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        inferred = onnx.shape_inference.infer_shapes(copy)
    except Exception:  # broken or > 2 GB models: draw what the file already declares
        inferred = proto
    graph = inferred.graph
    known = {t.name: TensorInfo(t.name, dtype_name(t.data_type), tuple(t.dims)) for t in graph.initializer}
    for value in (*graph.value_info, *graph.input, *graph.output):
        known[value.name] = _value_info(value)
    return known


@dataclass
class _Box:
    key: str
    label: str
    kind: str  # "node", "broken" (an input is missing), "input", "output"
    layer: int
    slot: float = 0.0


_STYLE = {
    "node": {"facecolor": "#e8eef7", "edgecolor": "#3b5b92", "boxstyle": "round,pad=0.02,rounding_size=0.08"},
    "input": {"facecolor": "#dff3e3", "edgecolor": "#2e7d32", "boxstyle": "round,pad=0.02,rounding_size=0.2"},
    "broken": {"facecolor": "#fbe3e3", "edgecolor": "#c62828", "boxstyle": "round,pad=0.02,rounding_size=0.08"},
    "output": {"facecolor": "#fde8d7", "edgecolor": "#c25e00", "boxstyle": "round,pad=0.02,rounding_size=0.2"},
}


def draw(
    model: ModelLike,
    *,
    max_nodes: int = 40,
    show_shapes: bool = True,
    title: str | None = None,
) -> Figure:
    """Draw the main graph as boxes and arrows with matplotlib and return the Figure (notebook 01).

    Layout: one row per topological layer (graph inputs on top, each output below the node that
    makes it); long graphs wrap into side-by-side columns of 12 layers. Nodes
    show their op type (and name when short); weights (initializers) are folded into the node
    box with their shapes; edges carry the tensor shapes that shape inference knows (shown
    without a dtype for float32). Models with more than ``max_nodes`` nodes are cut after the
    first ``max_nodes`` nodes (in file order, which is topological) and the figure says how
    many nodes, and of which ops, were left out. In a notebook, end the cell with
    ``plt.show()`` (the figure belongs to pyplot) so that the picture is shown exactly once.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    if not isinstance(max_nodes, int) or isinstance(max_nodes, bool) or max_nodes < 1:
        raise ValueError(f"max_nodes must be a positive int, got {max_nodes!r}")
    proto = load_model(model)
    graph = proto.graph
    known = _known_types(proto) if show_shapes else {}
    init_names = {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    init_shapes = {t.name: (tuple(t.dims), dtype_name(t.data_type)) for t in graph.initializer}

    all_nodes = list(graph.node)
    nodes = all_nodes[:max_nodes]
    left_out = all_nodes[max_nodes:]

    boxes: list[_Box] = []
    producer: dict[str, int] = {}  # tensor name -> box index
    edges: list[tuple[int, int, str]] = []  # (from box, to box, tensor name)

    for value in graph.input:
        if value.name in init_names:
            continue
        producer[value.name] = len(boxes)
        info = _value_info(value)
        boxes.append(_Box(value.name, f"input {_short(value.name, 18)}\n{info.dtype}{info.shape_text}", "input", 0))

    for node in nodes:
        layer = 1
        sources: list[tuple[int, str]] = []
        weights: list[str] = []
        missing: list[str] = []
        for name in node.input:
            if not name:
                continue  # an omitted optional input
            if name in producer:
                sources.append((producer[name], name))
                layer = max(layer, boxes[producer[name]].layer + 1)
            elif name in init_names:
                dims, dtype = init_shapes.get(name, (None, "float32"))
                shape = "×".join(map(str, dims)) if dims else "scalar"
                kind = "" if dtype == "float32" else f"{dtype} "
                weights.append(f"{_short(name, 22)} {kind}{shape}" if dims is not None else _short(name, 22))
            else:
                missing.append(name)
        lines = [node.op_type]
        if node.name and len(node.name) <= 18 and node.name != node.op_type:
            lines[0] += f"  ({node.name})"
        subgraphs = sum(
            1 if a.type == onnx.AttributeProto.GRAPH else len(a.graphs)
            for a in node.attribute
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        )
        if subgraphs:
            lines.append(f"{subgraphs} subgraph{'s' if subgraphs > 1 else ''}")
        lines += weights[:2]
        if len(weights) > 2:
            lines.append(f"+{len(weights) - 2} more weights")
        if missing:
            lines.append("missing input: " + _short(", ".join(missing), 20))
        index = len(boxes)
        boxes.append(_Box(node.name or f"#{index}", "\n".join(lines), "broken" if missing else "node", layer))
        edges += [(source, index, name) for source, name in sources]
        for name in node.output:
            if name:
                producer[name] = index

    for value in graph.output:
        if value.name not in producer:
            continue  # produced by a node that was left out
        source = producer[value.name]
        info = known.get(value.name) or _value_info(value)
        index = len(boxes)
        label = f"output {_short(value.name, 18)}\n{info.dtype}{info.shape_text}"
        boxes.append(_Box(value.name, label, "output", boxes[source].layer + 1))
        edges.append((source, index, value.name))

    # order boxes inside each layer by the mean slot of their sources (one barycentre pass)
    layers: dict[int, list[int]] = {}
    for index, box in enumerate(boxes):
        layers.setdefault(box.layer, []).append(index)
    incoming: dict[int, list[int]] = {}
    for source, target, _ in edges:
        incoming.setdefault(target, []).append(source)
    width = max(len(members) for members in layers.values()) if layers else 1
    for layer in sorted(layers):
        members = layers[layer]
        if layer > 0:
            members.sort(
                key=lambda i: sum(boxes[s].slot for s in incoming.get(i, [])) / max(len(incoming.get(i, [])), 1)
            )
        offset = (width - len(members)) / 2
        for position, index in enumerate(members):
            boxes[index].slot = offset + position

    n_layers = (max(layers) + 1) if layers else 1
    # long graphs wrap into columns of at most `rows` layers (read top to bottom, then left to right)
    rows = n_layers if n_layers <= 16 else 12
    columns = math.ceil(n_layers / rows)
    column_width = width + 0.7
    box_w, box_h = 0.86, 0.56
    fig_w = min(max(5.0, 2.3 * width * columns + 0.6 * (columns - 1)), 18.0)
    fig_h = max(2.5, 1.05 * rows + (0.4 if left_out else 0.0) + 0.5)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    ax.set_xlim(-0.55, (columns - 1) * column_width + width - 0.45)
    ax.set_ylim(rows - 0.35, -0.6)
    ax.axis("off")
    # text is sized in points: shrink it when a box is narrower than the ~2 inches it was designed for
    slot_inches = fig_w / ((columns - 1) * column_width + width + 0.1)
    scale = max(0.6, min(1.0, slot_inches / 2.0))

    def centre(box: _Box) -> tuple[float, float]:
        column, row = divmod(box.layer, rows)
        return column * column_width + box.slot, float(row)

    for source, target, name in edges:
        (x0, y0), (x1, y1) = centre(boxes[source]), centre(boxes[target])
        span = boxes[target].layer - boxes[source].layer
        source_column = boxes[source].layer // rows
        wraps = boxes[target].layer // rows != source_column
        start = (x0, y0 + box_h / 2)
        if wraps:  # route through the gap right of the source column, over the top, into the target
            gap_x = source_column * column_width + (width - 1) + box_w / 2 + (column_width - (width - 1) - box_w) / 2
            bottom, top = rows - 1 + box_h / 2 + 0.1, -box_h / 2 - 0.2
            xs, ys = [x0, x0, gap_x, gap_x, x1], [start[1], bottom, bottom, top, top]
            ax.plot(xs, ys, color="#999999", lw=0.9, zorder=1, solid_joinstyle="round")
            start = (x1, top)
        ax.annotate(
            "",
            xy=(x1, y1 - box_h / 2),
            xytext=start,
            arrowprops={
                "arrowstyle": "-|>",
                "color": "#999999" if wraps else "#555555",
                "lw": 0.9,
                "shrinkA": 0,
                "shrinkB": 1,
                "connectionstyle": f"arc3,rad={0.25 if span > 1 and not wraps else 0.0}",
            },
            zorder=1,
        )
        label = _shape_label(known.get(name)) if boxes[target].kind != "output" else ""
        if label and not wraps:
            mx, my = (x0 + x1) / 2, (y0 + y1) / 2
            if span > 1:
                mx += 0.12 * span * (1 if x1 >= x0 else -1) * 0.5
            ax.text(
                mx, my, label, ha="center", va="center", fontsize=7 * scale, color="#333333", zorder=3,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.9},
            )

    for box in boxes:
        x, y = centre(box)
        ax.add_patch(
            FancyBboxPatch(
                (x - box_w / 2, y - box_h / 2), box_w, box_h, linewidth=1.1, zorder=2, mutation_aspect=1.0,
                **_STYLE[box.kind],
            )
        )
        lines = box.label.split("\n")
        ax.text(x, y, lines[0], ha="center", va="center" if len(lines) == 1 else "bottom",
                fontsize=8.5 * scale, fontweight="bold" if box.kind in ("node", "broken") else "normal", zorder=4)
        if len(lines) > 1:
            ax.text(x, y + 0.02, "\n".join(lines[1:]), ha="center", va="top", fontsize=6.8 * scale, color="#333333",
                    zorder=4, linespacing=1.1)

    heading = title if title is not None else f"{graph.name or 'graph'}: {len(all_nodes)} nodes"
    ax.set_title(heading, fontsize=10, loc="left")
    if left_out:
        counts = Counter(node.op_type for node in left_out).most_common(6)
        ops = ", ".join(f"{op} {count}" for op, count in counts)
        more = ", ..." if len(Counter(node.op_type for node in left_out)) > 6 else ""
        fig.text(
            0.01, 0.005,
            f"showing the first {len(nodes)} of {len(all_nodes)} nodes; {len(left_out)} not drawn ({ops}{more}); "
            f"pass max_nodes= to draw more",
            fontsize=8, color="#a33", ha="left", va="bottom",
        )
    fig.tight_layout()
    return fig
