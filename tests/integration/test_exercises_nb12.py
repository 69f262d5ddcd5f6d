"""Exercises of notebook 12: typical wrong answers fail (the reference solutions pass in tests/integration/test_exercises_api.py)."""

import shutil

import numpy as np
import onnx
import pytest
import torch

from labsupport.exercises import CORRECT, INCORRECT, nb12
from labsupport.topics import hugging_face


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A no-past export of the course Llama, and a with-past export of another (untrained) Llama."""
    from optimum.exporters.onnx import main_export
    from transformers import LlamaForCausalLM

    root = tmp_path_factory.mktemp("nb12")
    main_export(str(hugging_face.ensure_tiny_llama()), str(root / "no_past"), task="text-generation")
    torch.manual_seed(1)
    LlamaForCausalLM(hugging_face.tiny_llama_config()).save_pretrained(root / "other")
    hugging_face.build_tokenizer().save_pretrained(root / "other")
    main_export(str(root / "other"), str(root / "other_with_past"), task="text-generation-with-past")
    return root


def test_q1_rejects_wrong_folders(exports, tmp_path):
    (tmp_path / "empty").mkdir()
    hugging_face.save_unsupported_decoder(tmp_path / "ministral")
    onnx.save(onnx.load(exports / "no_past" / "model.onnx"), tmp_path / "ministral" / "model.onnx")
    for wrong, reason in [
        (exports / "no_past", "no past_key_values inputs"),
        (exports / "other_with_past", "differ from transformers'"),
        (tmp_path / "ministral", "not the tiny Llama"),
        (tmp_path / "empty", "has no model.onnx"),
        (tmp_path / "missing", "is not a folder"),
        (42, "expected the path"),
    ]:
        outcome = nb12.q1.evaluate(wrong)
        assert outcome.status == INCORRECT and reason in outcome.message, (wrong, outcome.message)


def test_q1_blames_the_answer_for_broken_or_borrowed_folders(exports, tmp_path, monkeypatch):
    from labsupport.course import paths
    from labsupport.topics.quantization import make_int4

    corrupt = shutil.copytree(exports / "other_with_past", tmp_path / "corrupt")
    (corrupt / "model.onnx").write_bytes((corrupt / "model.onnx").read_bytes()[:5000])  # an interrupted export
    no_config = shutil.copytree(exports / "other_with_past", tmp_path / "no_config")
    (no_config / "config.json").unlink()
    quantized = shutil.copytree(exports / "other_with_past", tmp_path / "quantized")
    make_int4(exports / "other_with_past" / "model.onnx", quantized / "model.onnx", block_size=32)
    monkeypatch.setenv(paths.ARTIFACTS_ENV_VAR, str(tmp_path / "artifacts"))
    notebooks_own = shutil.copytree(exports / "other_with_past", paths.artifact("nb12/llama_with_past"))
    for wrong, reason in [
        (corrupt, "onnx cannot read the folder's model.onnx"),
        (no_config, "has no config.json"),
        (quantized, "quantized (MatMulNBits)"),
        (notebooks_own, "the folder the notebook wrote"),
        (str(notebooks_own), "the folder the notebook wrote"),
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
