"""Hugging Face models built locally (no Hub), exported with Optimum and run with onnxruntime-genai.

Introduced in notebook 12. Everything is made in code: ``build_tokenizer()`` turns notebook 11's
13-symbol vocabulary into a ``transformers`` fast tokenizer with the ``tokenizers`` library, a tiny
``LlamaForCausalLM`` learns notebook 11's reversal task and a tiny ``BertForSequenceClassification``
learns whether a digit string's first digit is larger than its last. ``ensure_tiny_llama()`` and
``ensure_tiny_bert()`` train them once (single thread, fixed seed) and cache the checkpoints under
``artifacts/nb12/`` with a recipe file: a changed recipe retrains. ``save_unsupported_decoder``
writes a model whose architecture Optimum has no ONNX config for, ``save_tied_llama`` an untrained tiny Llama
with tied embeddings (for sizes). ``build_genai_model`` runs
onnxruntime-genai's model builder and ``genai_generate`` its greedy generator. Importing this
module switches the Hugging Face Hub off for the process (``HF_HUB_OFFLINE=1``...) unless those
variables are already set, and keeps transformers from importing TensorFlow; transformers itself is
imported inside the functions that need it, so always after that switch.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import re
import runpy
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, processors

from labsupport.course.display import scrub_paths
from labsupport.course.paths import artifact
from labsupport.models import tiny_transformer
from labsupport.onnxutil.export import single_thread

if TYPE_CHECKING:
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        LlamaConfig,
        LlamaForCausalLM,
        PretrainedConfig,
        PreTrainedTokenizerFast,
    )

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "USE_TF": "0", "USE_TORCH": "1"}
for _key, _value in OFFLINE_ENV.items():  # a variable set explicitly wins
    os.environ.setdefault(_key, _value)

LLAMA_FOLDER, BERT_FOLDER = "nb12/tiny_llama", "nb12/tiny_bert"
RECIPE_NAME = "labsupport_recipe.json"
LLAMA_STEPS, BERT_STEPS = 400, 300
ORDER_LABELS = {0: "first<=last", 1: "first>last"}
GENAI_MAX_BATCH = 32  # onnxruntime-genai 0.15.2 refused batch_size 33: "batch_size (33) must be in [1, 32]" (notebook 12)
# what the tiny Llama and the tiny BERT share: notebook 11's vocabulary, width 64, 2 layers of 4 heads, MLP 256
TINY_SHAPE = {
    "vocab_size": len(tiny_transformer.VOCAB),
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 256,
}


# ---------------------------------------------------------------- tokenizer and configs
def build_tokenizer() -> PreTrainedTokenizerFast:
    """Notebook 11's vocabulary (digits, ``<bos>``, ``=``, ``<eos>``) as a fast tokenizer that prepends ``<bos>`` (notebook 12)."""
    from transformers import PreTrainedTokenizerFast

    vocabulary = {token: index for index, token in enumerate(tiny_transformer.VOCAB)}
    core = Tokenizer(models.BPE(vocab=vocabulary, merges=[]))  # one symbol per token: no merges to learn
    core.add_special_tokens([tiny_transformer.BOS, tiny_transformer.EOS])
    core.post_processor = processors.TemplateProcessing(
        single=f"{tiny_transformer.BOS} $A", special_tokens=[(tiny_transformer.BOS, tiny_transformer.BOS_ID)]
    )
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=tiny_transformer.BOS, eos_token=tiny_transformer.EOS, pad_token=tiny_transformer.EOS
    )


def tiny_llama_config() -> LlamaConfig:
    """A 2-layer Llama (width 64, 4 query heads sharing 2 key/value heads) over the 13-token vocabulary (notebook 12)."""
    from transformers import LlamaConfig

    special = {"bos_token_id": tiny_transformer.BOS_ID, "eos_token_id": tiny_transformer.EOS_ID, "pad_token_id": tiny_transformer.EOS_ID}
    return LlamaConfig(**TINY_SHAPE, **special, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)


