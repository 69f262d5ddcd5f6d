"""Pictures of ONNX graphs: ``draw`` lays a model out with Graphviz, ``view_in_netron`` opens it in Netron.

Introduced in notebook 01 and used wherever a notebook shows a graph (02, 03, 06, 07). ``draw``
needs Graphviz's ``dot`` program (``make`` and Binder install it; by hand: ``apt-get install
graphviz``, ``conda install graphviz`` or ``brew install graphviz``) and returns a ``GraphDrawing``,
which a notebook shows as SVG. ``view_in_netron`` serves a model to Netron's interactive viewer on
this machine; it needs no network. On JupyterHub or Binder it returns the viewer's address through the
hub. Both read paths without their external data, so large models draw quickly.
"""

from __future__ import annotations

import contextlib
import html
import logging
import os
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import onnx

from labsupport.course.addresses import browser_address, on_a_hub
from labsupport.onnxutil.graph import ModelLike, TensorInfo, dtype_name, load_model, tensor_info

if TYPE_CHECKING:  # pragma: no cover
    import graphviz

NO_DOT = (
    "Graphviz's `dot` program is not installed, and draw() needs it to lay the graph out: install it with "
    "`apt-get install graphviz` (Debian/Ubuntu), `conda install graphviz` or `brew install graphviz`, then run the cell again"
)
_FONT = "Helvetica"
_STYLES = {  # kind: (fill, border)
    "op": ("#e8eef7", "#3b5b92"),
    "quantize": ("#fff3d6", "#b7791f"),
    "broken": ("#fbe3e3", "#c62828"),
    "input": ("#dff3e3", "#2e7d32"),
    "output": ("#fde8d7", "#c25e00"),
}
_QUANTIZE_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
_WEIGHT_LINES = 2  # weights listed in a node; the rest are counted


@dataclass(frozen=True)
class GraphDrawing:
    """A drawn graph (from ``draw``): shows as SVG in a notebook, prints as one stable line, saves to a file."""

    title: str
    nodes_drawn: int
    nodes_total: int
    source: str = field(repr=False)  # the DOT text that Graphviz lays out

    def __repr__(self) -> str:
        return f"<GraphDrawing {self.title!r}: {self.nodes_drawn} of {self.nodes_total} nodes drawn>"

    @cached_property
    def svg(self) -> str:
        """The picture as SVG text (Graphviz runs once, on first use)."""
        return _render(self.source, "svg").decode("utf-8")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"image/svg+xml": self.svg, "text/plain": repr(self)}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the drawing as ``.svg``, ``.png`` or ``.pdf`` (by the suffix of ``path``); returns the path."""
        path = Path(path)
        kind = path.suffix.lower().lstrip(".")
        if kind not in ("svg", "png", "pdf"):
            raise ValueError(f"save() writes .svg, .png or .pdf files, got {path.name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.svg.encode("utf-8") if kind == "svg" else _render(self.source, kind))
        return path


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _html_label(head: str, lines: list[str], *, bold: bool = True) -> str:
    """A Graphviz HTML-like label: ``head`` on top (bold), ``lines`` below in small grey text."""
    top = f"<B>{_escape(head)}</B>" if bold else _escape(head)
    small = "".join(f'<BR/><FONT POINT-SIZE="9" COLOR="#444444">{_escape(line)}</FONT>' for line in lines)
    return f"<{top}{small}>"


def _shape_text(info: TensorInfo | None) -> str:
    """``[batch,4]`` for float32 (the common case), ``int8[batch,4]`` otherwise; empty when unknown."""
    if info is None or info.shape is None:
        return ""
    dims = ",".join("?" if dim is None else str(dim) for dim in info.shape)
    return f"{'' if info.dtype == 'float32' else info.dtype}[{dims}]"


def _weights(graph: onnx.GraphProto) -> dict[str, TensorInfo]:
    """The graph's initializers (dense and sparse) by name."""
    weights = {t.name: TensorInfo(t.name, dtype_name(t.data_type), tuple(t.dims)) for t in graph.initializer}
    weights |= {s.values.name: TensorInfo(s.values.name, dtype_name(s.values.data_type), tuple(s.dims)) for s in graph.sparse_initializer}
    return weights


def _known_types(proto: onnx.ModelProto) -> dict[str, TensorInfo]:
    """Types of every named tensor, after shape inference when it succeeds."""
    inferred = proto
    with contextlib.suppress(Exception):  # broken or > 2 GB models: draw what the file already declares
        inferred = onnx.shape_inference.infer_shapes(proto)  # a new model; ``proto`` is left as it was
    graph = inferred.graph
    known = _weights(graph)
    for value in (*graph.value_info, *graph.input, *graph.output):
        known[value.name] = tensor_info(value)
    return known


def _weight_text(info: TensorInfo) -> str:
    """A weight as name, dtype (unless float32) and dims joined by a multiplication sign, or ``scalar``."""
    dims = "\N{MULTIPLICATION SIGN}".join(str(dim) for dim in info.shape or ()) or "scalar"
    dtype = "" if info.dtype == "float32" else f"{info.dtype} "
    return f"{_short(info.name, 24)} {dtype}{dims}"


