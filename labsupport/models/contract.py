"""What the course's models agree on: the opset and IR version of hand-built graphs, and the digits task.

Hand-built and generated graphs (notebooks 01, 07, 08, 10 and their exercises) use ``OPSET`` and
``IR_VERSION``, so one edit moves them all. Exports keep their tool's choice on purpose: the torch
exporter's default opset (notebook 02 shows which) and the converters' targets (03, 04).

The digits models of notebooks 02 (PyTorch) and 03 (Keras) are twins: the same input and output
(what the service of notebook 08 and the web demo of 09 feed and read) and the same training recipe.
Every digits model, whatever made it, is scored the same way: ``accuracy(logits, labels)``, with
``onnx_logits(model, split)`` for an ONNX file.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from labsupport.course.data import Split, load_digits
from labsupport.onnxutil.graph import ModelLike
from labsupport.onnxutil.sessions import open_session

OPSET = 21
IR_VERSION = 10

INPUT_NAME = "image"  # float32 (N, 1, 8, 8), pixels in [0, 1]
OUTPUT_NAME = "logits"  # float32 (N, 10)
IMAGE_SHAPE = (1, 8, 8)
NUM_CLASSES = 10

SEED = 0
BATCH_SIZE = 32
LEARNING_RATE = 3e-3


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of rows whose largest logit is the label's class (notebooks 02, 03, 06, 10)."""
    return float(np.mean(np.asarray(logits).argmax(axis=1) == np.asarray(labels)))


def onnx_logits(model: ModelLike, split: Split | None = None, *, config: Mapping[str, str] | None = None, threads: int = 1) -> np.ndarray:
    """The logits of a digits ONNX model on ``split`` (default: the test split): images or flat rows, by its input's rank.

    One thread by default, so the numbers do not depend on the machine; ``config`` holds session
    config entries, e.g. ``labsupport.course.kernels.U8U8`` for ORT's U8U8 integer kernels (notebook 06).
    """
    split = split if split is not None else load_digits().test
    if not isinstance(split, Split):
        raise TypeError(f"expected a labsupport.course.data Split such as load_digits().test, got {type(split).__name__}")
    session = open_session(model, threads=threads, config=config)
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise ValueError(f"expected a model with one input, got {[i.name for i in inputs]}")
    data = split.flat if len(inputs[0].shape) == 2 else split.images
    return session.run(None, {inputs[0].name: data})[0]
