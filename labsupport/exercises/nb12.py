"""Exercises of notebook 12 (Hugging Face transformers to ONNX): a greedy loop over Optimum's with-past export, counting fused Attention nodes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer
from labsupport.models.contract import IR_VERSION, OPSET

PARITY_PROMPTS = 32


# ---------------------------------------------------------------- exercise 1: a greedy loop over Optimum's with-past export
def _with_past_session():
    """A session of the tiny Llama's with-past export: the notebook's own, or a fresh export when it is missing."""
    from labsupport.course import paths
    from labsupport.onnxutil.sessions import open_session

    path = paths.artifact("nb12/llama_with_past/model.onnx")
    if not path.is_file():
        from optimum.exporters.onnx import main_export

        from labsupport.onnxutil.export import quiet_export
        from labsupport.topics import hugging_face

        with quiet_export():
            main_export(str(hugging_face.ensure_tiny_llama()), str(path.parent), task="text-generation-with-past")
    return open_session(path, threads=1, inter_op_threads=1)


PAST_PREFIX, PRESENT_PREFIX = "past_key_values.", "present."


class _RecordingSession:
    """A session that forwards every call and records, for each ``run``, how many tokens it fed and whether its past was
    the previous call's ``present.*``: the checker can then tell a cached loop from one that recomputes the sequence."""

    def __init__(self, session: object) -> None:
        self._session = session
        self._previous: dict[str, np.ndarray] = {}  # the previous call's present.* outputs, by past input name
        self.calls: list[tuple[int, int, bool]] = []  # (input_ids width, past length, past == previous present.*)

    def __getattr__(self, name: str) -> object:
        return getattr(self._session, name)

    def run(self, output_names: list[str] | None, input_feed: dict[str, object], *args: object, **kwargs: object) -> list:
        pasts = {name: np.asarray(value) for name, value in input_feed.items() if name.startswith(PAST_PREFIX)}
        past_length = next(iter(pasts.values())).shape[2] if pasts and next(iter(pasts.values())).ndim == 4 else 0
        _check_feeds(self._session, input_feed, pasts, past_length, call=len(self.calls) + 1)
        outputs = self._session.run(output_names, input_feed, *args, **kwargs)
        carried = bool(pasts) and all(
            name in self._previous and np.array_equal(value, self._previous[name]) for name, value in pasts.items()
        )
        self.calls.append((np.asarray(input_feed["input_ids"]).shape[1], past_length, carried))
        names = output_names or [output.name for output in self._session.get_outputs()]
        self._previous = {
            PAST_PREFIX + name.removeprefix(PRESENT_PREFIX): np.asarray(value)
            for name, value in zip(names, outputs, strict=True)
            if name.startswith(PRESENT_PREFIX)
        }
        return outputs


def _check_feeds(session: object, feed: dict[str, object], pasts: dict[str, np.ndarray], past_length: int, call: int) -> None:
    """Name, in the loop's terms, the feeds ONNX Runtime would refuse with an index or shape error: the past's heads,
    position_ids (one per token fed, per row or one row for all) and the attention mask's width (one column per position seen so far, past included)."""
    declared = {i.name: i.shape for i in session.get_inputs()}
    for name, past in pasts.items():
        heads = declared.get(name, [None, None])[1]
        if past.ndim == 4 and isinstance(heads, int) and past.shape[1] != heads:
            raise Incorrect(
                f"call {call}: {name} has {past.shape[1]} heads; this export caches {heads} key/value heads "
                f"(session.get_inputs() declares {declared[name]}), fewer than the query heads with grouped-query attention"
            )
    if "input_ids" not in feed or "attention_mask" not in feed:
        return  # ONNX Runtime names a missing input itself
    ids, mask = np.asarray(feed["input_ids"]), np.asarray(feed["attention_mask"])
    if ids.ndim != 2 or mask.ndim != 2:
        return
    positions = np.asarray(feed.get("position_ids", ids))
    if positions.shape not in (ids.shape, (1, ids.shape[1])):  # one row for the whole batch broadcasts, as transformers builds it
        raise Incorrect(
            f"call {call}: position_ids has shape {positions.shape}, input_ids {ids.shape}: position_ids give the position "
            f"of each token fed, here {past_length}..{past_length + ids.shape[1] - 1}, so their shape is input_ids' "
            f"(or {(1, ids.shape[1])}, one row shared by the batch)"
        )
    want = (ids.shape[0], past_length + ids.shape[1])
    if mask.shape == want:
        return
    if mask.shape[0] == want[0] and mask.shape[1] > want[1]:
        raise Incorrect(
            f"call {call}: attention_mask has {mask.shape[1]} columns, but the past fed holds only {past_length} positions "
            f"and input_ids {ids.shape[1]}: feed the previous step's present.* as the past (the mask covers past + new)"
        )
    raise Incorrect(
        f"call {call}: attention_mask has shape {mask.shape}, but it covers every position seen so far: "
        f"{past_length} in the past + {ids.shape[1]} new = {want[1]} columns, shape {want}; grow it by one column each step"
    )


