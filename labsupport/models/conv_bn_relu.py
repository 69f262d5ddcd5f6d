"""A hand-built image model with every pattern ORT's graph optimizer fuses: the test bed of notebook 07.

``conv_bn_relu_model`` is what a naive exporter produces (BatchNorm kept, activations separate,
MatMul+Add instead of Gemm), so every fusion ORT knows for it has something to do.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from labsupport.models.contract import IR_VERSION, OPSET

NUM_CLASSES = 10


def _block(index: int, previous: str, in_channels: int, channels: int, rng: np.random.Generator) -> tuple[list, list]:
    """One Conv-BatchNormalization-Relu block: its nodes and its initializers (random, from ``rng``)."""
    values = {
        f"conv{index}.w": rng.normal(0, 0.3, (channels, in_channels, 3, 3)),
        f"conv{index}.b": rng.normal(0, 0.1, channels),
        f"bn{index}.scale": rng.uniform(0.5, 1.5, channels),
        f"bn{index}.bias": rng.normal(0, 0.1, channels),
        f"bn{index}.mean": rng.normal(0, 0.1, channels),
        f"bn{index}.var": rng.uniform(0.5, 1.5, channels),
    }
    names = list(values)
    nodes = [
        helper.make_node("Conv", [previous, *names[:2]], [f"conv{index}"], name=f"conv{index}", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", [f"conv{index}", *names[2:]], [f"bn{index}"], name=f"bn{index}"),
        helper.make_node("Relu", [f"bn{index}"], [f"relu{index}"], name=f"relu{index}"),
    ]
    return nodes, [numpy_helper.from_array(array.astype(np.float32), name) for name, array in values.items()]


def _head(previous: str, channels: int, rng: np.random.Generator) -> tuple[list, list]:
    """Global average pooling, Flatten and a MatMul+Add classifier over ``NUM_CLASSES`` classes."""
    weights = [
        numpy_helper.from_array(rng.normal(0, 0.3, (channels, NUM_CLASSES)).astype(np.float32), "head.w"),
        numpy_helper.from_array(np.zeros(NUM_CLASSES, np.float32), "head.b"),
    ]
    nodes = [
        helper.make_node("GlobalAveragePool", [previous], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
        helper.make_node("MatMul", ["features", "head.w"], ["scores"], name="head_matmul"),
        helper.make_node("Add", ["scores", "head.b"], ["logits"], name="head_add"),
    ]
    return nodes, weights


def conv_bn_relu_model(blocks: int = 4, channels: int = 16, size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """A hand-built image model of ``blocks`` Conv-BatchNorm-Relu blocks and a MatMul+Add head (notebook 07).

    Input ``x``: (N, 3, size, size) float32; output ``logits``: (N, 10). Deterministic for a ``seed``.
    """
    if blocks < 1 or channels < 1 or size < 1:
        raise ValueError(f"blocks, channels and size must be >= 1; got {blocks}, {channels}, {size}")
    rng = np.random.default_rng(seed)
    nodes, weights = [], []
    previous, in_channels = "x", 3
    for index in range(blocks):
        block_nodes, block_weights = _block(index, previous, in_channels, channels, rng)
        nodes += block_nodes
        weights += block_weights
        previous, in_channels = f"relu{index}", channels
    head_nodes, head_weights = _head(previous, channels, rng)
    graph = helper.make_graph(
        nodes + head_nodes,
        "conv_bn_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", NUM_CLASSES])],
        weights + head_weights,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="labsupport.models.conv_bn_relu"
    )
    onnx.checker.check_model(model, full_check=True)
    return model
