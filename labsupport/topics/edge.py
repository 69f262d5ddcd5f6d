"""What the edge runtimes of notebook 09 share: the images they read and the reference they are compared with.

The browser page (``labsupport.topics.web``), the Node.js programs (``labsupport.topics.nodejs``)
and the mobile ``.ort`` files (``labsupport.topics.mobile``) run the course model outside Python;
``write_images_json`` writes test images in the JSON shape the page and ``classify.js`` read, and
``python_reference`` gives ONNX Runtime's answers in Python on the CPU, the yardstick for each.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.course.compare import softmax
from labsupport.onnxutil.sessions import open_session

PIXELS = 64  # one 8x8 digit, flattened row by row


def as_flat_images(images: Any) -> np.ndarray:
    """(N, 1, 8, 8) or (N, 64) images as (N, 64) float32 rows; ValueError for any other shape or a non-finite pixel."""
    array = np.asarray(images, dtype=np.float32)
    if array.ndim == 4 and array.shape[1:] == (1, 8, 8):
        array = array.reshape(len(array), PIXELS)
    if array.ndim != 2 or array.shape[1] != PIXELS or len(array) == 0:
        raise ValueError(f"images must have shape (N, 1, 8, 8) or (N, 64) with N >= 1, got {np.shape(images)}")
    if not np.all(np.isfinite(array)):
        raise ValueError("images contain NaN or infinity; pixels must be finite numbers in [0, 1]")
    return array


def images_payload(images: Any, labels: Sequence[int] | None = None) -> dict[str, Any]:
    """The JSON document that ``classify.js`` and the web page read: ``{"images": [[64 floats], ...], "labels": [...]}``."""
    flat = as_flat_images(images)
    payload: dict[str, Any] = {"images": [[float(v) for v in row] for row in flat]}
    if labels is not None:
        labels = [int(label) for label in labels]
        if len(labels) != len(flat):
            raise ValueError(f"got {len(labels)} labels for {len(flat)} images")
        payload["labels"] = labels
    return payload


def write_images_json(images: Any, path: str | os.PathLike[str], labels: Sequence[int] | None = None) -> Path:
    """Write (N, 1, 8, 8) or (N, 64) images (and optional labels) as the JSON file ``classify.js`` reads; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(images_payload(images, labels)), encoding="utf-8")
    return path


def python_reference(model_path: str | os.PathLike[str], images: Any) -> dict[str, np.ndarray]:
    """Logits, probabilities and predictions of ONNX Runtime in Python on the CPU: the reference for every other runtime."""
    session = open_session(model_path)
    flat = as_flat_images(images)
    logits = session.run(None, {session.get_inputs()[0].name: flat.reshape(-1, 1, 8, 8)})[0]
    probabilities = softmax(logits)
    return {"logits": logits, "probabilities": probabilities, "predictions": probabilities.argmax(axis=1)}
