"""The tiny transformer's exports, the generation loops over them and its training (notebook 11).

labsupport.models.tiny_transformer (exports, training) and labsupport.topics.generation (greedy decoding
over ONNX Runtime); the fast tests of the model itself are in tests/unit/test_tiny_transformer.py.
"""

import numpy as np
import pytest
import torch

from labsupport.course.compare import compare
from labsupport.models import tiny_transformer as T
from labsupport.onnxutil.sessions import open_session
from labsupport.topics import generation

SMALL = T.TinyConfig(d_model=32, n_heads=2, n_layers=2, d_ff=64, max_positions=64)


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    return T.TinyDecoder(SMALL).eval()


@pytest.fixture(scope="module")
def sessions(small_model, tmp_path_factory):
    """CPU sessions, one thread each, of the export without a cache and the export with one."""
    folder = tmp_path_factory.mktemp("tiny")
    full = T.export_full(small_model, folder / "full.onnx")
    cached = T.export_cached(small_model, folder / "kv.onnx")
    return tuple(open_session(path, threads=1, inter_op_threads=1) for path in (full, cached))


def test_cached_dynamic_shapes_mirror_the_arguments():
    ids, past = T.cached_dynamic_shapes(SMALL)
    assert set(ids) == {0, 1} and isinstance(past, tuple) and len(past) == 2 * SMALL.n_layers
    assert all(set(spec) == {0, 2} and spec[0] is ids[0] for spec in past)  # one batch axis shared by every input


def test_exports_have_dynamic_axes_and_named_io(sessions):
    full, cached = sessions
    assert full.get_providers() == ["CPUExecutionProvider"]
    assert [i.name for i in full.get_inputs()] == ["input_ids"]
    assert [o.name for o in full.get_outputs()] == ["logits"]
    inputs, outputs = T.cache_names(SMALL)
    assert [i.name for i in cached.get_inputs()] == inputs
    assert [o.name for o in cached.get_outputs()] == outputs
    past_shape = cached.get_inputs()[1].shape
    assert isinstance(past_shape[0], str) and isinstance(past_shape[2], str)
    assert past_shape[1] == SMALL.n_heads and past_shape[3] == SMALL.head_dim


def test_export_rejects_a_path_that_is_not_onnx(small_model, tmp_path):
    with pytest.raises(ValueError, match=r"must end in \.onnx"):
        T.export_cached(small_model, tmp_path / "x.bin")
    assert not list(tmp_path.iterdir())


def test_export_leaves_the_callers_model_alone(small_model, tmp_path):
    small_model.train()
    try:
        T.export_full(small_model, tmp_path / "full.onnx")
        assert small_model.training
    finally:
        small_model.eval()


def test_generation_over_both_exports_matches_pytorch_every_step(small_model, sessions):
    full, cached = sessions
    prompts = T.make_reversal_data(4, seed=2).prompts
    reference = T.generate_torch(small_model, prompts, 6)
    for name, generate, session in (("full", generation.generate_full, full), ("cached", generation.generate_cached, cached)):
        result = generate(session, prompts, 6)
        assert result.tokens.shape == (4, 6) and result.logits.shape == (6, 4, SMALL.vocab_size)
        for step, (want, got) in enumerate(zip(reference.step_logits, result.step_logits, strict=True)):
            compare(want, got, atol=1e-4, rtol=1e-3, name=f"{name} step {step}")
        np.testing.assert_array_equal(result.tokens, reference.tokens)


def test_generation_rejects_bad_inputs(sessions):
    full, cached = sessions
    with pytest.raises(ValueError, match="integer array"):
        generation.generate_full(full, np.zeros((2, 3), np.float32), 2)
    with pytest.raises(ValueError, match="new_tokens"):
        generation.generate_cached(cached, T.encode("12"), 0)
    with pytest.raises(ValueError, match="needs the cached export"):
        generation.generate_cached(full, T.encode("12"), 2)


def test_training_is_deterministic_and_learns():
    first, log = T.train_tiny_transformer(steps=30, batch_size=16, config=SMALL)
    second, _ = T.train_tiny_transformer(steps=30, batch_size=16, config=SMALL)
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert log.steps == [30] and log.accuracy is not None and "30 steps" in repr(log)
    with pytest.raises(ValueError, match="steps"):
        T.train_tiny_transformer(steps=0)


def test_training_restores_the_thread_count():
    before = torch.get_num_threads()
    T.train_tiny_transformer(steps=1, batch_size=2, config=SMALL)
    assert torch.get_num_threads() == before


def test_ensure_reuses_cached_weights_and_trained_model_solves_the_task():
    path = T.ensure_tiny_transformer()
    stamp = path.stat().st_mtime_ns
    assert T.ensure_tiny_transformer() == path and path.stat().st_mtime_ns == stamp
    model = T.load_tiny_transformer()
    data = T.make_reversal_data(50, seed=99)
    assert T.exact_match(T.generate_torch(model, data.prompts, T.ANSWER_LENGTH).tokens, data.answers) >= 0.95
