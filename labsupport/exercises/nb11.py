"""Exercises of notebook 11 (transformers and LLMs): KV-cache size, INT4 weight size, the causal mask with a cache, what fits."""

from __future__ import annotations

import math

import numpy as np

from labsupport.exercises import Exercise, Incorrect

# exercise 1: 48 layers, 40 query heads sharing 8 key/value heads of 128 (a 14B-class shape), with the FP32
# cache of a CPU genai model. The query/kv ratio (5) is prime to 2 and 3, and the values take 4 bytes, so no mix of
# the usual mistakes (query heads, K or V only, 2-byte values, one sequence, a batch of 4) cancels into the answer.
Q1_LAYERS, Q1_QUERY_HEADS, Q1_KV_HEADS, Q1_HEAD_DIM = 48, 40, 8, 128
Q1_BATCH, Q1_TOKENS, Q1_BYTES = 3, 4096, 4

# exercise 2: a 7-billion-parameter FP16 model in INT4; MatMulNBits keeps the scales in the model's float type (FP16)
Q2_PARAMETERS, Q2_BLOCK, Q2_SCALE_BYTES = 7e9, 32, 2


def _number(answer: object) -> float:
    if isinstance(answer, bool) or not isinstance(answer, (int, float, np.integer, np.floating)):
        raise Incorrect(f"expected a number of bytes, got {type(answer).__name__}")
    value = float(answer)
    if not math.isfinite(value) or value <= 0:
        raise Incorrect(f"expected a positive number of bytes, got {answer}")
    return value


def _close(value: float, target: float) -> bool:
    return abs(value - target) <= 0.01 * target


def _kv_cache_slips(truth: float) -> list[tuple[float, str]]:
    """The answers that the usual slips give, each with its cause; several slips can give the same answer. A cause ""
    is a slip never named on its own (a count off by one), but one that makes a named cause uncertain."""
    gqa_factor = Q1_QUERY_HEADS / Q1_KV_HEADS
    return [
        (
            truth * gqa_factor / Q1_BATCH,
            f"that uses the {Q1_QUERY_HEADS} query heads and one sequence; cache only the "
            f"{Q1_KV_HEADS} key/value heads, for each of the {Q1_BATCH} sequences",
        ),
        (
            truth * gqa_factor,
            f"that uses the {Q1_QUERY_HEADS} query heads; with grouped-query attention only the {Q1_KV_HEADS} key/value heads are cached",
        ),
        (truth / 2, "that counts a key or a value; the cache stores a key AND a value per layer and head"),
        (truth / 2, f"that uses 2-byte values; FP32 values take {Q1_BYTES} bytes"),
        (truth / 2, f"that uses a head_dim of {Q1_HEAD_DIM // 2}; each key/value head holds {Q1_HEAD_DIM} values"),
        (truth / 4, "that counts a key or a value, of 2 bytes each; the cache stores a key AND a value, of 4 bytes (FP32)"),
        (truth / 4, f"that uses 1-byte values; FP32 values take {Q1_BYTES} bytes"),
        (truth / Q1_BATCH, f"that is one sequence; the batch holds {Q1_BATCH}"),
        (truth * (Q1_BATCH + 1) / Q1_BATCH, f"that is {Q1_BATCH + 1} sequences; the batch holds {Q1_BATCH}"),
        (
            truth * gqa_factor / 2,
            f"that uses the {Q1_QUERY_HEADS} query heads and 2-byte values; cache the {Q1_KV_HEADS} key/value heads, "
            f"at {Q1_BYTES} bytes per FP32 value",
        ),
        (truth * 4000 / Q1_TOKENS, f"that counts 4,000 tokens; each sequence holds {Q1_TOKENS:,} (4K = 2**12)"),
        (truth * (Q1_LAYERS - 1) / Q1_LAYERS, ""),  # within 1% of the 4,000 tokens above
        (truth * (Q1_LAYERS + 1) / Q1_LAYERS, ""),
        (truth * 8, "that is bits; the question asks for bytes"),
        (truth / 2**30, "answer in bytes, not gigabytes"),
        (truth / 1e9, "answer in bytes, not gigabytes"),
        (truth / 2**20, "answer in bytes, not MiB"),
        (truth / 1e6, "answer in bytes, not megabytes"),
    ]


