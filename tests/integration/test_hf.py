"""labsupport.topics.hugging_face: the local tokenizer, the tiny configs and data, the cached checkpoints' recipe, generation helpers (notebook 12).

Fast: nothing here trains a model or exports one (notebook 12 and tests/integration/test_exercises_nb12.py do).
"""

import json

import numpy as np
import pytest
import torch

from labsupport.models import tiny_transformer as T
from labsupport.topics import hugging_face


def test_import_switches_the_hub_off():
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"


def test_tokenizer_speaks_notebook_11s_ids():
    tokenizer = hugging_face.build_tokenizer()
    assert tokenizer("31415926=").input_ids == T.encode("31415926")[0].tolist()
    assert tokenizer.decode([6, 2, T.EOS_ID], skip_special_tokens=True) == "62"
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, len(tokenizer)) == (T.BOS_ID, T.EOS_ID, len(T.VOCAB))


def test_tokenizer_round_trips_through_save_pretrained(tmp_path):
    from transformers import AutoTokenizer

    hugging_face.build_tokenizer().save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("2718=").input_ids == [T.BOS_ID, 2, 7, 1, 8, T.SEP_ID]


def test_configs_describe_tiny_models():
    llama, bert = hugging_face.tiny_llama_config(), hugging_face.tiny_bert_config()
    assert (llama.num_hidden_layers, llama.num_attention_heads, llama.num_key_value_heads) == (2, 4, 2)
    assert llama.vocab_size == bert.vocab_size == len(T.VOCAB)
    assert bert.id2label == hugging_face.ORDER_LABELS and bert.max_position_embeddings > T.NUM_DIGITS + 1


def test_order_data_labels_first_against_last_digit():
    data = hugging_face.make_order_data(50, seed=3)
    assert data.ids.shape == (50, T.NUM_DIGITS + 1) and (data.ids[:, 0] == T.BOS_ID).all()
    for text, label in zip(data.texts, data.labels, strict=True):
        assert label == int(text[0] > text[-1])
    assert np.array_equal(hugging_face.make_order_data(50, seed=3).ids, data.ids)
    with pytest.raises(ValueError, match="positive whole number"):
        hugging_face.make_order_data(0)


def test_training_rejects_bad_steps():
    with pytest.raises(ValueError, match="positive whole number"):
        hugging_face.train_tiny_llama(steps=0)
    with pytest.raises(ValueError, match="positive whole number"):
        hugging_face.train_tiny_bert(steps=True)


def test_ensure_reuses_a_folder_with_the_same_recipe_and_rebuilds_a_stale_one(tmp_path, monkeypatch):
    monkeypatch.setattr(hugging_face, "artifact", lambda name: tmp_path / name)
    calls = []

    def train():
        calls.append(1)
        model = torch.nn.Linear(1, 1)
        model.save_pretrained = lambda folder: (folder.mkdir(parents=True), (folder / "config.json").write_text("{}"))
        return model, hugging_face.TrainResult(1, 0.5, 1.0, 0.1)

    recipe = {"kind": "test", "steps": 1, "config": {"id2label": {0: "no", 1: "yes"}}}  # int keys, as BertConfig has
    folder = hugging_face._ensure("nb12/x", recipe, train, force=False)
    assert hugging_face._ensure("nb12/x", recipe, train, force=False) == folder and len(calls) == 1
    assert hugging_face.training_result(folder) == hugging_face.TrainResult(1, 0.5, 1.0, 0.1)
    assert (folder / "tokenizer.json").is_file()
    hugging_face._ensure("nb12/x", {**recipe, "steps": 2}, train, force=False)
    hugging_face._ensure("nb12/x", {**recipe, "steps": 2}, train, force=True)
    assert len(calls) == 3
    assert json.loads((folder / hugging_face.RECIPE_NAME).read_text())["recipe"]["steps"] == 2
    with pytest.raises(FileNotFoundError, match="ensure_tiny_llama"):
        hugging_face.training_result(tmp_path)