def tiny_bert_config() -> BertConfig:
    """A 2-layer BERT classifier (width 64, 4 heads, 16 positions) with the labels of ``make_order_data`` (notebook 12)."""
    from transformers import BertConfig

    label2id = {label: index for index, label in ORDER_LABELS.items()}
    return BertConfig(
        **TINY_SHAPE, max_position_embeddings=16, pad_token_id=tiny_transformer.EOS_ID, id2label=dict(ORDER_LABELS), label2id=label2id
    )


@dataclass(frozen=True)
class OrderData:
    """Digit strings, their token ids (N, 9: ``<bos>`` + 8 digits) and labels (1 when the first digit > the last)."""

    texts: list[str]
    ids: np.ndarray
    labels: np.ndarray


def make_order_data(count: int, seed: int = 0) -> OrderData:
    """``count`` random 8-digit strings labelled by whether the first digit is larger than the last (notebook 12)."""
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive whole number, got {count!r}")
    digits = np.random.default_rng(seed).integers(0, 10, size=(count, tiny_transformer.NUM_DIGITS), dtype=np.int64)
    ids = np.concatenate([np.full((count, 1), tiny_transformer.BOS_ID), digits], axis=1)
    texts = ["".join(map(str, row)) for row in digits.tolist()]
    return OrderData(texts, ids, (digits[:, 0] > digits[:, -1]).astype(np.int64))


# ---------------------------------------------------------------- training and cached checkpoints
@dataclass(frozen=True)
class TrainResult:
    """What training reached: steps, final loss, held-out accuracy (exact match for the decoder) and seconds."""

    steps: int
    loss: float
    accuracy: float
    seconds: float


def _check_steps(steps: object) -> int:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive whole number, got {steps!r}")
    return steps


def _train(
    build: Callable[[], torch.nn.Module],
    steps: int,
    seed: int,
    batch_loss: Callable[[torch.nn.Module, int], torch.Tensor],
    score: Callable[[torch.nn.Module], float],
) -> tuple[Any, TrainResult]:
    """Seed, ``build()`` and train a model for ``steps`` one-cycle AdamW steps on one thread, then ``score`` it in eval mode."""
    steps, start = _check_steps(steps), time.perf_counter()
    with single_thread():
        torch.manual_seed(seed)
        model = build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.1)
        model.train()
        for step in range(1, steps + 1):
            loss = batch_loss(model, step)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        model.eval()
        accuracy = score(model)
    return model, TrainResult(steps, loss.item(), accuracy, time.perf_counter() - start)


def train_tiny_llama(steps: int = LLAMA_STEPS, seed: int = 0) -> tuple[LlamaForCausalLM, TrainResult]:
    """Train the tiny Llama on notebook 11's reversal task (answer tokens only, single thread); returns (model, result)."""
    from transformers import LlamaForCausalLM

    def answer_loss(model: torch.nn.Module, step: int) -> torch.Tensor:
        batch = torch.from_numpy(tiny_transformer.make_reversal_data(64, seed=seed * 1_000_003 + step).sequences())
        logits = model(batch[:, :-1]).logits[:, tiny_transformer.PROMPT_LENGTH - 1 :]
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, len(tiny_transformer.VOCAB)), batch[:, tiny_transformer.PROMPT_LENGTH :].reshape(-1)
        )

    def exact_match(model: torch.nn.Module) -> float:
        held_out = tiny_transformer.make_reversal_data(256, seed=seed + 12345)
        return tiny_transformer.exact_match(greedy_tokens(model, held_out.prompts, tiny_transformer.ANSWER_LENGTH), held_out.answers)

    return _train(lambda: LlamaForCausalLM(tiny_llama_config()), steps, seed, answer_loss, exact_match)


