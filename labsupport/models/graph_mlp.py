"""``mlp``: a multi-layer perceptron built node by node with a Python loop, as an exporter writes one (notebook 01, section 9).

Its weights are random: notebook 01 and its exercise 3 (``mystery_model``) read and draw these graphs,
nothing trains them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import pairwise

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from labsupport.models.contract import IR_VERSION, OPSET


def _dense_layer(index: int, source: str, n_in: int, n_out: int, rng: np.random.Generator, *, gemm: bool):
    """Nodes and weights of layer ``index`` (``fc{index}``): MatMul + Add, or one Gemm; its output is ``fc{index}.out``."""
    weight = numpy_helper.from_array(rng.standard_normal((n_in, n_out)).astype(np.float32), f"fc{index}.weight")
    bias = numpy_helper.from_array(np.zeros(n_out, np.float32), f"fc{index}.bias")
    out = f"fc{index}.out"
    if gemm:
        return [helper.make_node("Gemm", [source, weight.name, bias.name], [out], name=f"fc{index}.gemm")], [weight, bias]
    nodes = [
        helper.make_node("MatMul", [source, weight.name], [f"fc{index}.mm"], name=f"fc{index}.matmul"),
        helper.make_node("Add", [f"fc{index}.mm", bias.name], [out], name=f"fc{index}.add"),
    ]
    return nodes, [weight, bias]


def mlp(
    sizes: Sequence[int], *, name: str = "mlp", seed: int = 1, gemm_layers: Collection[int] = (), probabilities: bool = True
) -> onnx.ModelProto:
    """A multi-layer perceptron built node by node with a Python loop, as an exporter writes one (notebook 01, section 9).

    ``sizes`` are the widths from the input ``x`` to the output; every layer but the last is followed
    by a Relu; the layers listed in ``gemm_layers`` are one Gemm node instead of MatMul + Add. With
    ``probabilities`` the output ``probs`` is a Softmax of the last layer, else the output is the last
    layer's ``fc{N}.out``. Exercise 3's ``mystery_model`` is one of these.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = []
    current = "x"
    for index, (n_in, n_out) in enumerate(pairwise(sizes)):
        layer_nodes, layer_weights = _dense_layer(index, current, n_in, n_out, rng, gemm=index in gemm_layers)
        nodes += layer_nodes
        weights += layer_weights
        current = f"fc{index}.out"
        if index < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [current], [f"fc{index}.act"], name=f"fc{index}.relu"))
            current = f"fc{index}.act"
    if probabilities:
        nodes.append(helper.make_node("Softmax", [current], ["probs"], name="softmax", axis=-1))
        current = "probs"
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, ["batch", sizes[-1]])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