def test_training_loop_is_seeded_single_threaded_and_scored_in_eval_mode():
    threads = torch.get_num_threads()
    seen, losses = [], []

    def batch_loss(model, step):
        seen.append((step, torch.get_num_threads(), model.training))
        losses.append(model(torch.ones(4, 3)).square().mean())
        return losses[-1]

    def score(model):
        assert not model.training
        return 0.75

    first, result = hugging_face._train(lambda: torch.nn.Linear(3, 1), 5, 7, batch_loss, score)
    second, _ = hugging_face._train(lambda: torch.nn.Linear(3, 1), 5, 7, batch_loss, score)
    assert torch.equal(first.weight, second.weight) and not first.training
    assert seen[:5] == [(step, 1, True) for step in range(1, 6)] and torch.get_num_threads() == threads
    assert (result.steps, result.accuracy) == (5, 0.75) and result.loss == losses[4].item()


def test_greedy_tokens_match_a_hand_written_loop():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(hugging_face.tiny_llama_config()).eval()
    prompts = T.make_reversal_data(3, seed=1).prompts
    got = hugging_face.greedy_tokens(model, prompts, 4)
    sequence = torch.from_numpy(prompts)
    with torch.no_grad():
        for _ in range(4):
            sequence = torch.cat([sequence, model(sequence).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    want = sequence[:, prompts.shape[1] :].numpy()
    for row_got, row_want in zip(got, want, strict=True):
        assert hugging_face.until_eos(row_got) == hugging_face.until_eos(row_want)
    assert got.shape == (3, 4)
    with pytest.raises(ValueError, match="batch, length"):
        hugging_face.greedy_tokens(model, prompts[0], 4)


def test_until_eos_cuts_at_the_first_eos():
    assert hugging_face.until_eos([3, 1, T.EOS_ID, 4, T.EOS_ID]) == [3, 1]
    assert hugging_face.until_eos(np.array([[5, 6]])) == [5, 6]


def test_command_run_lines_and_scrubbed_paths(tmp_path):
    import sys

    run = hugging_face.run_offline([sys.executable, "-c", f"import os; print(os.environ['HF_HUB_OFFLINE']); print({str(tmp_path)!r})"])
    assert run.returncode == 0 and run.lines[0] == "1"
    assert str(tmp_path) not in "\n".join(run.lines)
    assert run.matching("^1$") == ["1"]


def test_genai_status_and_builder_arguments(tmp_path):
    ok, reason = hugging_face.genai_status()
    assert isinstance(ok, bool) and "onnxruntime" in reason
    with pytest.raises(ValueError, match="precision"):
        hugging_face.build_genai_model(tmp_path, tmp_path / "out", "fp16")
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        hugging_face.build_genai_model(tmp_path, tmp_path / "out", "int4")
    with pytest.raises(ValueError, match="integer array"):
        hugging_face.genai_generate(tmp_path, np.zeros((2, 3), np.float32), 5)
    with pytest.raises(TypeError, match=r"og\.Model or the path"):
        hugging_face.genai_generate(42, np.zeros((2, 3), np.int64), 5)


def test_unsupported_decoder_is_saved_with_its_tokenizer(tmp_path):
    folder = hugging_face.save_unsupported_decoder(tmp_path / "ministral")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "ministral" and (folder / "tokenizer.json").is_file()
    assert config["sliding_window"] == 4 < T.PROMPT_LENGTH  # the notebook's parity check runs through the window
    assert config["layer_types"] == ["sliding_attention", "full_attention"]


def test_tied_llama_shares_its_lm_head_with_the_embedding(tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hugging_face.save_tied_llama(tmp_path / "tied"))
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.get_input_embeddings().weight
    untied = hugging_face.tiny_llama_config()
    assert not untied.tie_word_embeddings and untied.vocab_size == model.config.vocab_size
    assert (tmp_path / "tied" / "tokenizer.json").is_file()


def test_build_genai_model_passes_extra_options(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(hugging_face.runpy, "run_module", lambda *args, **kwargs: seen.setdefault("argv", list(hugging_face.sys.argv)))
    (tmp_path / "config.json").write_text("{}")
    hugging_face.build_genai_model(tmp_path, tmp_path / "out", "int4", {"shared_embeddings": "false"})
    assert seen["argv"][-2:] == ["--extra_options", "shared_embeddings=false"]