def train_tiny_bert(steps: int = BERT_STEPS, seed: int = 0) -> tuple[BertForSequenceClassification, TrainResult]:
    """Train the tiny BERT classifier on ``make_order_data`` batches (single thread); returns (model, result)."""
    from transformers import BertForSequenceClassification

    def classification_loss(model: torch.nn.Module, step: int) -> torch.Tensor:
        batch = make_order_data(64, seed=seed * 1_000_003 + step)
        return model(input_ids=torch.from_numpy(batch.ids), labels=torch.from_numpy(batch.labels)).loss

    def accuracy(model: torch.nn.Module) -> float:
        held_out = make_order_data(1000, seed=seed + 12345)
        with torch.no_grad():
            predicted = model(input_ids=torch.from_numpy(held_out.ids)).logits.argmax(-1).numpy()
        return float(np.mean(predicted == held_out.labels))

    return _train(lambda: BertForSequenceClassification(tiny_bert_config()), steps, seed, classification_loss, accuracy)


def _recipe(kind: str, config: PretrainedConfig, steps: int) -> dict[str, object]:
    import transformers

    return {
        "kind": kind,
        "steps": steps,
        "seed": 0,
        "config": config.to_diff_dict(),
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
    }


def _ensure(folder: str, recipe: dict[str, object], train: Callable[[], tuple[Any, TrainResult]], force: bool) -> Path:
    path = artifact(folder)
    recipe_file = path / RECIPE_NAME
    recipe = json.loads(json.dumps(recipe))  # as the file gives it back: JSON turns id2label's int keys into strings
    if not force and recipe_file.is_file() and json.loads(recipe_file.read_text(encoding="utf-8")).get("recipe") == recipe:
        return path
    model, result = train()
    staging = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    build_tokenizer().save_pretrained(staging)
    (staging / RECIPE_NAME).write_text(json.dumps({"recipe": recipe, "result": result.__dict__}, indent=1), encoding="utf-8")
    shutil.rmtree(path, ignore_errors=True)
    os.replace(staging, path)  # a notebook running at the same time never reads a half-written folder
    return path


def ensure_tiny_llama(force: bool = False) -> Path:
    """Folder ``artifacts/nb12/tiny_llama`` (weights, config, tokenizer); trains first when missing, stale or ``force`` (notebook 12)."""
    return _ensure(LLAMA_FOLDER, _recipe("llama", tiny_llama_config(), LLAMA_STEPS), lambda: train_tiny_llama(), force)


def ensure_tiny_bert(force: bool = False) -> Path:
    """Folder ``artifacts/nb12/tiny_bert`` (weights, config, tokenizer); trains first when missing, stale or ``force`` (notebook 12)."""
    return _ensure(BERT_FOLDER, _recipe("bert", tiny_bert_config(), BERT_STEPS), lambda: train_tiny_bert(), force)


def training_result(folder: str | Path) -> TrainResult:
    """The ``TrainResult`` stored next to a checkpoint made by ``ensure_tiny_llama`` / ``ensure_tiny_bert`` (notebook 12)."""
    recipe_file = Path(folder) / RECIPE_NAME
    if not recipe_file.is_file():
        raise FileNotFoundError(
            f"{recipe_file.name} is missing in {Path(folder).name}: make the folder with ensure_tiny_llama/ensure_tiny_bert"
        )
    return TrainResult(**json.loads(recipe_file.read_text(encoding="utf-8"))["result"])


# ---------------------------------------------------------------- greedy generation, compared token by token
def greedy_tokens(model: Any, prompts: np.ndarray, new_tokens: int) -> np.ndarray:
    """Greedy ``generate`` of a transformers or Optimum ORT model: the (N, new_tokens) continuation, padded with ``<eos>`` (notebook 12)."""
    ids = torch.from_numpy(np.asarray(prompts, dtype=np.int64))
    if ids.ndim != 2:
        raise ValueError(f"prompts must be a (batch, length) array of token ids, got shape {tuple(ids.shape)}")
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False, pad_token_id=tiny_transformer.EOS_ID
        )
    new = out[:, ids.shape[1] :].numpy()  # shorter than new_tokens when every row stopped at <eos>
    return np.pad(new, ((0, 0), (0, new_tokens - new.shape[1])), constant_values=tiny_transformer.EOS_ID)


