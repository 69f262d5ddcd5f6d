"""labsupport.models.tiny_transformer without training or exporting: the task data, the decoder and its KV cache (notebook 11)."""

import numpy as np
import pytest
import torch

from labsupport.course.compare import compare
from labsupport.models import tiny_transformer as T
from labsupport.onnxutil.export import single_thread

SMALL = T.TinyConfig(d_model=32, n_heads=2, n_layers=2, d_ff=64, max_positions=64)


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: tiny models run ~10x slower when two threads compete for a busy CPU."""
    with single_thread():
        yield


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    return T.TinyDecoder(SMALL).eval()


def test_reversal_data_is_deterministic_and_correct():
    data = T.make_reversal_data(5, seed=3)
    assert data.prompts.shape == (5, T.PROMPT_LENGTH) and data.answers.shape == (5, T.ANSWER_LENGTH)
    assert data.prompts.dtype == np.int64 and len(data) == 5
    np.testing.assert_array_equal(data.prompts, T.make_reversal_data(5, seed=3).prompts)
    assert not np.array_equal(data.prompts, T.make_reversal_data(5, seed=4).prompts)
    assert (data.prompts[:, 0] == T.BOS_ID).all() and (data.prompts[:, -1] == T.SEP_ID).all()
    np.testing.assert_array_equal(data.answers[:, :-1], data.prompts[:, 1:-1][:, ::-1])
    assert (data.answers[:, -1] == T.EOS_ID).all()
    assert data.sequences().shape == (5, T.PROMPT_LENGTH + T.ANSWER_LENGTH)


@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_reversal_data_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match="count must be a positive whole number"):
        T.make_reversal_data(bad)
    with pytest.raises(ValueError, match="num_digits"):
        T.make_reversal_data(2, num_digits=bad)


def test_encode_decode_round_trip_and_errors():
    ids = T.encode("3141")
    assert ids.shape == (1, 6) and ids[0, 0] == T.BOS_ID and ids[0, -1] == T.SEP_ID
    assert T.decode(ids) == "<bos>3141="
    assert T.decode([6, 2, T.EOS_ID, 5]) == "62<eos>"
    with pytest.raises(ValueError, match="string of digits"):
        T.encode("12a")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        T.decode([99])


def test_exact_match_counts_whole_answers_and_checks_shapes():
    answers = np.array([[1, 2, T.EOS_ID], [3, 4, T.EOS_ID]])
    generated = np.array([[1, 2, T.EOS_ID, 7], [3, 5, T.EOS_ID, 7]])
    assert T.exact_match(generated, answers) == 0.5
    with pytest.raises(ValueError, match="same N"):
        T.exact_match(generated[:1], answers)
    with pytest.raises(ValueError, match="generated only 2 tokens"):
        T.exact_match(generated[:, :2], answers)


def test_causal_mask_with_and_without_past():
    np.testing.assert_array_equal(T.causal_mask(0, 3).numpy(), np.tril(np.ones((3, 3), bool)))
    mask = T.causal_mask(2, 2).numpy()
    assert mask.shape == (2, 4)
    np.testing.assert_array_equal(mask, [[True, True, True, False], [True, True, True, True]])
    assert T.causal_mask(5, 1).numpy().all()


def test_forward_shapes_and_cache_growth(small_model):
    ids = torch.from_numpy(T.make_reversal_data(3).prompts)
    with torch.no_grad():
        logits, presents = small_model(ids)
        assert logits.shape == (3, T.PROMPT_LENGTH, SMALL.vocab_size)
        assert len(presents) == SMALL.n_layers
        assert presents[0][0].shape == (3, SMALL.n_heads, T.PROMPT_LENGTH, SMALL.head_dim)
        step_logits, step_presents = small_model(ids[:, :1], presents)
    assert step_logits.shape == (3, 1, SMALL.vocab_size)
    assert step_presents[1][1].shape == (3, SMALL.n_heads, T.PROMPT_LENGTH + 1, SMALL.head_dim)


def test_cached_forward_equals_full_recomputation(small_model):
    ids = torch.from_numpy(T.make_reversal_data(2, seed=1).sequences())
    with torch.no_grad():
        full, _ = small_model(ids)
        prefix, past = small_model(ids[:, :5])
        steps = [prefix]
        for position in range(5, ids.shape[1]):
            logits, past = small_model(ids[:, position : position + 1], past)
            steps.append(logits)
    compare(full.numpy(), torch.cat(steps, dim=1).numpy(), atol=1e-5, name="cache parity")


def test_cache_names_and_empty_cache():
    inputs, outputs = T.cache_names(SMALL)
    assert inputs == ["input_ids", "past_key_0", "past_value_0", "past_key_1", "past_value_1"]
    assert outputs == ["logits", "present_key_0", "present_value_0", "present_key_1", "present_value_1"]
    cache = T.empty_cache(SMALL, batch_size=3)
    assert len(cache) == 4 and cache[0].shape == (3, 2, 0, 16) and cache[0].dtype == np.float32


def test_generate_torch_records_every_step(small_model):
    prompts = T.make_reversal_data(3, seed=5).prompts
    result = T.generate_torch(small_model, prompts, 4)
    assert result.tokens.shape == (3, 4) and result.logits.shape == (4, 3, SMALL.vocab_size)
    np.testing.assert_array_equal(result.tokens[:, 0], result.step_logits[0].argmax(-1))


@pytest.mark.parametrize(
    ("prompts", "new_tokens", "message"),
    [
        (np.zeros((2, 3), np.float32), 2, "integer array"),
        (np.zeros(3, np.int64), 2, "integer array"),
        (np.zeros((2, 0), np.int64), 2, "integer array"),
        (np.zeros((2, 3), np.int64), 0, "new_tokens"),
        (np.zeros((2, 3), np.int64), True, "new_tokens"),
    ],
)
def test_check_prompts_rejects_bad_input(prompts, new_tokens, message):
    with pytest.raises(ValueError, match=message):
        T.check_prompts(prompts, new_tokens)


def test_export_rejects_a_model_that_is_not_a_tiny_decoder(tmp_path):
    with pytest.raises(TypeError, match="TinyDecoder"):
        T.export_full(torch.nn.Linear(2, 2), tmp_path / "x.onnx")
    with pytest.raises(TypeError, match="TinyDecoder"):
        T.export_cached(torch.nn.Linear(2, 2), tmp_path / "x.onnx")
    assert not list(tmp_path.iterdir())
