"""Numerical parity between two sets of outputs (a reference framework vs ONNX Runtime, say).

Introduced in notebook 01 and used by every conversion notebook. ``compare`` returns a
``ParityReport`` and raises ``ParityError`` (an AssertionError) with the figures when a tolerance
is exceeded, so a wrong export cannot pass silently.

The printed form of a passing report states the verdict against the tolerances, never the raw error:
the last digits of a float kernel differ between CPUs (AVX2, AVX-512, Arm NEON), so a printed error
would make a notebook output CPU-dependent. A failing report prints the errors rounded up to a
power of ten. The exact figures are attributes, and ``details`` formats them for an uncompared cell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ArrayLike = np.ndarray | Sequence[float]


class ParityError(AssertionError):
    """Two sets of outputs differ by more than the stated tolerances."""


def decade_bound(value: float) -> str:
    """The smallest power of ten >= value, as text ("0" for exact zero): a run-stable way to print an error."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    return f"1e{math.ceil(math.log10(value)):+03d}"


@dataclass(frozen=True)
class ParityReport:
    """Max absolute/relative error (relative to max(|expected|, atol)), tolerances, argmax agreement."""

    name: str
    count: int
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    argmax_agreement: float | None
    passed: bool

    def __str__(self) -> str:
        if self.passed:
            parts = [f"{self.name}: {self.count} values within tolerance"]
        else:
            parts = [
                f"{self.name}: {self.count} values",
                f"max abs err <= {decade_bound(self.max_abs)}",
                f"max rel err <= {decade_bound(self.max_rel)}",
            ]
        if self.argmax_agreement is not None:
            parts.append(f"argmax agreement {self.argmax_agreement:.2%}")
        verdict = "OK" if self.passed else "FAILED"
        return ", ".join(parts) + f" -> {verdict} (atol={self.atol:g}, rtol={self.rtol:g})"

    __repr__ = __str__

    @property
    def details(self) -> str:
        """The exact errors, which depend on the CPU's kernels: print them in an uncompared cell."""
        return f"{self.name}: max abs err {self.max_abs:.2e}, max rel err {self.max_rel:.2e}"


def _as_float_array(value: ArrayLike, what: str) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{what} must be numeric array-like, got {type(value).__name__}: {error}") from None
    return array


def _worst_index(diff: np.ndarray) -> tuple[int, ...]:
    flat = int(np.argmax(np.nan_to_num(diff, nan=np.inf)))
    return tuple(int(i) for i in np.unravel_index(flat, diff.shape))


def _argmax_agreement(want: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> float:
    """Share of rows where the class ``got`` picks is, in ``want``, within tolerance of ``want``'s best score."""
    best = want.max(axis=-1)
    picked = np.take_along_axis(want, got.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    return float(np.mean(picked >= best - (atol + rtol * np.abs(best))))


def compare(
    expected: ArrayLike,
    actual: ArrayLike,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    name: str = "parity",
    classifier: bool | None = None,
    min_agreement: float = 1.0,
    raise_on_failure: bool = True,
) -> ParityReport:
    """Compare two outputs element-wise (``|a-e| <= atol + rtol*|e|``) and, for class scores, argmax agreement.

    ``classifier`` defaults to True for any 2-D input with more than one column, which ``compare`` cannot
    tell from a weight matrix or a layer's activations: pass ``classifier=False`` for those. A row agrees
    when the class ``actual`` picks scores, in ``expected``, within tolerance of the best (a tie is no
    disagreement); at least ``min_agreement`` of the rows must agree. Raises ParityError on failure
    unless ``raise_on_failure=False``.
    """
    want = _as_float_array(expected, "expected")
    got = _as_float_array(actual, "actual")
    if want.shape != got.shape:
        raise ParityError(f"{name}: shapes differ: expected {want.shape}, got {got.shape}")
    if want.size == 0:
        raise ValueError(f"{name}: nothing to compare (empty outputs)")
    diff = np.abs(got - want)
    max_abs = float(np.nanmax(diff)) if np.isfinite(diff).any() else math.inf
    if np.isnan(diff).any():
        max_abs = math.inf
    # relative error against |expected|, floored at atol so that near-zero values do not explode it
    max_rel = float(np.nanmax(diff / np.maximum(np.abs(want), max(atol, np.finfo(np.float64).tiny))))
    within = bool(np.all(diff <= atol + rtol * np.abs(want)))
    if classifier is None:
        classifier = want.ndim == 2 and want.shape[1] > 1
    agreement = None
    if classifier:
        agreement = _argmax_agreement(want, got, atol, rtol)
        within = within and agreement >= min_agreement
    report = ParityReport(name, int(want.size), max_abs, max_rel, atol, rtol, agreement, within)
    if raise_on_failure and not within:
        raise ParityError(f"{report}; exact max abs err {max_abs:.3e} at index {_worst_index(diff)}")
    return report


def softmax(logits: ArrayLike, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis`` in float64 (probabilities from a model's logits; notebooks 01 and 09)."""
    array = np.asarray(logits, dtype=np.float64)
    shifted = np.exp(array - array.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)
