"""Exercises of notebook 11: every reference solution passes, typical wrong answers fail, ____ is not attempted."""

import itertools

import numpy as np
import pytest

from labsupport.exercises import CORRECT, INCORRECT, nb11


def test_q1_kv_cache_value_and_wrong_answers():
    right = 2 * 48 * 8 * 128 * 4 * 4096 * 3  # 2 (K and V) x layers x kv heads x head_dim x FP32 bytes x tokens x batch
    assert nb11.q1.reference_answer() == right == 4.5 * 2**30
    for accepted in [float(right), np.int64(right), right * 1.009]:
        assert nb11.q1.evaluate(accepted).status == CORRECT, accepted
    for wrong, reason in [
        (2 * 48 * 40 * 128 * 4 * 4096, "query heads and one sequence"),
        (right * 5, "query heads"),
        (48 * 8 * 128 * 4 * 4096 * 3, "half the answer, which more than one slip gives"),  # K or V only
        (2 * 48 * 8 * 128 * 2 * 4096 * 3, "half the answer, which more than one slip gives"),  # FP16 values
        (48 * 8 * 128 * 2 * 4096 * 3, "a quarter of the answer, which more than one slip gives"),  # K or V only and FP16
        (right / 3, "one sequence"),
        (2 * 48 * 8 * 128 * 4 * 4096 * 4, "that is 4 sequences"),  # batch 4 for 3 sequences: a batch slip, not query heads
        (right / 2**30, "bytes, not gigabytes"),
        (right / 1e9, "bytes, not gigabytes"),
        (right * 8, "that is bits"),
        (right / 2**20, "not MiB"),  # 4,608: divided by 2**20
        (right / 1e6, "not megabytes"),
        (right / 4096 * 4000, "0.9766 times the answer, which more than one slip gives"),  # "4K" read as 4,000
        (right / 48 * 49, "is not the KV-cache size"),  # a layer too many: no cause named on a guess
        (2 * 48 * 40 * 128 * 2 * 4096 * 3, "query heads and 2-byte values"),  # 40 query heads + FP16
        (right / 4096 / 3, "is not the KV-cache size"),  # one token only
        (right * 2, "is not the KV-cache size"),  # mine: K and V counted twice (2 x 2 x ...)
        (2 * 48 * 8 * 128 * 4 * 4097 * 3 * 1.02, "is not the KV-cache size"),  # mine: off by 2%, outside the 1% tolerance
        (12345, "is not the KV-cache size"),
        ("2 GiB", "expected a number"),
        (str(right), "expected a number"),
        (True, "expected a number"),
    ]:
        outcome = nb11.q1.evaluate(wrong)
        assert outcome.status == INCORRECT and reason in outcome.message, (wrong, outcome.message)


def test_q1_names_a_cause_only_when_one_fits():
    """47 layers is not "4,000 tokens" (47/48 and 4000/4096 are within 1% of each other), nor head_dim 64 "FP32 values
    take 4 bytes, not 2": an answer that several slips give gets the factors to check instead of one guessed cause."""
    factors = "check each factor: 2 (a key AND a value), layers, key/value heads (not query heads), head_dim, bytes per FP32 value"
    for slip in [2 * 47 * 8 * 128 * 4 * 4096 * 3, 2 * 48 * 8 * 64 * 4 * 4096 * 3, 2 * 48 * 8 * 128 * 4 * 4000 * 3]:
        message = nb11.q1.evaluate(slip).message
        assert factors in message and "4,000" not in message and "bytes, not 2" not in message, (slip, message)


def test_q1_no_mix_of_the_usual_mistakes_gives_the_answer():
    right = nb11.q1.reference_answer()
    factors = {"query heads": [1, 5], "K or V only": [1, 0.5], "2- or 1-byte values": [1, 0.5, 0.25], "batch": [1, 1 / 3, 4 / 3, 2 / 3]}
    for heads, kv, width, batch in itertools.product(*factors.values()):
        if (heads, kv, width, batch) != (1, 1, 1, 1):
            assert nb11.q1.evaluate(right * heads * kv * width * batch).status == INCORRECT, (heads, kv, width, batch)