def until_eos(tokens: Sequence[int] | np.ndarray) -> list[int]:
    """The tokens before the first ``<eos>``: generators differ in whether they keep it, the text does not (notebook 12)."""
    out = []
    for token in np.asarray(tokens).reshape(-1).tolist():
        if token == tiny_transformer.EOS_ID:
            break
        out.append(int(token))
    return out


# ---------------------------------------------------------------- command lines, offline
@dataclass(frozen=True)
class CommandRun:
    """A command's exit status and its output lines (this machine's paths replaced by placeholders)."""

    returncode: int
    lines: list[str]

    def matching(self, pattern: str) -> list[str]:
        """The output lines that match the regular expression ``pattern``."""
        return [line for line in self.lines if re.search(pattern, line)]


def run_offline(arguments: Sequence[str], cwd: str | Path | None = None, verbose: bool = False, timeout: float = 600) -> CommandRun:
    """Run a command with the Hub switched off (``HF_HUB_OFFLINE=1``...), capturing stdout and stderr (notebook 12).

    ``verbose`` sets ``TRANSFORMERS_VERBOSITY=info`` (Optimum then logs its validation step); a command
    still running after ``timeout`` seconds is killed (``subprocess.TimeoutExpired``).
    """
    env = {**os.environ, **OFFLINE_ENV, **({"TRANSFORMERS_VERBOSITY": "info"} if verbose else {})}
    done = subprocess.run(list(map(str, arguments)), cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=timeout)
    return CommandRun(done.returncode, scrub_paths(done.stdout + done.stderr).splitlines())


def optimum_cli() -> str:
    """The ``optimum-cli`` next to this Python (in the course's .venv) (notebook 12)."""
    path = Path(sys.executable).with_name("optimum-cli")
    if not path.is_file():
        raise FileNotFoundError(f"optimum-cli is not installed next to {Path(sys.executable).name}; run `make lab` (optimum-onnx)")
    return str(path)


# ---------------------------------------------------------------- onnxruntime-genai
GENAI_BUILDER = "onnxruntime_genai.models.builder"


def genai_status() -> tuple[bool, str]:
    """Whether onnxruntime-genai and its model builder import with the installed packages, and the reason if not (notebook 12)."""
    try:
        import onnxruntime_genai as og
    except ImportError as error:
        return False, f"onnxruntime_genai does not import: {error}"
    try:
        importlib.import_module(GENAI_BUILDER)
    except ImportError as error:  # e.g. a builder written for a newer transformers than the pinned one
        return False, f"onnxruntime-genai {og.__version__}'s model builder does not import here: {scrub_paths(str(error))}"
    return True, f"onnxruntime-genai {og.__version__} and its model builder import with transformers {transformers_version()}"


def transformers_version() -> str:
    """The installed transformers version (the model builder and Optimum each accept only some) (notebook 12)."""
    import transformers

    return transformers.__version__


def build_genai_model(
    checkpoint: str | Path, output: str | Path, precision: str = "int4", extra_options: dict[str, str] | None = None
) -> CommandRun:
    """Run onnxruntime-genai's model builder on a local checkpoint, in this process (notebook 12).

    The same as ``python -m onnxruntime_genai.models.builder -i <checkpoint> -o <output> -p <precision> -e cpu
    -c <cache> [--extra_options key=value ...]`` on a command line, without a second Python importing torch again.
    Returns its output lines.
    """
    if precision not in {"fp32", "int4", "int8"}:
        raise ValueError(f"precision must be fp32, int4 or int8 for the CPU, got {precision!r}")
    if not (Path(checkpoint) / "config.json").is_file():
        raise FileNotFoundError(f"{Path(checkpoint).name} is not a Hugging Face checkpoint folder (no config.json)")
    shutil.rmtree(output, ignore_errors=True)
    cache = Path(output).with_name(f"{Path(output).name}_cache")
    arguments = ["-i", str(checkpoint), "-o", str(output), "-p", precision, "-e", "cpu", "-c", str(cache)]
    if extra_options:
        arguments += ["--extra_options", *(f"{key}={value}" for key, value in extra_options.items())]
    captured, saved_argv, saved_level = io.StringIO(), sys.argv, logging.root.manager.disable
    try:
        sys.argv = [GENAI_BUILDER, *arguments]
        logging.disable(logging.INFO)  # its quantizer logs every node
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)  # genai_status imported it
            runpy.run_module(GENAI_BUILDER, run_name="__main__", alter_sys=False)
    finally:
        sys.argv = saved_argv
        logging.disable(saved_level)
        shutil.rmtree(cache, ignore_errors=True)
    return CommandRun(0, scrub_paths(captured.getvalue()).splitlines())


