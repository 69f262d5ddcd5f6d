"""Exercises of notebook 06 (quantization)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np

from labsupport.data import load_digits
from labsupport.exercises import Exercise, Incorrect

BROKEN_PERCENTILE = 80.0  # exercise 2: Percentile calibration that clips the top 20% of every activation
RESTORE_THRESHOLD = 0.97
MAX_BATCHES = 10_000


def _sorted_rows(images: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(images.reshape(len(images), -1))
    return flat[np.lexsort(flat.T[::-1])]


def _check_reader(reader) -> str:
    if not hasattr(reader, "get_next") or not callable(reader.get_next):
        raise Incorrect(f"expected a CalibrationDataReader instance (an object with get_next()), got {type(reader).__name__}")
    if isinstance(reader, type):
        raise Incorrect("that is the class; pass an instance: answer = YourReader()")
    batches = []
    for _ in range(MAX_BATCHES):
        item = reader.get_next()
        if item is None:
            break
        batches.append(item)
    else:
        raise Incorrect(f"get_next() never returned None after {MAX_BATCHES} batches; it must return None when the split is used up")
    if not batches:
        raise Incorrect("the first get_next() already returned None: the reader yields no data")
    arrays = []
    for number, item in enumerate(batches):
        if not isinstance(item, dict) or set(item) != {"image"}:
            got = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise Incorrect(f"batch {number} must be a dict {{'image': array}} (the CNN's input name), got {got}")
        array = np.asarray(item["image"])
        if array.dtype != np.float32 or array.ndim != 4 or array.shape[1:] != (1, 8, 8):
            raise Incorrect(f"batch {number} must be a float32 array of shape (N, 1, 8, 8), got {array.dtype} {array.shape}")
        arrays.append(array)
    sizes = sorted({len(a) for a in arrays})
    if len(sizes) > 1:
        raise Incorrect(f"batches have different sizes {sizes}; Entropy/Percentile calibration needs equal batches (180 = 9 x 20)")
    fed = np.concatenate(arrays)
    digits = load_digits()
    for name in ("test", "train"):
        other = getattr(digits, name).images
        if len(fed) == len(other) and np.array_equal(_sorted_rows(fed), _sorted_rows(other)):
            raise Incorrect(f"this is the {name} split; calibrate on the calibration split (load_digits().calibration)")
    expected = digits.calibration.images
    if len(fed) != len(expected) or not np.array_equal(_sorted_rows(fed), _sorted_rows(expected)):
        raise Incorrect(f"the reader fed {len(fed)} images; it must feed each of the {len(expected)} calibration images exactly once")
    return f"{len(arrays)} equal batches of {sizes[0]} calibration images"


@functools.lru_cache(maxsize=None)
def _mlp_preprocessed() -> str:
    from labsupport.paths import artifact
    from labsupport.quantization import ensure_digits_mlp, preprocess

    path = artifact("quantization/exercises/digits_mlp_pre.onnx")
    if not path.is_file():
        preprocess(ensure_digits_mlp(), path)
    return str(path)


def mlp_node_names() -> list[str]:
    """Node names of the pre-processed wide MLP (what ``nodes_to_exclude`` takes in exercise 2)."""
    import onnx

    return [node.name for node in onnx.load(_mlp_preprocessed()).graph.node]


@functools.lru_cache(maxsize=None)
def accuracy_excluding(node: str) -> float:
    """Test accuracy of the MLP after the exercise's Percentile-80 static INT8 with ``node`` left in FP32 ("" = none)."""
    from labsupport.quantization import accuracy, make_static_int8

    with tempfile.TemporaryDirectory() as folder:
        out = make_static_int8(
            _mlp_preprocessed(), Path(folder) / "mlp_int8.onnx", method="Percentile",
            extra_options={"CalibPercentile": BROKEN_PERCENTILE}, nodes_to_exclude=[node] if node else [],
        )
        return accuracy(out)


def _check_exclude(node) -> str:
    if isinstance(node, (list, tuple)):
        raise Incorrect("give one node name (a str), not a list: the point is to find the single node that matters")
    if not isinstance(node, str):
        raise Incorrect(f"expected a node name (str), got {type(node).__name__}")
    names = mlp_node_names()
    if node not in names:
        raise Incorrect(f"{node!r} is not a node of the pre-processed MLP; its nodes are {names}")
    restored = accuracy_excluding(node)
    if restored < RESTORE_THRESHOLD:
        raise Incorrect(
            f"leaving {node!r} in FP32 gives {restored:.1%}, below {RESTORE_THRESHOLD:.0%}; "
            "the SQNR table is a clue, not a proof: try each candidate and measure"
        )
    return f"without quantizing {node!r} the MLP is back at {restored:.1%}"


def _check_int4_gb(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise Incorrect(f"expected a number of GB, got {type(value).__name__}")
    value = float(value)
    truth = 13e9 * (4 + 16 / 32) / 8 / 1e9
    if abs(value - 13e9 * 4 / 8 / 1e9) < 0.05:
        raise Incorrect("that counts 4 bits per weight only; every block of 32 weights also stores a 16-bit scale")
    if abs(value - truth * 1e9 / 2**30) < 0.05:
        raise Incorrect("that is GiB (2**30 bytes); the question asks for GB (1e9 bytes)")
    if abs(value - truth) > 0.05:
        raise Incorrect(f"{value:.2f} GB is not it: bits per weight x parameters / 8 gives bytes")
    return f"{truth:.2f} GB: 4.5 bits per weight"


q1 = Exercise(
    1,
    "a calibration data reader over the calibration split",
    _check_reader,
    hint=(
        "Subclass onnxruntime.quantization.CalibrationDataReader. In __init__ make a list of "
        "{'image': batch} dicts from load_digits().calibration.images in slices of 20 (180 = 9 x 20) "
        "and keep an iterator; get_next() returns next(iterator, None)."
    ),
    solution_code="""
        from onnxruntime.quantization import CalibrationDataReader
        from labsupport.data import load_digits

        class CalibrationSplitReader(CalibrationDataReader):
            def __init__(self, batch_size=20):
                images = load_digits().calibration.images
                batches = [{"image": images[i:i + batch_size]} for i in range(0, len(images), batch_size)]
                self._batches = iter(batches)

            def get_next(self):
                return next(self._batches, None)

        answer = CalibrationSplitReader()
    """,
)

q2 = Exercise(
    2,
    "find the node to exclude that restores accuracy",
    _check_exclude,
    hint=(
        "mlp_node_names() lists the candidates. For each name, accuracy_excluding(name) quantizes the "
        "MLP with that node left in FP32 and returns the test accuracy; keep the one that reaches 97%."
    ),
    solution_code="""
        from labsupport.exercises.nb06 import accuracy_excluding, mlp_node_names

        scores = {name: accuracy_excluding(name) for name in mlp_node_names()}
        answer = max(scores, key=scores.get)
    """,
)

q3 = Exercise(
    3,
    "memory of a 13B model at INT4",
    _check_int4_gb,
    hint="INT4 with block size 32 and an FP16 scale per block stores 4 + 16/32 = 4.5 bits per weight.",
    solution_code="""
        from labsupport.quantization import weight_bytes

        answer = weight_bytes(13e9, bits=4, block_size=32) / 1e9
    """,
)

EXERCISES = [q1, q2, q3]