def test_q2_int4_size_and_wrong_answers():
    assert nb11.q2.reference_answer() == pytest.approx(3.9375e9)
    assert nb11.q2.evaluate(7e9 * 4.5 / 8).status == CORRECT
    for wrong, reason in [
        (3.5e9, "only the 4-bit values"),
        (14e9, "FP16 size"),
        (3.5e9 + 7e9 / 32 * 4, "model's float type"),  # FP32 scales: right for an FP32 model, not for this FP16 one
        (3.9375, "bytes, not gigabytes"),
        (3.9375e9 / 2**30, "bytes, not gigabytes"),
        (3.9375e9 * 8, "is not the INT4 size"),  # bits
        (-1, "positive"),
    ]:
        outcome = nb11.q2.evaluate(wrong)
        assert outcome.status == INCORRECT and reason in outcome.message, (wrong, outcome.message)
    assert "FP32 scales" in nb11.q2.evaluate(3.5e9 + 7e9 / 32 * 4).message
    # a 4-bit zero point per block as well, and one FP16 scale per 64 weights instead of 32
    for wrong in [3.9375e9 + 7e9 / 32 / 2, 3.5e9 + 7e9 / 64 * 2]:
        assert nb11.q2.evaluate(wrong).status == INCORRECT, wrong


def test_q3_mask_rejects_typical_mistakes():
    def square_tril(past, new):  # forgets the cache: wrong shape
        return np.tril(np.ones((new, new), bool))

    def ignores_offset(past, new):  # right shape, but query i only sees keys 0..i
        return np.tril(np.ones((new, past + new), bool))

    def strict(past, new):  # a token may not see itself
        return np.arange(past + new)[None, :] < (np.arange(new)[:, None] + past)

    def as_ints(past, new):
        return (np.arange(past + new)[None, :] <= (np.arange(new)[:, None] + past)).astype(int)

    def transposed(past, new):  # mine: (keys, queries), which is square and upper triangular at past 0
        return (np.arange(past + new)[None, :] <= (np.arange(new)[:, None] + past)).T

    def off_by_one(past, new):  # mine: query i sees one key too many
        return np.arange(past + new)[None, :] <= (np.arange(new)[:, None] + past + 1)

    for wrong, reason in [
        (square_tril, "must have shape"),
        (transposed, "mask(0, 4) is wrong"),
        (off_by_one, "is wrong"),
        (ignores_offset, "is wrong"),
        (strict, "is wrong"),
        (as_ints, "boolean"),
        ("mask", "expected a function"),
    ]:
        outcome = nb11.q3.evaluate(wrong)
        assert outcome.status == INCORRECT and reason in outcome.message, (wrong, outcome.message)


def test_q3_accepts_the_torch_helper_too():
    from labsupport.models.tiny_transformer import causal_mask

    assert nb11.q3.evaluate(lambda past, new: causal_mask(past, new).numpy()).status == CORRECT


_Q4_WEIGHTS_GB, _Q4_CACHE_GB = 8.03e9 * 4.5 / 8 / 1e9, 2 * 32 * 8 * 128 * 2 * 8192 / 1e9


def test_q4_accepts_the_right_triple_as_a_list_too():
    assert nb11.q4.evaluate((_Q4_WEIGHTS_GB, _Q4_CACHE_GB, 18)).status == CORRECT
    assert nb11.q4.evaluate([round(_Q4_WEIGHTS_GB, 2), round(_Q4_CACHE_GB, 2), 18]).status == CORRECT


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        ((8.03e9 * 0.5 / 1e9, _Q4_CACHE_GB, 18), "only the 4-bit values"),
        ((_Q4_WEIGHTS_GB * 1e9 / 2**30, _Q4_CACHE_GB, 18), "GiB"),
        ((_Q4_WEIGHTS_GB * 1e9, _Q4_CACHE_GB, 18), "in bytes"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB * 4, 18), "query heads"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB / 2, 18), "keys or values only"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB * 2, 18), "4-byte values"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB * 1e9 / 2**30, 18), "GiB"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB * 8000 / 8192, 18), "8,192"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB, 19), "round down"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB, 22), "subtract them"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB, 17), "rounded down"),
        ((_Q4_WEIGHTS_GB, _Q4_CACHE_GB, 18.1), "whole number"),
        (18, "three numbers"),
    ],
)
def test_q4_names_each_mistake(wrong, named):
    outcome = nb11.q4.evaluate(wrong)
    assert outcome.status == INCORRECT
    assert named in outcome.message
