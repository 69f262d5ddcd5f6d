"""Exercises of notebook 12 (Hugging Face transformers to ONNX): a KV-cache export with Optimum, counting fused Attention nodes."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer
from labsupport.models.contract import IR_VERSION, OPSET

PARITY_PROMPTS = 32
NOTEBOOK_EXPORTS = ("llama_with_past", "llama_with_past_int4")  # folders notebook 12 itself wrote under artifacts/nb12/


# ---------------------------------------------------------------- exercise 1: export with past key values
def _folder(answer: object) -> Path:
    if not isinstance(answer, (str, os.PathLike)):
        raise Incorrect(f"expected the path of the exported folder (a str or Path), got {type(answer).__name__}")
    folder = Path(answer)
    if not folder.is_dir():
        raise Incorrect(f"{folder.name!r} is not a folder: give the output folder that main_export / optimum-cli wrote")
    if not (folder / "model.onnx").is_file():
        raise Incorrect(f"{folder.name!r} has no model.onnx: is it the export's output folder?")
    return folder


def _not_the_notebooks_own(folder: Path) -> None:
    from labsupport.course import paths

    for name in NOTEBOOK_EXPORTS:
        if folder.resolve() == paths.artifact(f"nb12/{name}").resolve():
            raise Incorrect(f"artifacts/nb12/{name} is the folder the notebook wrote; export the model yourself, into a new folder")


def _check_past_export(answer: object) -> str:
    folder = _folder(answer)
    _not_the_notebooks_own(folder)
    if not (folder / "config.json").is_file():
        raise Incorrect(f"{folder.name!r} has no config.json: Optimum's export writes one next to model.onnx")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "llama":
        raise Incorrect(f"that folder holds a {config.get('model_type')!r} model, not the tiny Llama")
    with blame_answer("onnx cannot read the folder's model.onnx (an interrupted export?)"):
        graph = onnx.load(folder / "model.onnx", load_external_data=False).graph
    inputs = [i.name for i in graph.input]
    if not any(name.startswith("past_key_values") for name in inputs):
        raise Incorrect(f"the model has no past_key_values inputs ({inputs}): export with task='text-generation-with-past'")
    if any(node.op_type == "MatMulNBits" for node in graph.node):
        raise Incorrect("that model is quantized (MatMulNBits): the exercise asks for the FP32 export itself")

    from optimum.onnxruntime import ORTModelForCausalLM
    from transformers import AutoModelForCausalLM

    from labsupport.models import tiny_transformer
    from labsupport.topics import hugging_face

    prompts = tiny_transformer.make_reversal_data(PARITY_PROMPTS, seed=7).prompts
    want = hugging_face.greedy_tokens(
        AutoModelForCausalLM.from_pretrained(hugging_face.ensure_tiny_llama()).eval(), prompts, tiny_transformer.ANSWER_LENGTH
    )
    with blame_answer("ORTModelForCausalLM cannot load or run the folder"):
        got = hugging_face.greedy_tokens(ORTModelForCausalLM.from_pretrained(str(folder)), prompts, tiny_transformer.ANSWER_LENGTH)
    differ = int(np.sum(np.any(got != want, axis=1)))
    if differ:
        raise Incorrect(
            f"{differ} of {PARITY_PROMPTS} greedy generations differ from transformers': was it exported from hugging_face.ensure_tiny_llama()?"
        )
    return f"{len(inputs) - 3} past_key_values inputs, and {PARITY_PROMPTS} greedy generations token-exact with transformers"


# ---------------------------------------------------------------- exercise 2: count the fused Attention nodes
MS = "com.microsoft"
# (nodes as (op_type, domain), the count of com.microsoft Attention nodes)
Q2_GRAPHS: list[tuple[list[tuple[str, str]], int]] = [
    ([("Attention", MS)] * 3 + [("MultiHeadAttention", MS), ("Softmax", "")], 3),
    ([("MatMul", ""), ("Softmax", ""), ("Softmax", "")], 0),
    ([("GroupQueryAttention", MS)] * 2 + [("Attention", MS), ("Attention", "my.custom.domain")], 1),
    ([("Attention", ""), ("Attention", MS), ("Softmax", "")], 1),  # ai.onnx has its own Attention since opset 23
]


def _write_graph(nodes: list[tuple[str, str]], path: Path) -> None:
    """A chain x -> y0 -> y1 ... of the given ops: enough to count, not meant to run."""
    names = ["x", *(f"y{i}" for i in range(len(nodes)))]
    graph_nodes = [helper.make_node(op, [names[i]], [names[i + 1]], domain=domain) for i, (op, domain) in enumerate(nodes)]
    first = helper.make_tensor_value_info(names[0], TensorProto.FLOAT, [1])
    last = helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])
    graph = helper.make_graph(graph_nodes, "count_me", [first], [last])
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1), helper.make_opsetid("my.custom.domain", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION), path)


def _check_count(answer: object) -> str:
    if not callable(answer):
        raise Incorrect(f"expected a function path -> number of Attention nodes, got {type(answer).__name__}")
    with tempfile.TemporaryDirectory() as folder:
        for index, (nodes, want) in enumerate(Q2_GRAPHS):
            path = Path(folder) / f"graph{index}.onnx"
            _write_graph(nodes, path)
            got = answer(str(path))
            if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
                raise Incorrect(f"answer(path) must return a whole number, got {type(got).__name__} {got!r}")
            if got != want:
                listing = ", ".join(f"{op} ({domain or 'ai.onnx'})" for op, domain in nodes)
                raise Incorrect(f"a graph with {listing} holds {want} com.microsoft Attention node(s), your function says {got}")
    return "only com.microsoft Attention counts; now try answer(FUSED_BERT): one per layer"


q1 = Exercise(
    1,
    "export with past key values",
    _check_past_export,
    hint=(
        "main_export(hugging_face.ensure_tiny_llama(), <folder>, task=...) with the task whose name ends in '-with-past'; "
        "the folder can be paths.artifact('nb12/my_export')."
    ),
    solution_code="""
        from optimum.exporters.onnx import main_export

        from labsupport.course import paths
        from labsupport.topics import hugging_face

        answer = paths.artifact("nb12/exercise_with_past")
        main_export(str(hugging_face.ensure_tiny_llama()), str(answer), task="text-generation-with-past")
    """,
)

q2 = Exercise(
    2,
    "count the fused attention",
    _check_count,
    hint=(
        "onnx.load(path) gives the model; walk model.graph.node and count the nodes whose op_type is exactly "
        "'Attention' AND whose domain is 'com.microsoft' (the standard domain is '', and ONNX has its own Attention "
        "since opset 23). The checker's graphs are not runnable (one-input nodes without attributes): inspect them "
        "with onnx.load, do not load them into ONNX Runtime."
    ),
    solution_code="""
        import onnx

        def answer(path):
            model = onnx.load(path, load_external_data=False)
            return sum(node.op_type == "Attention" and node.domain == "com.microsoft" for node in model.graph.node)
    """,
)

EXERCISES = [q1, q2]