def _weight_lines(weights: list[TensorInfo]) -> list[str]:
    """The first arrays a node reads, then a count of the other arrays and of the scalars (scales, zero points)."""
    arrays = [info for info in weights if info.shape]
    lines = [_weight_text(info) for info in arrays[:_WEIGHT_LINES]]
    others = [f"{len(arrays) - _WEIGHT_LINES} more weights"] if len(arrays) > _WEIGHT_LINES else []
    scalars = len(weights) - len(arrays)
    if scalars:
        others.append(f"{scalars} scalar{'s' if scalars > 1 else ''}")
    if others:
        lines.append(("+" if lines else "") + ", ".join(others))
    return lines


def _subgraph_count(node: onnx.NodeProto) -> int:
    return sum(
        1 if attribute.type == onnx.AttributeProto.GRAPH else len(attribute.graphs)
        for attribute in node.attribute
        if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    )


def _node_label(node: onnx.NodeProto, weights: list[TensorInfo], missing: list[str]) -> str:
    """Op type in bold; below: the node's name (not for Q/DQ, whose names repeat their tensor's), domain, subgraphs, weights."""
    lines = []
    if node.name and node.name != node.op_type and len(node.name) <= 24 and node.op_type not in _QUANTIZE_OPS:
        lines.append(node.name)
    if node.domain not in ("", "ai.onnx"):
        lines.append(node.domain)
    subgraphs = _subgraph_count(node)
    if subgraphs:
        lines.append(f"{subgraphs} subgraph{'s' if subgraphs > 1 else ''}")
    lines += _weight_lines(weights)
    if missing:
        lines.append("missing input: " + _short(", ".join(missing), 28))
    return _html_label(node.op_type, lines)


def _new_digraph(name: str, heading: str) -> graphviz.Digraph:
    import graphviz

    return graphviz.Digraph(
        name=name or "graph",
        graph_attr={
            "rankdir": "TB",
            "nodesep": "0.25",
            "ranksep": "0.12",
            "fontname": _FONT,
            "fontsize": "12",
            "labelloc": "t",
            "labeljust": "l",
            "label": heading,
            "bgcolor": "white",
        },
        node_attr={"shape": "box", "style": "rounded,filled", "fontname": _FONT, "fontsize": "11", "margin": "0.12,0.04", "height": "0.3"},
        edge_attr={"fontname": _FONT, "fontsize": "8", "fontcolor": "#333333", "color": "#555555", "arrowsize": "0.6"},
    )


def _add_box(dot: graphviz.Digraph, key: str, label: str, kind: str) -> None:
    fill, border = _STYLES[kind]
    dot.node(key, label=label, fillcolor=fill, color=border)


def _heading(title: str, left_out: list[onnx.NodeProto], drawn: int, total: int) -> str:
    """The graph's title, and in red what was left out when the graph was cut at ``max_nodes``."""
    if not left_out:
        return f"<<B>{_escape(title)}</B>>"
    counts = Counter(node.op_type for node in left_out)
    ops = ", ".join(f"{op} {count}" for op, count in counts.most_common(6)) + (", ..." if len(counts) > 6 else "")
    note = f"showing the first {drawn} of {total} nodes; {len(left_out)} not drawn ({ops}); pass max_nodes= to draw more"
    return f'<<B>{_escape(title)}</B><BR ALIGN="LEFT"/><FONT POINT-SIZE="9" COLOR="#a33333">{_escape(note)}</FONT><BR ALIGN="LEFT"/>>'


def _draw_nodes(dot: graphviz.Digraph, graph: onnx.GraphProto, nodes: list[onnx.NodeProto], known: dict[str, TensorInfo]) -> dict[str, str]:
    """Add the graph inputs and ``nodes`` with their edges; returns which box produces each tensor."""
    weights = _weights(graph)
    producer: dict[str, str] = {}
    for index, value in enumerate(v for v in graph.input if v.name not in weights):
        info = known.get(value.name) or tensor_info(value)
        producer[value.name] = f"input{index}"
        _add_box(dot, f"input{index}", _html_label(value.name, [f"{info.dtype}{info.shape_text}"]), "input")
    for index, node in enumerate(nodes):
        key = f"node{index}"
        names = [name for name in node.input if name]  # "" is an omitted optional input
        missing = [name for name in names if name not in producer and name not in weights]
        kind = "broken" if missing else ("quantize" if node.op_type in _QUANTIZE_OPS else "op")
        _add_box(dot, key, _node_label(node, [weights[name] for name in names if name in weights], missing), kind)
        for name in names:
            if name in producer:
                dot.edge(producer[name], key, label=_shape_text(known.get(name)))
        producer |= {name: key for name in node.output if name}
    return producer


def _render(source: str, kind: str) -> bytes:
    """Run Graphviz's ``dot`` on DOT text and return the picture in format ``kind`` (svg, png, pdf)."""
    import graphviz

    try:
        return graphviz.Source(source).pipe(format=kind)
    except graphviz.ExecutableNotFound:
        raise RuntimeError(NO_DOT) from None


