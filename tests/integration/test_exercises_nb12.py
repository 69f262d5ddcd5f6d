"""Exercises of notebook 12: typical wrong answers fail (the reference solutions pass in tests/integration/test_all_exercises.py)."""

import numpy as np
import onnx
import pytest

from labsupport.exercises import CORRECT, INCORRECT, nb12


def make_loop(
    *,
    kv_heads=None,
    restart_positions=False,
    grow_mask=True,
    keep_past=True,
    with_prompt=False,
    as_float=False,
    swap_kv=False,
    mask_new_only=False,
    first_logits=False,
    first_present=False,
    positions_whole=False,
    shared_positions=False,
):
    """The reference greedy loop over the with-past export, with one known mistake switched on."""

    def loop(session, prompts, new_tokens):
        past_inputs = [i for i in session.get_inputs() if i.name.startswith("past_key_values")]
        batch, length = prompts.shape
        _, heads, _, head_size = past_inputs[0].shape
        empty = {i.name: np.zeros((batch, kv_heads or heads, 0, head_size), np.float32) for i in past_inputs}
        past, ids = dict(empty), prompts
        positions, mask = np.tile(np.arange(length), (1 if shared_positions else batch, 1)), np.ones((batch, length), np.int64)
        new, prompt_presents = [], []
        for _ in range(new_tokens):
            logits, *presents = session.run(None, {"input_ids": ids, "position_ids": positions, "attention_mask": mask, **past})
            ids = logits[:, 0 if first_logits else -1].argmax(-1)[:, None]
            new.append(ids)
            if first_present:  # the prompt's present.* fed again at every step, the mask sized for it
                prompt_presents = prompt_presents or presents
                presents = prompt_presents
            if swap_kv:  # present.i.value fed as past_key_values.i.key and the other way round
                presents = [presents[index ^ 1] for index in range(len(presents))]
            past = dict(zip(past, presents, strict=True)) if keep_past else dict(empty)
            if positions_whole:
                positions = np.tile(np.arange(positions.shape[1] + 1), (positions.shape[0], 1))
            else:
                positions = np.zeros_like(positions[:, -1:]) if restart_positions else positions[:, -1:] + 1
            if first_present:
                mask = np.ones((batch, length + 1), np.int64)
            elif mask_new_only:
                mask = np.ones((batch, 1), np.int64)
            elif grow_mask:
                mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
            elif not keep_past:
                mask = np.ones((batch, 1), np.int64)
        tokens = np.concatenate([prompts, *new] if with_prompt else new, axis=1)
        return tokens.astype(np.float32) if as_float else tokens

    return loop


def empty_past(session, batch):
    past_inputs = [i for i in session.get_inputs() if i.name.startswith("past_key_values")]
    _, heads, _, head_size = past_inputs[0].shape
    return {i.name: np.zeros((batch, heads, 0, head_size), np.float32) for i in past_inputs}


def recompute_loop(session, prompts, new_tokens):
    """Right tokens without the cache: every step feeds the whole sequence so far with an empty past (the review's)."""
    sequence = prompts
    for _ in range(new_tokens):
        batch, length = sequence.shape
        feeds = {"input_ids": sequence, "position_ids": np.tile(np.arange(length), (batch, 1)), "attention_mask": np.ones_like(sequence)}
        logits, *_ = session.run(None, {**feeds, **empty_past(session, batch)})
        sequence = np.concatenate([sequence, logits[:, -1].argmax(-1)[:, None]], axis=1)
    return sequence[:, prompts.shape[1] :]


def restart_loop(session, prompts, new_tokens):
    """Right tokens, the cache used within a step but thrown away between steps: each step replays the prompt, then the
    tokens made so far one by one (quadratic in the length, like no cache at all)."""
    batch, length = prompts.shape
    new = np.zeros((batch, 0), np.int64)
    for _ in range(new_tokens):
        sequence = np.concatenate([prompts, new], axis=1)
        past, ids = empty_past(session, batch), prompts
        for position in range(length, sequence.shape[1] + 1):
            feeds = {"input_ids": ids, "position_ids": np.arange(position - ids.shape[1], position)[None].repeat(batch, 0)}
            logits, *presents = session.run(None, {**feeds, "attention_mask": np.ones((batch, position), np.int64), **past})
            past = dict(zip(past, presents, strict=True))
            ids = sequence[:, position : position + 1]
        new = np.concatenate([new, logits[:, -1].argmax(-1)[:, None]], axis=1)
    return new


def test_q1_accepts_the_loop_and_exports_when_the_notebook_has_not(tmp_path, monkeypatch):
    import shutil

    from labsupport.course import paths
    from labsupport.topics import hugging_face

    trained = hugging_face.ensure_tiny_llama()  # the run's trained model: copied, so only the export is missing
    monkeypatch.setenv(paths.ARTIFACTS_ENV_VAR, str(tmp_path / "artifacts"))
    shutil.copytree(trained, paths.artifact(hugging_face.LLAMA_FOLDER))
    assert not paths.artifact("nb12/llama_with_past/model.onnx").exists()
    assert nb12.q1.evaluate(make_loop()).status == CORRECT
    assert paths.artifact("nb12/llama_with_past/model.onnx").is_file()
    assert nb12.q1.evaluate(nb12.q1.reference_answer()).status == CORRECT


def test_q1_accepts_one_prompt_at_a_time():
    def row_by_row(session, prompts, new_tokens):
        return np.concatenate([make_loop()(session, prompt[None], new_tokens) for prompt in prompts])

    outcome = nb12.q1.evaluate(row_by_row)
    assert outcome.status == CORRECT, outcome.message


