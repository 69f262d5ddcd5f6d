"""LLM memory arithmetic: the bytes a decoder's weights and its KV cache take, worked out before anything runs.

Introduced in notebook 06 (weights at FP32 / FP16 / INT8 / INT4 with block scales, ``llm_memory_table``)
and used again in notebook 11 (``kv_cache_bytes_per_token`` for real architectures). ``BITS`` names the
storage widths the course talks about, so a lesson can write ``weight_bytes(7e9, BITS["int4"], block_size=32)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

BITS: dict[str, int] = {"fp32": 32, "fp16": 16, "int8": 8, "int4": 4}
SCALE_BITS = 16  # one FP16 scale per block: MatMulNBits stores scales in its float input type, FP16 for FP16 LLMs (FP32 models: 32)


def _positive(label: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise ValueError(f"{label} must be a positive number, got {value!r}")
    return float(value)


def bits_per_weight(bits: float, *, block_size: int | None = None, scale_bits: int = SCALE_BITS) -> float:
    """Storage bits of one weight: ``bits`` plus its share of a ``scale_bits`` scale per ``block_size`` weights (notebook 06)."""
    _positive("bits", bits)
    if block_size is None:
        return float(bits)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive whole number of weights (or None), got {block_size!r}")
    return bits + _positive("scale_bits", scale_bits) / block_size


def weight_bytes(parameters: float, bits: float, *, block_size: int | None = None, scale_bits: int = SCALE_BITS) -> float:
    """Bytes of ``parameters`` weights at ``bits`` each (``BITS["int4"]`` = 4), plus block scales with ``block_size`` (notebooks 06, 11)."""
    return _positive("parameters", parameters) * bits_per_weight(bits, block_size=block_size, scale_bits=scale_bits) / 8


def llm_memory_table(parameters: float = 7e9, block_size: int = 32) -> list[dict[str, object]]:
    """Weight memory of a ``parameters``-parameter model at FP32/FP16/INT8/INT4 (INT4 with FP16 block scales) (notebook 06)."""
    formats = [
        ("FP32", BITS["fp32"], None),
        ("FP16", BITS["fp16"], None),
        ("INT8 (per-channel)", BITS["int8"], None),
        (f"INT4 (block {block_size}, FP16 scales)", BITS["int4"], block_size),
    ]
    fp32 = weight_bytes(parameters, BITS["fp32"])
    rows = []
    for name, bits, block in formats:
        size = weight_bytes(parameters, bits, block_size=block)
        rows.append(
            {
                "format": name,
                "bits / weight": round(bits_per_weight(bits, block_size=block), 2),
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


def kv_cache_bytes_per_token(arch: LLMArchitecture, bytes_per_value: float = 2.0) -> float:
    """Bytes of cache one token adds: 2 (key and value) x layers x kv_heads x head_dim x bytes per value (notebook 11)."""
    if not isinstance(arch, LLMArchitecture):
        raise TypeError(f"expected an LLMArchitecture, got {type(arch).__name__}")
    return 2 * arch.n_layers * arch.n_kv_heads * arch.head_dim * _positive("bytes_per_value", bytes_per_value)