def draw(model: ModelLike, *, max_nodes: int = 40, show_shapes: bool = True, title: str | None = None) -> GraphDrawing:
    """Draw the main graph top to bottom with Graphviz; a notebook shows the returned GraphDrawing as SVG (notebook 01).

    Graph inputs are green, operators blue (quantize/dequantize ops amber, a node with a missing
    input red), outputs orange. Each operator shows its op type in bold, its name and domain, and
    the weights (initializers) it reads, folded into the box; edges carry the tensor shapes that
    shape inference knows (no dtype shown for float32). A model with more than ``max_nodes`` nodes
    is cut after the first ``max_nodes`` (file order, which is topological), and the heading says
    how many nodes, and of which ops, were left out. End a cell with the call, or ``display()`` it;
    Graphviz lays it out when it is first shown (``.svg``) or saved.
    """
    if not isinstance(max_nodes, int) or isinstance(max_nodes, bool) or max_nodes < 1:
        raise ValueError(f"max_nodes must be a positive int, got {max_nodes!r}")
    if shutil.which("dot") is None:
        raise RuntimeError(NO_DOT)
    proto = load_model(model)
    graph = proto.graph
    nodes, left_out = list(graph.node[:max_nodes]), list(graph.node[max_nodes:])
    heading = title if title is not None else f"{graph.name or 'graph'}: {len(graph.node)} nodes"
    dot = _new_digraph(graph.name, _heading(heading, left_out, len(nodes), len(graph.node)))
    known = _known_types(proto) if show_shapes else {}
    producer = _draw_nodes(dot, graph, nodes, known)
    for index, value in enumerate(v for v in graph.output if v.name in producer):
        info = known.get(value.name) or tensor_info(value)
        _add_box(dot, f"output{index}", _html_label(value.name, [f"{info.dtype}{info.shape_text}"]), "output")
        dot.edge(producer[value.name], f"output{index}")
    return GraphDrawing(heading, len(nodes), len(graph.node), dot.source)


NOT_THROUGH_THE_HUB = (
    "this kernel runs on a JupyterHub or Binder server, whose 127.0.0.1 is not your computer: Netron's viewer "
    "would be out of your browser's reach, and jupyter-server-proxy, which forwards it through the hub, is not "
    "installed here (pip install jupyter-server-proxy, then restart your server). Meanwhile: draw(model) shows "
    "the graph here, or download the .onnx file from the file browser and open it at https://netron.app."
)


def _address_for_the_browser(port: int) -> str:
    """Where the learner's browser reaches a server on this machine's ``port``: loopback, or through the hub."""
    address = browser_address(port)
    if address is None:
        raise RuntimeError(NOT_THROUGH_THE_HUB)
    return address


def view_in_netron(model: ModelLike, *, port: int = 0) -> str:
    """Serve ``model`` to Netron's interactive viewer on this machine and return the URL to open (notebook 01).

    Netron (the ``netron`` package) runs in a thread of this Python process, on 127.0.0.1 at a free
    port it picks itself (or ``port``), and works offline: its web page ships in the package. No
    browser is opened: open the URL in a browser on the same machine (``make lab`` runs there). On
    JupyterHub or Binder the kernel runs elsewhere, so the URL is the viewer's path through the hub
    (``/user/NAME/proxy/PORT/``, jupyter-server-proxy), to open in the browser tab's own site; without
    jupyter-server-proxy it raises and says what to do instead.
    A ModelProto is saved under ``artifacts/netron/`` first. ``stop_netron(url)`` stops it.
    """
    import netron

    if on_a_hub():
        _address_for_the_browser(0)  # refuse before serving what the browser could not reach
    if isinstance(model, onnx.ModelProto):
        from labsupport.course.paths import artifact

        path = artifact(f"netron/{model.graph.name or 'model'}.onnx")
        onnx.save_model(model, path)
    else:
        load_model(model)  # a clear error for a wrong type, a missing file or one that is not an ONNX model
        path = Path(model)
    root = logging.getLogger()
    silence = logging.NullHandler()  # netron.serve() configures logging for the whole process when nothing is set up
    root.addHandler(silence)
    try:
        _, bound = netron.serve(str(path), None, address=("127.0.0.1", port), browse=False)
    finally:
        root.removeHandler(silence)
    return _address_for_the_browser(bound)


def _port_of(url: str) -> int:
    """The port of a URL that ``view_in_netron`` returned: ``http://127.0.0.1:PORT`` or ``.../proxy/PORT/``."""
    through_hub = re.search(r"/proxy/(\d+)/?$", url)
    port = int(through_hub.group(1)) if through_hub else urlparse(url).port
    if port is None:
        raise ValueError(f"not a Netron address from view_in_netron: {url!r}")
    return port


def stop_netron(url: str | None = None) -> None:
    """Stop the Netron viewer started at ``url`` by ``view_in_netron`` (every one of them when ``url`` is None)."""
    import netron

    netron.stop(None if url is None else ("127.0.0.1", _port_of(url)))
