"""LLM memory arithmetic: the bytes a decoder's weights and its KV cache take, worked out before anything runs.

Introduced in notebook 06 (weights at FP32 / FP16 / INT8 / INT4 with block scales, ``llm_memory_table``)
and used again in notebooks 11 and 12 (``kv_cache_bytes_per_token`` for real architectures). ``BITS`` names the
storage widths the course talks about, so a lesson can write
``weight_bytes(7e9, BITS["int4"], block_size=32, scale_dtype="fp32")``. Block scales have no default width:
``MatMulNBits`` stores them in the model's float type (FP32 scales in an FP32 model), so the caller says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

import numpy as np

BITS: dict[str, int] = {"fp32": 32, "fp16": 16, "int8": 8, "int4": 4}
SCALE_DTYPES: dict[str, int] = {"fp32": 32, "fp16": 16, "bf16": 16}  # bits of one block scale, by name


def _positive(label: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise ValueError(f"{label} must be a positive number, got {value!r}")
    return float(value)


def scale_bits(scale_dtype: object) -> int:
    """Bits of one block scale: ``scale_dtype`` is "fp32", "fp16", "bf16" or a NumPy float dtype such as ``np.float32`` (notebook 11)."""
    if isinstance(scale_dtype, str) and scale_dtype.lower() in SCALE_DTYPES:
        return SCALE_DTYPES[scale_dtype.lower()]
    try:
        dtype = np.dtype(scale_dtype)
    except TypeError:
        dtype = None
    if scale_dtype is None or dtype is None or dtype.kind != "f":
        raise ValueError(f"scale_dtype must be one of {sorted(SCALE_DTYPES)} or a NumPy float dtype, got {scale_dtype!r}")
    return 8 * dtype.itemsize


def bits_per_weight(bits: float, *, block_size: int | None = None, scale_dtype: object = None) -> float:
    """Storage bits of one weight: ``bits`` plus its share of one ``scale_dtype`` scale per ``block_size`` weights (notebooks 06, 11)."""
    _positive("bits", bits)
    if block_size is None:
        return float(bits)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive whole number of weights (or None), got {block_size!r}")
    if scale_dtype is None:
        raise ValueError(
            "block scales need their dtype: scale_dtype='fp32' for an FP32 model, 'fp16' for an FP16 one "
            "(MatMulNBits stores the scales in the model's float type)"
        )
    return bits + scale_bits(scale_dtype) / block_size


def weight_bytes(parameters: float, bits: float, *, block_size: int | None = None, scale_dtype: object = None) -> float:
    """Bytes of ``parameters`` weights at ``bits`` each, plus one ``scale_dtype`` scale per ``block_size`` weights (notebooks 06, 11)."""
    return _positive("parameters", parameters) * bits_per_weight(bits, block_size=block_size, scale_dtype=scale_dtype) / 8


def llm_memory_table(parameters: float, *, block_size: int, scale_dtype: str) -> list[dict[str, object]]:
    """Weight memory of a ``parameters``-parameter model at FP32/FP16/INT8/INT4 (INT4 with ``scale_dtype`` block scales) (notebook 06).

    ``scale_dtype`` is the MatMul's float type (MatMulNBits keeps its scales in it): "fp16" for an FP16 LLM, "fp32" for an FP32 model.
    """
    formats = [
        ("FP32", BITS["fp32"], None),
        ("FP16", BITS["fp16"], None),
        ("INT8 (per-channel)", BITS["int8"], None),
        (f"INT4 (block {block_size}, {scale_dtype.upper()} scales)", BITS["int4"], block_size),
    ]
    fp32 = weight_bytes(parameters, BITS["fp32"])
    rows = []
    for name, bits, block in formats:
        size = weight_bytes(parameters, bits, block_size=block, scale_dtype=scale_dtype)
        rows.append(
            {
                "format": name,
                "bits / weight": round(bits_per_weight(bits, block_size=block, scale_dtype=scale_dtype), 2),
                "GB (1e9 bytes)": round(size / 1e9, 1),
                "GiB": round(size / 2**30, 1),
                "vs FP32": round(size / fp32, 3),
            }
        )
    return rows


@dataclass(frozen=True)
class LLMArchitecture:
    """What sizes a decoder's KV cache: layers, key/value heads (fewer than query heads with GQA) and head size (notebook 11)."""

    name: str
    n_layers: int
    n_kv_heads: int
    head_dim: int


def kv_cache_bytes_per_token(arch: LLMArchitecture, bytes_per_value: float) -> float:
    """Bytes of cache one token adds: 2 (key and value) x layers x kv_heads x head_dim x bytes per value, the width the
    runtime really stores (2 for an FP16 cache, 4 for the FP32 cache of a CPU model; notebook 11)."""
    if not isinstance(arch, LLMArchitecture):
        raise TypeError(f"expected an LLMArchitecture, got {type(arch).__name__}")
    return 2 * arch.n_layers * arch.n_kv_heads * arch.head_dim * _positive("bytes_per_value", bytes_per_value)
