"""labsupport.topics.memory: weight and KV-cache bytes of LLMs (notebooks 06 and 11)."""

import numpy as np
import pytest

from labsupport.topics import memory
from labsupport.topics.memory import BITS, LLMArchitecture, kv_cache_bytes_per_token, llm_memory_table, weight_bytes

LLAMA2_7B = LLMArchitecture("7B", n_layers=32, n_kv_heads=32, head_dim=128)


def test_weight_bytes_at_each_width():
    assert weight_bytes(7e9, BITS["fp32"]) == 28e9
    assert weight_bytes(7e9, BITS["fp16"]) == 14e9
    assert weight_bytes(1e9, BITS["int4"]) == 0.5e9
    assert weight_bytes(7e9, bits=8) == 7e9


def test_block_scales_add_their_share():
    assert weight_bytes(32, BITS["int4"], block_size=32, scale_dtype="fp16") == 16 + 2  # 32 half-bytes and one FP16 scale
    assert weight_bytes(7e9, 4, block_size=32, scale_dtype="fp16") == pytest.approx(7e9 * 4.5 / 8)
    assert weight_bytes(64, 4, block_size=32, scale_dtype="fp32") == 32 + 2 * 4
    assert memory.bits_per_weight(4, block_size=128, scale_dtype="fp16") == 4.125


def test_scale_width_follows_the_scale_dtype():
    assert memory.bits_per_weight(4, block_size=32, scale_dtype="fp32") == 5.0  # the course's FP32 INT4 files: 6.4x
    assert memory.bits_per_weight(4, block_size=32, scale_dtype=np.float32) == 5.0
    assert memory.bits_per_weight(4, block_size=32, scale_dtype=np.dtype("float16")) == 4.5
    assert memory.bits_per_weight(4, block_size=32, scale_dtype="BF16") == 4.5
    assert 32 / memory.bits_per_weight(4, block_size=32, scale_dtype="fp32") == pytest.approx(6.4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"parameters": 0, "bits": 8}, "parameters must be a positive number"),
        ({"parameters": 1e9, "bits": -4}, "bits must be a positive number"),
        ({"parameters": 1e9, "bits": "int4"}, "bits must be a positive number"),
        ({"parameters": 1e9, "bits": 4, "block_size": 0}, "block_size must be a positive whole number"),
        ({"parameters": 1e9, "bits": 4, "block_size": 2.5}, "block_size must be a positive whole number"),
        ({"parameters": 1e9, "bits": 4, "block_size": 32}, "block scales need their dtype"),
        ({"parameters": 1e9, "bits": 4, "block_size": 32, "scale_dtype": "int8"}, "scale_dtype must be one of"),
        ({"parameters": 1e9, "bits": 4, "block_size": 32, "scale_dtype": np.int8}, "scale_dtype must be one of"),
        ({"parameters": 1e9, "bits": 4, "block_size": 32, "scale_dtype": "float64x"}, "scale_dtype must be one of"),
    ],
)
def test_weight_bytes_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        weight_bytes(**kwargs)


def test_llm_memory_table_for_a_7b_model():
    rows = llm_memory_table(7e9, block_size=32, scale_dtype="fp16")
    assert [r["format"] for r in rows] == ["FP32", "FP16", "INT8 (per-channel)", "INT4 (block 32, FP16 scales)"]
    assert [r["GB (1e9 bytes)"] for r in rows] == [28.0, 14.0, 7.0, 3.9]
    assert [r["GiB"] for r in rows] == [26.1, 13.0, 6.5, 3.7]
    assert [r["bits / weight"] for r in rows] == [32, 16, 8, 4.5]
    assert [r["vs FP32"] for r in rows] == [1.0, 0.5, 0.25, 0.141]
    assert llm_memory_table(7e9, block_size=128, scale_dtype="fp16")[-1]["bits / weight"] == 4.12
    fp32_scales = llm_memory_table(7e9, block_size=32, scale_dtype="fp32")[-1]
    assert fp32_scales["format"] == "INT4 (block 32, FP32 scales)" and fp32_scales["bits / weight"] == 5.0
    with pytest.raises(TypeError, match="scale_dtype"):
        llm_memory_table(7e9, block_size=32)  # no default scale type: FP16 for FP16 models, FP32 for FP32 ones


def test_kv_cache_bytes_per_token():
    assert kv_cache_bytes_per_token(LLAMA2_7B, 2) == 524_288  # 2 x 32 x 32 x 128 x 2 bytes
    assert kv_cache_bytes_per_token(LLAMA2_7B, bytes_per_value=1) == 262_144
    gqa = LLMArchitecture("70B, 8 kv heads", n_layers=80, n_kv_heads=8, head_dim=128)
    assert kv_cache_bytes_per_token(gqa, np.float32(2.0)) == 327_680


def test_kv_cache_rejects_bad_input():
    with pytest.raises(TypeError, match="LLMArchitecture"):
        kv_cache_bytes_per_token({"n_layers": 32}, 2)
    with pytest.raises(TypeError, match="bytes_per_value"):
        kv_cache_bytes_per_token(LLAMA2_7B)  # no default width: FP16 on a GPU, FP32 for the CPU models
    with pytest.raises(ValueError, match="bytes_per_value"):
        kv_cache_bytes_per_token(LLAMA2_7B, bytes_per_value=0)