def genai_generate(model: Any, prompts: np.ndarray, max_length: int) -> list[list[int]]:
    """Greedy generation with ``og.Generator`` in batches of at most 32; each row's new tokens before ``<eos>`` (notebook 12).

    ``model`` is a loaded ``og.Model`` (reuse it: loading costs about as much as a small generation) or a genai folder.
    """
    import onnxruntime_genai as og

    prompts = np.asarray(prompts)
    if prompts.ndim != 2 or not np.issubdtype(prompts.dtype, np.integer):
        raise ValueError(f"prompts must be a (batch, length) integer array of token ids, got {prompts.dtype} {prompts.shape}")
    if isinstance(model, (str, os.PathLike)):
        model = og.Model(str(model))
    elif not isinstance(model, og.Model):
        raise TypeError(f"model must be an og.Model or the path of a genai folder, got {type(model).__name__}")
    out = []
    for start in range(0, len(prompts), GENAI_MAX_BATCH):
        chunk = prompts[start : start + GENAI_MAX_BATCH]
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=max_length, batch_size=len(chunk))
        generator = og.Generator(model, params)
        generator.append_tokens(chunk.astype(np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        out += [until_eos(generator.get_sequence(row)[chunk.shape[1] :]) for row in range(len(chunk))]
    return out


# ---------------------------------------------------------------- tied embeddings, for size arithmetic
def save_tied_llama(folder: str | Path, seed: int = 0) -> Path:
    """Save a freshly initialised (untrained) tiny Llama whose ``lm_head`` is its token embedding
    (``tie_word_embeddings=True``, as in Llama-3.2 and Qwen2.5): for what exporters write, not for generation (notebook 12).

    Its norm weights are random too: a fresh model's are all ones, and Optimum's export stores equal tensors once.
    """
    from transformers import LlamaForCausalLM

    config = tiny_llama_config()
    config.tie_word_embeddings = True
    with single_thread(), torch.no_grad():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.normal_(1.0, 0.1)
    model.save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return Path(folder)


# ---------------------------------------------------------------- an architecture Optimum does not know (yet)
def save_unsupported_decoder(folder: str | Path, seed: int = 0) -> Path:
    """Save a freshly initialised tiny ``MinistralForCausalLM`` (Optimum has no ONNX config for it), window 4, layers sliding+full (notebook 12)."""
    from transformers import MinistralConfig, MinistralForCausalLM

    base = tiny_llama_config()
    config = MinistralConfig(
        vocab_size=base.vocab_size,
        hidden_size=base.hidden_size,
        intermediate_size=base.intermediate_size,
        num_hidden_layers=base.num_hidden_layers,
        num_attention_heads=base.num_attention_heads,
        num_key_value_heads=base.num_key_value_heads,
        head_dim=base.hidden_size // base.num_attention_heads,
        max_position_embeddings=base.max_position_embeddings,
        sliding_window=4,  # shorter than the prompts, so that a parity check exercises the window
        layer_types=["sliding_attention", "full_attention"],  # what Ministral adds to Mistral
        bos_token_id=tiny_transformer.BOS_ID,
        eos_token_id=tiny_transformer.EOS_ID,
        pad_token_id=tiny_transformer.EOS_ID,
    )
    with single_thread():
        torch.manual_seed(seed)
        model = MinistralForCausalLM(config).eval()
    model.save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return Path(folder)
