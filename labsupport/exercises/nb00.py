"""Exercises of notebook 00 (how exercises work)."""

from __future__ import annotations

import numpy as np

from labsupport.course.data import PIXEL_MAX, load_digits
from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import expect_value, whole_number

# a bright image (its maximum is 16) and a faint one (maximum 8): dividing by the image's own maximum fails the second;
# odd pixels (1, 7, 15) catch an answer that halves first and so loses the last bit, (p // 2) / 8
SCALE_INPUTS = (
    np.array([[0, 8, 16], [4, 12, 2], [1, 7, 15]], dtype=np.uint8),
    np.array([[0, 4, 8]], dtype=np.uint8),
)
for _raw in SCALE_INPUTS:
    _raw.setflags(write=False)  # the answer gets a copy: an in-place answer cannot change what later checks feed


def _check_scale(scale) -> str:
    if not callable(scale):
        raise Incorrect(f"expected a function pixels -> array, got {type(scale).__name__}")
    for raw in SCALE_INPUTS:
        _check_scaled(raw, scale(raw.copy()))
    return "pixels 0..16 map to float32 0..1"


def _check_scaled(raw: np.ndarray, result: object) -> None:
    out = np.asarray(result)
    if not np.issubdtype(out.dtype, np.number):
        raise Incorrect(f"expected an array of numbers, got {type(result).__name__} of {out.dtype}")
    if out.shape != raw.shape:
        raise Incorrect(f"the output shape must equal the input's {raw.shape}, got {out.shape}")
    if not np.allclose(out, raw / PIXEL_MAX):
        row = next(i for i in range(len(raw)) if not np.allclose(out[i], raw[i] / PIXEL_MAX))
        gap = float(np.max(np.abs(out[row] - raw[row] / PIXEL_MAX)))
        shown = (
            f"for the row {raw[row].tolist()} it gave {_rounded(out[row])}, expected {_rounded(raw[row] / PIXEL_MAX)} "
            f"(largest difference {gap:.2g})"
        )
        if _rescaled_by_itself(raw, out, row):
            shown += f"; divide by the fixed maximum {PIXEL_MAX:g}, not by this image's (or row's) own maximum or range"
        raise Incorrect(f"pixels 0..{PIXEL_MAX:g} must map to 0..1: {shown}")
    if out.dtype != np.float32:
        container = "; a Python list has no float32 dtype, return a NumPy array" if isinstance(result, (list, tuple)) else ""
        raise Incorrect(f"the output must be float32 (what ONNX models take), got {out.dtype}{container}")


def _rescaled_by_itself(raw: np.ndarray, out: np.ndarray, row: int) -> bool:
    """Whether ``out[row]`` is ``raw[row]`` divided by the image's or the row's own maximum, or min-max rescaled by either."""
    pixels = raw.astype(np.float64)
    candidates = []
    for scope in (pixels, pixels[row]):
        low, high = scope.min(), scope.max()
        candidates += [pixels[row] / max(high, 1), (pixels[row] - low) / max(high - low, 1)]
    return any(np.allclose(out[row], candidate) for candidate in candidates)


def _rounded(values: np.ndarray) -> str:
    """The values to float32's 7 significant digits: a difference the check sees is a difference the message shows."""
    return "[" + ", ".join(f"{float(v):.7g}" for v in values) + "]"


COUNTED_DIGIT = 8  # the one digit whose test count no other digit shares


def _other_digits_reason(per_digit: np.ndarray, count: int) -> str:
    digits = ", ".join(str(digit) for digit in np.flatnonzero(per_digit == count))
    return f"{count} is the test count of another digit ({digits}); count the {COUNTED_DIGIT}s"


def _check_count(count) -> str:
    digits = load_digits()
    per_digit = np.bincount(digits.test.labels, minlength=10)
    truth = int(per_digit[COUNTED_DIGIT])
    others = [(int(n), _other_digits_reason(per_digit, int(n))) for n in sorted(set(per_digit.tolist()) - {truth})]
    expect_value(
        whole_number(count, "count"),
        truth,
        mistakes=[
            (
                int(np.sum(digits.train.labels == COUNTED_DIGIT)),
                "that is the count in the *train* split; the question asks about the test split",
            ),
            (len(digits.test.labels), "that is the size of the whole test split; count only one digit"),
            *others,
        ],
        wrong=f"{count} is not the number of {COUNTED_DIGIT}s in the test split",
    )
    return f"{truth} test images show an {COUNTED_DIGIT}"


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
    hint="load_digits().test.labels is an array of class numbers; compare it with 8 and sum.",
    solution_code="""
        from labsupport.course.data import load_digits

        answer = int((load_digits().test.labels == 8).sum())
    """,
)

EXERCISES = [q1, q2]
