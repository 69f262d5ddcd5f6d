"""Exercises of notebook 00 (how exercises work)."""

from __future__ import annotations

import numpy as np

from labsupport.course.data import PIXEL_MAX, load_digits
from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import expect_value, whole_number


def _check_scale(scale) -> str:
    if not callable(scale):
        raise Incorrect(f"expected a function pixels -> array, got {type(scale).__name__}")
    raw = np.array([[0, 8, 16], [4, 12, 2]], dtype=np.uint8)
    result = scale(raw)
    out = np.asarray(result)
    if not np.issubdtype(out.dtype, np.number):
        raise Incorrect(f"expected an array of numbers, got {type(result).__name__} of {out.dtype}")
    if out.shape != raw.shape:
        raise Incorrect(f"the output shape must equal the input's {raw.shape}, got {out.shape}")
    if not np.allclose(out, raw / PIXEL_MAX):
        raise Incorrect(f"pixels 0..16 must map to 0..1: scale([[0, 8, 16]]) gave {out[0].tolist()}")
    if out.dtype != np.float32:
        raise Incorrect(f"the output must be float32 (what ONNX models take), got {out.dtype}")
    return "pixels 0..16 map to float32 0..1"


def _check_count(count) -> str:
    digits = load_digits()
    truth = int(np.sum(digits.test.labels == 3))
    expect_value(
        whole_number(count, "count"),
        truth,
        mistakes=[
            (int(np.sum(digits.train.labels == 3)), "that is the count in the *train* split; the question asks about the test split")
        ],
        wrong=f"{count} is not the number of 3s in the test split",
    )
    return f"{truth} test images show a 3"


q1 = Exercise(
    1,
    "scale raw pixels",
    _check_scale,
    hint="Raw digit pixels run from 0 to 16. Divide by 16 and convert with .astype(np.float32).",
    solution_code="""
        import numpy as np

        def answer(pixels):
            return (np.asarray(pixels) / 16.0).astype(np.float32)
    """,
)

q2 = Exercise(
    2,
    "count a class in the test split",
    _check_count,
    hint="load_digits().test.labels is an array of class numbers; compare it with 3 and sum.",
    solution_code="""
        from labsupport.course.data import load_digits

        answer = int((load_digits().test.labels == 3).sum())
    """,
)

EXERCISES = [q1, q2]
