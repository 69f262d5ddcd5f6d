"""A stand-in for a bigger model: the digits' input and output, milliseconds of MatMul per inference.

Introduced in notebook 08, where a server whose time goes to inference is measured (handlers,
workers, dynamic batching), and used by ``python -m labsupport.bench service``. Input ``image``
(N, 1, 8, 8) -> ``logits`` (N, 10) like the digits CNN, so the service serves either unchanged;
its random (seeded) weights make its predictions meaningless.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from labsupport.course.paths import artifact
from labsupport.models.contract import IMAGE_SHAPE, INPUT_NAME, IR_VERSION, NUM_CLASSES, OPSET, OUTPUT_NAME

ONNX_NAME = "08_heavy_classifier.onnx"
PIXELS = int(np.prod(IMAGE_SHAPE))


def _weights(hidden: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w_in": rng.normal(0, 1 / 8, (PIXELS, hidden)).astype(np.float32),
        "w_hidden": (rng.normal(0, 1 / np.sqrt(hidden), (hidden, hidden)) * np.sqrt(2)).astype(np.float32),
        "w_out": rng.normal(0, 1 / np.sqrt(hidden), (hidden, NUM_CLASSES)).astype(np.float32),
        "flat_shape": np.array([-1, PIXELS], dtype=np.int64),
    }


def _nodes(layers: int) -> list:
    from onnx import helper

    nodes = [helper.make_node("Reshape", [INPUT_NAME, "flat_shape"], ["x0"]), helper.make_node("MatMul", ["x0", "w_in"], ["h0"])]
    for i in range(layers):
        nodes += [helper.make_node("Relu", [f"h{i}"], [f"r{i}"]), helper.make_node("MatMul", [f"r{i}", "w_hidden"], [f"h{i + 1}"])]
    nodes.append(helper.make_node("MatMul", [f"h{layers}", "w_out"], [OUTPUT_NAME]))
    return nodes


def write_heavy_classifier(path: str | Path | None = None, hidden: int = 2048, layers: int = 8, seed: int = 0) -> Path:
    """Write the stand-in (default ``artifacts/08_heavy_classifier.onnx``): ``layers`` MatMul+Relu of width ``hidden``.

    The hidden layers share one weight matrix, so the file stays small (17 MB by default) while one
    inference costs ``layers * hidden**2`` multiply-adds. Seeded: the same arguments write the same
    model. Notebook 08.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if not 1 <= layers <= 64 or not 8 <= hidden <= 4096:
        raise ValueError(f"layers must be 1..64 and hidden 8..4096, got layers={layers}, hidden={hidden}")
    graph = helper.make_graph(
        _nodes(layers),
        "heavy_classifier",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", *IMAGE_SHAPE])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", NUM_CLASSES])],
        [numpy_helper.from_array(value, name) for name, value in _weights(hidden, seed).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name=__name__)
    onnx.checker.check_model(model)
    path = Path(path) if path is not None else artifact(ONNX_NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path