def test_q1_accepts_one_row_of_position_ids_for_the_whole_batch():
    """Shape (1, L), broadcast over the batch: what transformers builds (cache_position.unsqueeze(0)), refused before."""
    outcome = nb12.q1.evaluate(make_loop(shared_positions=True))
    assert outcome.status == CORRECT, outcome.message
    for wrong, reason in [
        (make_loop(shared_positions=True, restart_positions=True), "rows differ from transformers'"),
        (make_loop(shared_positions=True, positions_whole=True), "call 2: position_ids has shape (1, 11), input_ids (32, 1)"),
    ]:
        outcome = nb12.q1.evaluate(wrong)
        assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


def one_call_too_many(session, prompts, new_tokens):
    """The right tokens from a loop that runs one step more than it returns."""
    return make_loop()(session, prompts, new_tokens + 1)[:, :new_tokens]


def test_q1_rejects_typical_loop_mistakes():
    not_cached = "each further call feeds only the newest token and the previous step's present.*"
    for wrong, reason in [
        (make_loop(kv_heads=4), "this export caches 2 key/value heads"),  # the 4 query heads in the empty past
        (make_loop(restart_positions=True), "rows differ from transformers'"),  # position_ids back to 0 every step
        # the mask stays the prompt's length, or covers only the new token: ORT's Gather error before (the review's)
        (make_loop(grow_mask=False), "call 2: attention_mask has shape (32, 10), but it covers every position seen so far"),
        (make_loop(mask_new_only=True), "10 in the past + 1 new = 11 columns, shape (32, 11)"),
        (make_loop(first_logits=True), "rows differ from transformers'"),  # mine: the first position's logits, not the last
        (make_loop(first_present=True), "a past of 10 positions that is not the previous present.*"),  # mine: the prompt's cache again
        (make_loop(positions_whole=True), "position_ids"),  # mine: position_ids for the whole sequence at every step
        (make_loop(keep_past=False), "feed the previous step's present.* as the past"),  # the past dropped: each step sees one token
        (make_loop(swap_kv=True), "not the previous present.*"),
        (recompute_loop, not_cached),  # right tokens, no cache: the whole sequence at every step
        (restart_loop, "fed 10 tokens with an empty past, after 1 of 9"),  # right tokens, the cache rebuilt at every step
        (one_call_too_many, "made 10 session.run calls for 9 new tokens"),  # right tokens, a wasted last step
        (make_loop(with_prompt=True), "the new tokens only"),
        (make_loop(as_float=True), "integer token ids"),
        (lambda session, prompts, new_tokens: np.zeros((len(prompts), new_tokens), np.int64), "never called session.run"),
        ("main_export", "expected a function"),
    ]:
        outcome = nb12.q1.evaluate(wrong)
        assert outcome.status == INCORRECT and reason in outcome.message, (wrong, outcome.message)


def test_q2_rejects_typical_counting_mistakes():
    def count_op_type(node_filter):
        def answer(path):
            return sum(node_filter(node) for node in onnx.load(path).graph.node)

        return answer

    for wrong, reason in [
        (count_op_type(lambda node: "Attention" in node.op_type), "your function says 4"),
        (count_op_type(lambda node: node.op_type == "Attention"), "your function says 2"),
        (count_op_type(lambda node: node.op_type == "Softmax"), "your function says 1"),
        (count_op_type(lambda node: node.op_type == "Attention" and node.domain in ("com.microsoft", "")), "your function says 2"),
        (count_op_type(lambda node: node.op_type == "Attention" and "microsoft" in node.domain), "your function says 2"),
        (count_op_type(lambda node: node.op_type == "Attention" and node.domain.startswith("com")), "your function says 2"),
        (lambda path: 2, "your function says 2"),
        (lambda path: "3", "whole number"),
        (lambda path: 3.0, "whole number"),
        (7, "expected a function"),
    ]:
        outcome = nb12.q2.evaluate(wrong)
        assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


def test_q2_accepts_numpy_integers():
    right = nb12.q2.reference_answer()
    assert nb12.q2.evaluate(lambda path: np.int64(right(path))).status == CORRECT


def _export_sequence_classifier(model_dir, onnx_dir):
    from optimum.onnxruntime import ORTModelForSequenceClassification

    model = ORTModelForSequenceClassification.from_pretrained(model_dir, export=True)  # the wrong task: one row per text
    model.save_pretrained(onnx_dir)
    return model


def _export_features(model_dir, onnx_dir):
    from optimum.exporters.onnx import main_export

    main_export(model_dir, onnx_dir, task="feature-extraction")  # the encoder without its head


def _export_without_saving(model_dir, onnx_dir):
    from optimum.onnxruntime import ORTModelForTokenClassification

    return ORTModelForTokenClassification.from_pretrained(model_dir, export=True)  # nothing written to onnx_dir


def _export_returning_nothing(model_dir, onnx_dir):
    from optimum.exporters.onnx import main_export

    main_export(model_dir, onnx_dir, task="token-classification")


def test_q3_accepts_main_export_then_loading_the_folder():
    def answer(model_dir, onnx_dir):
        from optimum.exporters.onnx import main_export
        from optimum.onnxruntime import ORTModelForTokenClassification

        main_export(model_dir, onnx_dir, task="token-classification")
        return ORTModelForTokenClassification.from_pretrained(onnx_dir)

    assert nb12.q3.evaluate(answer).status == CORRECT


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (_export_sequence_classifier, "sequence classifier"),
        (_export_features, "feature-extraction"),
        (_export_without_saving, "no model.onnx in onnx_dir"),
        (_export_returning_nothing, "return the model loaded"),
        ("ORTModelForTokenClassification", "expected a function"),
    ],
)
def test_q3_names_each_mistake(wrong, named):
    outcome = nb12.q3.evaluate(wrong)
    assert outcome.status == INCORRECT
    assert named in outcome.message