def _ratio_in_words(ratio: float) -> str:
    named = {0.5: "half", 0.25: "a quarter of"}
    return next((words for value, words in named.items() if _close(ratio, value)), f"{ratio:.4g} times")


def _check_kv_cache(answer: object) -> str:
    value = _number(answer)
    per_token = Q1_LAYERS * Q1_KV_HEADS * Q1_HEAD_DIM * Q1_BYTES
    truth = 2 * per_token * Q1_BATCH * Q1_TOKENS
    if _close(value, truth):
        return f"{truth:,.0f} bytes = {truth / 2**30:.2f} GiB of cache for {Q1_BATCH} x {Q1_TOKENS} tokens"
    causes = list(dict.fromkeys(reason for wrong, reason in _kv_cache_slips(truth) if _close(value, wrong)))
    if len(causes) == 1 and causes[0]:
        raise Incorrect(causes[0])
    if len(causes) > 1:  # one answer, several possible slips: naming one would misdiagnose the others
        raise Incorrect(
            f"that is {_ratio_in_words(value / truth)} the answer, which more than one slip gives; check each factor: "
            "2 (a key AND a value), layers, key/value heads (not query heads), head_dim, bytes per FP32 value, tokens, sequences"
        )
    raise Incorrect(f"{value:,.0f} bytes is not the KV-cache size of this configuration")


def _check_int4_size(answer: object) -> str:
    value = _number(answer)
    packed = Q2_PARAMETERS * 0.5
    truth = packed + Q2_PARAMETERS / Q2_BLOCK * Q2_SCALE_BYTES
    if _close(value, truth):
        return f"{truth / 1e9:.4f} GB: {truth * 8 / Q2_PARAMETERS:.1f} bits per weight once the block scales are counted"
    if _close(value, packed):
        raise Incorrect("that counts only the 4-bit values; every block of 32 weights also stores one scale (2 bytes in an FP16 model)")
    if _close(value, Q2_PARAMETERS * 2):
        raise Incorrect("that is the FP16 size; the question asks for INT4 with block scales")
    if _close(value, packed + Q2_PARAMETERS / Q2_BLOCK * 4):
        raise Incorrect(
            "that counts 4-byte FP32 scales; the question's model is FP16, and MatMulNBits stores the scales in the "
            "model's float type, so here they take 2 bytes (an FP32 model, like this notebook's, has FP32 scales)"
        )
    if _close(value, truth / 1e9) or _close(value, truth / 2**30):
        raise Incorrect("answer in bytes, not gigabytes")
    raise Incorrect(f"{value:,.0f} bytes is not the INT4 size with block scales")


def _reference_mask(past: int, new: int) -> np.ndarray:
    return np.arange(past + new)[None, :] <= (np.arange(new)[:, None] + past)


def _check_mask(answer: object) -> str:
    if not callable(answer):
        raise Incorrect(f"expected a function (past_length, new_length) -> boolean array, got {type(answer).__name__}")
    for past, new in [(0, 4), (3, 1), (5, 2), (0, 1), (2, 3)]:
        got = np.asarray(answer(past, new))
        want = _reference_mask(past, new)
        if got.shape != want.shape:
            raise Incorrect(f"mask({past}, {new}) must have shape (new_length, past_length + new_length) = {want.shape}, got {got.shape}")
        if got.dtype != bool:
            raise Incorrect(f"mask({past}, {new}) must be boolean (True = may attend), got dtype {got.dtype}")
        if not np.array_equal(got, want):
            raise Incorrect(
                f"mask({past}, {new}) is wrong: new token i sits at position past_length + i and may see keys "
                f"0..past_length + i; expected {want.astype(int).tolist()}, got {got.astype(int).tolist()}"
            )
    return "new tokens see the whole cache and the earlier new tokens, never the future"