def _check_cache_use(calls: list[tuple[int, int, bool]], prompt_length: int, new_tokens: int) -> None:
    """Each generation: one call on the prompt with an empty past, then one call per new token fed the previous present.*."""
    rule = (
        f"each generation starts with one session.run on the prompt ({prompt_length} tokens, an empty past), whose logits give "
        f"the first token; each further call feeds only the newest token and the previous step's present.* as its past "
        f"({new_tokens} calls in all for {new_tokens} tokens)"
    )
    if not calls:
        raise Incorrect("your loop never called session.run on the session it was given")
    step = 0
    for index, (width, past_length, carried) in enumerate(calls):
        if past_length == 0:
            if width != prompt_length or step not in (0, new_tokens):
                raise Incorrect(f"call {index + 1} fed {width} tokens with an empty past, after {step} of {new_tokens} steps: {rule}")
            step = 0
        elif width != 1 or not carried or past_length != prompt_length + step - 1:
            raise Incorrect(
                f"call {index + 1} fed {width} token(s) and a past of {past_length} positions"
                f"{'' if carried else ' that is not the previous present.*'}: {rule}"
            )
        step += 1
    if step != new_tokens:
        raise Incorrect(f"the last generation made {step} session.run calls for {new_tokens} new tokens: {rule}")


def _check_loop(answer: object) -> str:
    if not callable(answer):
        raise Incorrect(f"expected a function (session, prompts, new_tokens) -> token array, got {type(answer).__name__}")
    from transformers import AutoModelForCausalLM

    from labsupport.models import tiny_transformer
    from labsupport.topics import hugging_face

    prompts = tiny_transformer.make_reversal_data(PARITY_PROMPTS, seed=7).prompts
    steps = tiny_transformer.ANSWER_LENGTH
    want = hugging_face.greedy_tokens(AutoModelForCausalLM.from_pretrained(hugging_face.ensure_tiny_llama()).eval(), prompts, steps)
    session = _RecordingSession(_with_past_session())
    with blame_answer("your loop failed on the session"):
        got = answer(session, prompts.copy(), steps)
    got = np.asarray(got)
    if got.shape != want.shape:
        raise Incorrect(f"expected the new tokens only, shape (prompts, new_tokens) = {want.shape}, got {got.shape}")
    if not np.issubdtype(got.dtype, np.integer):
        raise Incorrect(f"expected integer token ids, got dtype {got.dtype}")
    _check_cache_use(session.calls, prompts.shape[1], steps)
    differ = sum(hugging_face.until_eos(g) != hugging_face.until_eos(w) for g, w in zip(got, want, strict=True))
    if differ:
        raise Incorrect(
            f"{differ} of {PARITY_PROMPTS} rows differ from transformers' greedy tokens: do position_ids continue after the "
            "prompt, does the attention_mask grow by one each step, and does each present.* go to the past input of the same name?"
        )
    return f"{PARITY_PROMPTS} greedy generations token-exact with transformers, each step fed one token and the previous present.*"


