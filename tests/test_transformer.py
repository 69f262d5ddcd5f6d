"""labsupport.transformer: task data, the tiny decoder, its KV cache, its exports and greedy generation (notebook 11)."""

import numpy as np
import pytest
import torch

from labsupport import transformer as T
from labsupport.compare import compare

SMALL = T.TinyConfig(d_model=32, n_heads=2, n_layers=2, d_ff=64, max_positions=64)


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    return T.TinyDecoder(SMALL).eval()


@pytest.fixture(scope="module")
def exported(small_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    full = T.export_full(small_model, folder / "full.onnx")
    cached = T.export_cached(small_model, folder / "kv.onnx")
    return T.session(full), T.session(cached)


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


def test_exports_have_dynamic_axes_and_named_io(exported):
    full, cached = exported
    assert [i.name for i in full.get_inputs()] == ["input_ids"]
    assert [o.name for o in full.get_outputs()] == ["logits"]
    inputs, outputs = T.cache_names(SMALL)
    assert [i.name for i in cached.get_inputs()] == inputs
    assert [o.name for o in cached.get_outputs()] == outputs
    past_shape = cached.get_inputs()[1].shape
    assert isinstance(past_shape[0], str) and isinstance(past_shape[2], str)
    assert past_shape[1] == SMALL.n_heads and past_shape[3] == SMALL.head_dim


def test_generation_over_both_exports_matches_pytorch_every_step(small_model, exported):
    full, cached = exported
    prompts = T.make_reversal_data(4, seed=2).prompts
    reference = T.generate_torch(small_model, prompts, 6)
    for name, generate, sess in (("full", T.generate_full, full), ("cached", T.generate_cached, cached)):
        result = generate(sess, prompts, 6)
        assert result.tokens.shape == (4, 6) and result.logits.shape == (6, 4, SMALL.vocab_size)
        for step, (want, got) in enumerate(zip(reference.step_logits, result.step_logits)):
            compare(want, got, atol=1e-4, rtol=1e-3, name=f"{name} step {step}")
        np.testing.assert_array_equal(result.tokens, reference.tokens)


def test_generation_rejects_bad_inputs(exported):
    full, cached = exported
    with pytest.raises(ValueError, match="integer array"):
        T.generate_full(full, np.zeros((2, 3), np.float32), 2)
    with pytest.raises(ValueError, match="new_tokens"):
        T.generate_cached(cached, T.encode("12"), 0)
    with pytest.raises(ValueError, match="needs the cached export"):
        T.generate_cached(full, T.encode("12"), 2)


def test_export_rejects_wrong_model_and_path(small_model, tmp_path):
    with pytest.raises(TypeError, match="TinyDecoder"):
        T.export_full(torch.nn.Linear(2, 2), tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="must end in .onnx"):
        T.export_cached(small_model, tmp_path / "x.bin")


def test_training_is_deterministic_and_learns():
    first, log = T.train_tiny_transformer(steps=30, batch_size=16, config=SMALL)
    second, _ = T.train_tiny_transformer(steps=30, batch_size=16, config=SMALL)
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)
    assert log.steps == [30] and log.accuracy is not None and "30 steps" in repr(log)
    with pytest.raises(ValueError, match="steps"):
        T.train_tiny_transformer(steps=0)


def test_ensure_reuses_cached_weights_and_trained_model_solves_the_task():
    path = T.ensure_tiny_transformer()
    stamp = path.stat().st_mtime_ns
    assert T.ensure_tiny_transformer() == path and path.stat().st_mtime_ns == stamp
    model = T.load_tiny_transformer()
    data = T.make_reversal_data(50, seed=99)
    assert T.exact_match(T.generate_torch(model, data.prompts, T.ANSWER_LENGTH).tokens, data.answers) >= 0.95


def test_memory_arithmetic():
    assert T.weight_bytes(7e9, "fp16") == 14e9
    assert T.weight_bytes(1e9, "int4") == 0.5e9
    assert T.weight_bytes(32, "int4", block_size=32) == 16 + 2
    llama2_7b = T.LLMArchitecture("7B", n_layers=32, n_kv_heads=32, head_dim=128)
    assert T.kv_cache_bytes_per_token(llama2_7b) == 524_288
    assert T.kv_cache_bytes_per_token(llama2_7b, bytes_per_value=1) == 262_144
    with pytest.raises(ValueError, match="dtype must be one of"):
        T.weight_bytes(1e9, "int3")
    with pytest.raises(ValueError, match="parameters must be positive"):
        T.weight_bytes(0, "fp16")
    with pytest.raises(ValueError, match="block_size"):
        T.weight_bytes(1e9, "int4", block_size=0)
    with pytest.raises(TypeError, match="LLMArchitecture"):
        T.kv_cache_bytes_per_token({"n_layers": 32})
    with pytest.raises(ValueError, match="bytes_per_value"):
        T.kv_cache_bytes_per_token(llama2_7b, bytes_per_value=0)


def test_single_thread_restores_the_thread_count():
    from labsupport import models

    assert T.single_thread is models.single_thread  # one shared helper, not a copy
    before = torch.get_num_threads()
    with T.single_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_session_uses_the_cpu_provider(exported):
    full, _ = exported
    assert full.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(Exception, match="No such file|does not exist|NO_SUCHFILE"):
        T.session("missing_model.onnx")