# exercise 4 (transfer): a Llama-3-8B shape (8.03e9 parameters, 32 layers, 8 kv heads of 128) in INT4 with FP16 block
# scales and an FP16 cache, on a 24 GB (decimal) device: weight GB, cache GB per 8,192-token sequence, sequences that fit
Q4_PARAMETERS, Q4_LAYERS, Q4_QUERY_HEADS, Q4_KV_HEADS, Q4_HEAD_DIM = 8.03e9, 32, 32, 8, 128
Q4_DEVICE_BYTES, Q4_TOKENS, Q4_BLOCK, Q4_SCALE_BYTES, Q4_CACHE_BYTES = 24e9, 8192, 32, 2, 2


def _q4_truth() -> tuple[float, float, int]:
    weights = Q4_PARAMETERS * (4 + 8 * Q4_SCALE_BYTES / Q4_BLOCK) / 8
    per_sequence = 2 * Q4_LAYERS * Q4_KV_HEADS * Q4_HEAD_DIM * Q4_CACHE_BYTES * Q4_TOKENS
    return weights, per_sequence, int((Q4_DEVICE_BYTES - weights) // per_sequence)


def _q4_weight_slip(value: float, weights: float) -> str:
    if _close(value, Q4_PARAMETERS * 0.5 / 1e9):
        return "the weights count only the 4-bit values: every block of 32 weights also stores one FP16 scale (2 bytes)"
    if _close(value, weights / 2**30):
        return "the weights are in GiB (2**30 bytes): the question asks for decimal GB (1e9 bytes)"
    if _close(value, weights):
        return "the weights are in bytes: the question asks for GB (divide by 1e9)"
    if _close(value, Q4_PARAMETERS * 2 / 1e9):
        return "that is the FP16 size of the weights; they are stored in INT4 with block scales"
    return f"{value} GB is not the INT4 weight size with FP16 block scales"


def _q4_cache_slip(value: float, per_sequence: float) -> str:
    slips = [
        (
            per_sequence * Q4_QUERY_HEADS / Q4_KV_HEADS,
            "the cache counts the 32 query heads: with GQA only the 8 key/value heads are cached",
        ),
        (per_sequence / 2, "the cache counts keys or values only: it stores both, a factor of 2"),
        (per_sequence * 2, "the cache counts 4-byte values: this cache is FP16, 2 bytes a value"),
        (per_sequence / 2**30 * 1e9, "the cache is in GiB (2**30 bytes): the question asks for decimal GB (1e9 bytes)"),
        (per_sequence * 1e9, "the cache is in bytes: the question asks for GB (divide by 1e9)"),
        (per_sequence * 8000 / Q4_TOKENS, "8K tokens is 8,192 here (2**13), not 8,000"),
    ]
    for wrong, cause in slips:
        if _close(value * 1e9, wrong):
            return cause
    return f"{value} GB is not the cache of one 8,192-token sequence"


def _check_fit(answer: object) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        raise Incorrect("expected three numbers: (weight GB, cache GB per sequence, number of sequences)")
    weight_gb, cache_gb, sequences = (_number(value) for value in answer)
    weights, per_sequence, fits = _q4_truth()
    if not _close(weight_gb * 1e9, weights):
        raise Incorrect(_q4_weight_slip(weight_gb, weights))
    if not _close(cache_gb * 1e9, per_sequence):
        raise Incorrect(_q4_cache_slip(cache_gb, per_sequence))
    if sequences != int(sequences):
        raise Incorrect(f"{sequences} sequences: a sequence fits whole or not at all, give a whole number")
    if sequences == fits + 1:
        raise Incorrect(
            f"{int(sequences)} does not fit: the free memory holds {(Q4_DEVICE_BYTES - weights) / per_sequence:.2f} "
            "sequences, so round down (and the device has 24e9 bytes, not 24 GiB)"
        )
    if sequences == int(Q4_DEVICE_BYTES // per_sequence):
        raise Incorrect("the weights are on the device too: subtract them before dividing the memory among the caches")
    if sequences != fits:
        raise Incorrect(f"{int(sequences)} sequences: divide the memory left after the weights by one sequence's cache, rounded down")
    return (
        f"{weights / 1e9:.2f} GB of weights leave {(Q4_DEVICE_BYTES - weights) / 1e9:.2f} GB: {fits} sequences of "
        f"{per_sequence / 1e9:.2f} GB of cache each"
    )


q1 = Exercise(
    1,
    "size a KV cache",
    _check_kv_cache,
    hint=(
        "Per token the cache holds a key and a value for every layer and every key/value head: "
        "2 x layers x kv_heads x head_dim x bytes. Multiply by tokens and batch. "
        "labsupport.topics.memory.kv_cache_bytes_per_token(LLMArchitecture(...), bytes_per_value) does the per-token part."
    ),
    solution_code="""
        layers, kv_heads, head_dim, bytes_per_value = 48, 8, 128, 4  # the 40 query heads do not enter: only K and V are cached
        per_token = 2 * layers * kv_heads * head_dim * bytes_per_value  # a key and a value per layer and kv head
        answer = per_token * 4096 * 3  # tokens x sequences
        # the course's shortcut: kv_cache_bytes_per_token(LLMArchitecture(...), 4) * 4096 * 3 (labsupport.topics.memory)
    """,
)

q2 = Exercise(
    2,
    "INT4 weights with block scales",
    _check_int4_size,
    hint=(
        "4 bits = 0.5 byte per weight, plus one scale per block of 32 weights, in the model's float type (FP16: 2 bytes). "
        "labsupport.topics.memory.weight_bytes(parameters, bits, block_size=..., scale_dtype=...) adds the scales."
    ),
    solution_code="""
        parameters, block_size, scale_bytes = 7e9, 32, 2  # FP16 model, so FP16 scales
        answer = parameters * 4 / 8 + parameters / block_size * scale_bytes  # 4.5 bits per weight
        # the course's shortcut: weight_bytes(7e9, BITS["int4"], block_size=32, scale_dtype="fp16") (labsupport.topics.memory)
    """,
)

q3 = Exercise(
    3,
    "the causal mask with a cache",
    _check_mask,
    hint=(
        "Query i is at absolute position past_length + i; key j is at position j. "
        "Allowed when j <= past_length + i. Build both position vectors with np.arange and compare them with broadcasting."
    ),
    solution_code="""
        import numpy as np

        def answer(past_length, new_length):
            query_positions = np.arange(new_length)[:, None] + past_length
            key_positions = np.arange(past_length + new_length)[None, :]
            return key_positions <= query_positions
    """,
)

q4 = Exercise(
    4,
    "transfer: what fits on a 24 GB device",
    _check_fit,
    hint=(
        "Three steps, in decimal GB (1e9 bytes): the INT4 weights with one FP16 scale per 32 weights (exercise 2's rule), "
        "one sequence's cache (exercise 1's rule: only the key/value heads, FP16 here, 8,192 tokens), then the memory left "
        "after the weights divided by one sequence's cache, rounded down."
    ),
    solution_code="""
        weights = 8.03e9 * (4 + 16 / 32) / 8  # INT4 + one FP16 scale per block of 32: 4.5 bits per weight
        per_sequence = 2 * 32 * 8 * 128 * 2 * 8192  # K and V x layers x kv heads x head_dim x FP16 bytes x tokens
        sequences = int((24e9 - weights) // per_sequence)  # what is left after the weights, whole sequences only
        answer = (weights / 1e9, per_sequence / 1e9, sequences)
    """,
)

EXERCISES = [q1, q2, q3, q4]