# ---------------------------------------------------------------- exercise 2: count the fused Attention nodes
MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"
# (nodes as (op_type, domain), the count of com.microsoft Attention nodes)
Q2_GRAPHS: list[tuple[list[tuple[str, str]], int]] = [
    ([("Attention", MS)] * 3 + [("MultiHeadAttention", MS), ("Softmax", "")], 3),
    ([("MatMul", ""), ("Softmax", ""), ("Softmax", "")], 0),
    ([("GroupQueryAttention", MS)] * 2 + [("Attention", MS), ("Attention", "my.custom.domain")], 1),
    ([("Attention", ""), ("Attention", MS), ("Softmax", "")], 1),  # ai.onnx has its own Attention since opset 23
    ([("Attention", NCHWC), ("Attention", MS)], 1),  # a look-alike domain (ORT's own name; the graph is never run)
]


def _write_graph(nodes: list[tuple[str, str]], path: Path) -> None:
    """A chain x -> y0 -> y1 ... of the given ops: enough to count, not meant to run."""
    names = ["x", *(f"y{i}" for i in range(len(nodes)))]
    graph_nodes = [helper.make_node(op, [names[i]], [names[i + 1]], domain=domain) for i, (op, domain) in enumerate(nodes)]
    first = helper.make_tensor_value_info(names[0], TensorProto.FLOAT, [1])
    last = helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])
    graph = helper.make_graph(graph_nodes, "count_me", [first], [last])
    opsets = [
        helper.make_opsetid("", OPSET),
        helper.make_opsetid(MS, 1),
        helper.make_opsetid("my.custom.domain", 1),
        helper.make_opsetid(NCHWC, 1),
    ]
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
    "a greedy loop over the with-past export",
    _check_loop,
    hint=(
        "Read session.get_inputs(): the past's shape is (batch, key/value heads, past length, head size), so the empty past "
        "is np.zeros((batch, 2, 0, 16), np.float32) for each past_key_values.* input. Step 0 feeds the prompt with "
        "position_ids 0..length-1 and a mask of ones; each later step feeds the argmax token, position_ids = the last + 1, "
        "a mask one column longer, and the present.* outputs as the next past (same order)."
    ),
    solution_code="""
        import numpy as np

        def answer(session, prompts, new_tokens):
            inputs = session.get_inputs()
            past_inputs = [i for i in inputs if i.name.startswith("past_key_values")]
            batch, length = prompts.shape
            _, kv_heads, _, head_size = past_inputs[0].shape  # the key/value heads, not the query heads
            past = {i.name: np.zeros((batch, kv_heads, 0, head_size), np.float32) for i in past_inputs}
            ids, positions, mask = prompts, np.tile(np.arange(length), (batch, 1)), np.ones((batch, length), np.int64)
            new = []
            for _ in range(new_tokens):
                logits, *presents = session.run(None, {"input_ids": ids, "position_ids": positions, "attention_mask": mask, **past})
                ids = logits[:, -1].argmax(-1)[:, None]
                new.append(ids)
                past = dict(zip(past, presents, strict=True))  # present.i.key/value come in the past inputs' order
                positions = positions[:, -1:] + 1
                mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
            return np.concatenate(new, axis=1)
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

# ---------------------------------------------------------------- exercise 3 (transfer): export a token classifier
TOKEN_LABELS = {0: "low", 1: "middle", 2: "high"}
_TOKEN_TEXTS = ["31415926", "27182818", "14142135", "17320508"]


def save_token_classifier(folder: str | Path, seed: int = 12) -> Path:
    """A tiny, untrained ``BertForTokenClassification`` (one label per token, 3 labels) with the course tokenizer, saved
    as a transformers folder: an architecture and a task notebook 12 does not export (exercise 3)."""
    import torch
    from transformers import BertConfig, BertForTokenClassification

    from labsupport.topics import hugging_face

    tokenizer = hugging_face.build_tokenizer()
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        id2label=TOKEN_LABELS,
        label2id={label: index for index, label in TOKEN_LABELS.items()},
    )
    torch.manual_seed(seed)
    model = BertForTokenClassification(config).eval()
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _token_inputs(folder: Path) -> dict[str, np.ndarray]:
    from transformers import AutoTokenizer

    encoded = AutoTokenizer.from_pretrained(str(folder))(_TOKEN_TEXTS, return_tensors="np")
    return {name: values.astype(np.int64) for name, values in encoded.items()}


def _torch_token_logits(folder: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    import torch
    from transformers import AutoModelForTokenClassification

    model = AutoModelForTokenClassification.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return model(**{name: torch.from_numpy(values) for name, values in inputs.items()}).logits.numpy()


def _check_token_export(answer: object) -> str:
    import onnxruntime as ort

    from labsupport.exercises.checks import expect_close

    if not callable(answer):
        raise Incorrect(f"expected a function answer(model_dir, onnx_dir), got {type(answer).__name__}")
    with tempfile.TemporaryDirectory(prefix="nb12-q3-") as scratch:
        model_dir, onnx_dir = save_token_classifier(Path(scratch) / "tiny_token_bert"), Path(scratch) / "onnx"
        with blame_answer("your function failed"):
            returned = answer(str(model_dir), str(onnx_dir))
        path = onnx_dir / "model.onnx"
        if not path.is_file():
            raise Incorrect(
                "no model.onnx in onnx_dir: write the export there (save_pretrained(onnx_dir) after from_pretrained(..., "
                "export=True), or main_export(model_dir, onnx_dir, task=...))"
            )
        inputs = _token_inputs(model_dir)
        want = _torch_token_logits(model_dir, inputs)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        outputs = [o.name for o in session.get_outputs()]
        if "logits" not in outputs:
            raise Incorrect(
                f"the export's outputs are {outputs}, without the classifier's logits: feature-extraction exports the encoder "
                "without its head; the task is token-classification"
            )
        feed = {i.name: inputs[i.name] for i in session.get_inputs()}
        with blame_answer("ONNX Runtime cannot run your export"):
            got = session.run(["logits"], feed)[0]
        if got.shape != want.shape:
            raise Incorrect(
                f"your export's logits have shape {got.shape}, the model's {want.shape} (batch, tokens, labels): "
                + (
                    "one row per text is a sequence classifier (text-classification); this model labels every token: "
                    "token-classification (ORTModelForTokenClassification)"
                    if got.ndim == 2
                    else "export the folder's own model and task"
                )
            )
        expect_close(want, got, what="the exported model.onnx's logits vs PyTorch", atol=1e-4, rtol=1e-3)
        if type(returned).__name__ != "ORTModelForTokenClassification":
            raise Incorrect(
                f"the file is right; return the model loaded with ONNX Runtime, an ORTModelForTokenClassification "
                f"(got {type(returned).__name__})"
            )
        import torch

        with blame_answer("the returned model cannot run"):
            returned_logits = returned(**{name: torch.from_numpy(values) for name, values in inputs.items()}).logits
        expect_close(want, np.asarray(returned_logits), what="the returned model's logits vs PyTorch", atol=1e-4, rtol=1e-3)
    return f"model.onnx gives PyTorch's per-token logits {want.shape} within atol=1e-4, and the returned ORTModelForTokenClassification too"


q3 = Exercise(
    3,
    "transfer: export a token classifier with Optimum",
    _check_token_export,
    hint=(
        "The recipe's route with the ORT class of this task: ORTModelForTokenClassification.from_pretrained(model_dir, "
        "export=True), then save_pretrained(onnx_dir), and return the model. (main_export(model_dir, onnx_dir, "
        "task='token-classification') writes the same file.)"
    ),
    solution_code="""
        from optimum.onnxruntime import ORTModelForTokenClassification

        def answer(model_dir, onnx_dir):
            model = ORTModelForTokenClassification.from_pretrained(model_dir, export=True)  # task from the class
            model.save_pretrained(onnx_dir)  # model.onnx and config.json
            return model
    """,
)

EXERCISES = [q1, q2, q3]
