"""A tiny decoder-only transformer, its task, its training and its ONNX exports (with and without a KV cache).

Introduced in notebook 11. The model reverses a sequence of digits: the prompt ``<bos> 3 1 4 1 5 9
2 6 =`` must be continued with ``6 2 9 5 1 4 1 3 <eos>``, so exact-match accuracy of generated
answers is measurable. ``ensure_tiny_transformer()`` trains it deterministically (single thread,
fixed seed, 400 steps) the first time and caches the weights as ``artifacts/tiny_transformer.pt``.

Two exports: ``export_full`` (input ``input_ids``, output ``logits``; the whole sequence is
recomputed every step) and ``export_cached`` (extra inputs ``past_key_<i>``/``past_value_<i>``, extra
outputs ``present_key_<i>``/``present_value_<i>``; batch, sequence and past lengths dynamic).
``generate_torch`` is the PyTorch reference of greedy decoding; the loops over ONNX Runtime are in
``labsupport.topics.generation`` and the LLM memory arithmetic in ``labsupport.topics.memory``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from labsupport.course.paths import artifact
from labsupport.onnxutil.export import export_torch, single_thread

# ---------------------------------------------------------------- the task: reverse a digit sequence
DIGITS = [str(d) for d in range(10)]
BOS, SEP, EOS = "<bos>", "=", "<eos>"
VOCAB: list[str] = [*DIGITS, BOS, SEP, EOS]
TOKEN_ID: dict[str, int] = {token: index for index, token in enumerate(VOCAB)}
BOS_ID, SEP_ID, EOS_ID = TOKEN_ID[BOS], TOKEN_ID[SEP], TOKEN_ID[EOS]
NUM_DIGITS = 8
PROMPT_LENGTH = NUM_DIGITS + 2  # <bos> digits =
ANSWER_LENGTH = NUM_DIGITS + 1  # reversed digits <eos>

WEIGHTS_NAME = "tiny_transformer.pt"


@dataclass(frozen=True)
class ReversalData:
    """Prompts (N, 10) and expected answers (N, 9) as int64 token ids for the reversal task."""

    prompts: np.ndarray
    answers: np.ndarray

    def __len__(self) -> int:
        return len(self.prompts)

    def sequences(self) -> np.ndarray:
        """Prompt followed by answer, (N, 19): what the model is trained on."""
        return np.concatenate([self.prompts, self.answers], axis=1)


def make_reversal_data(count: int, seed: int = 0, num_digits: int = NUM_DIGITS) -> ReversalData:
    """``count`` random digit strings with their reversal, made in code from ``seed`` (notebook 11)."""
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive whole number, got {count!r}")
    if not isinstance(num_digits, int) or num_digits < 1:
        raise ValueError(f"num_digits must be a positive whole number, got {num_digits!r}")
    digits = np.random.default_rng(seed).integers(0, 10, size=(count, num_digits), dtype=np.int64)
    prompts = np.concatenate([np.full((count, 1), BOS_ID), digits, np.full((count, 1), SEP_ID)], axis=1).astype(np.int64)
    answers = np.concatenate([digits[:, ::-1], np.full((count, 1), EOS_ID)], axis=1).astype(np.int64)
    return ReversalData(prompts, answers)


def encode(text: str) -> np.ndarray:
    """Token ids of a prompt such as ``"31415926"`` (digits only): ``<bos> 3 1 4 1 5 9 2 6 =`` as (1, T) int64."""
    if not text or not text.isdigit():
        raise ValueError(f"encode() expects a non-empty string of digits such as '31415926', got {text!r}")
    return np.array([[BOS_ID, *(TOKEN_ID[c] for c in text), SEP_ID]], dtype=np.int64)


def decode(ids: Sequence[int] | np.ndarray) -> str:
    """Readable text of token ids, stopping after the first ``<eos>``: ``[6, 2, 12]`` -> ``"62<eos>"``."""
    out = []
    for index in np.asarray(ids).reshape(-1).tolist():
        if not 0 <= index < len(VOCAB):
            raise ValueError(f"token id {index} is outside the vocabulary 0..{len(VOCAB) - 1}")
        out.append(VOCAB[index])
        if index == EOS_ID:
            break
    return "".join(out)


def exact_match(generated: np.ndarray, answers: np.ndarray) -> float:
    """Fraction of rows whose generated tokens equal the expected answer exactly (all tokens up to ``<eos>``)."""
    generated, answers = np.asarray(generated), np.asarray(answers)
    if generated.ndim != 2 or answers.ndim != 2 or len(generated) != len(answers):
        raise ValueError(f"expected two (N, L) arrays with the same N, got {generated.shape} and {answers.shape}")
    if generated.shape[1] < answers.shape[1]:
        raise ValueError(f"generated only {generated.shape[1]} tokens per row, the answers have {answers.shape[1]}")
    return float(np.mean(np.all(generated[:, : answers.shape[1]] == answers, axis=1)))


# ---------------------------------------------------------------- the model
@dataclass(frozen=True)
class TinyConfig:
    """Architecture of the tiny decoder: vocabulary, width, heads, layers, feed-forward width, positions."""

    vocab_size: int = len(VOCAB)
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    max_positions: int = 320

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def causal_mask(past_length: int | torch.Tensor, new_length: int | torch.Tensor) -> torch.Tensor:
    """(new, past + new) bool mask: query i (at position past + i) may attend to keys 0..past + i."""
    query_positions = torch.arange(new_length).unsqueeze(1) + past_length
    key_positions = torch.arange(past_length + new_length).unsqueeze(0)
    return key_positions <= query_positions


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention that appends new keys/values to an optional cache."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, new, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (t.reshape(batch, new, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        past_length = k.shape[2] - new
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~causal_mask(past_length, new), float("-inf"))
        out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, new, width)
        return self.proj(out), k, v


class Block(nn.Module):
    """Pre-norm transformer block: attention then a GELU feed-forward, each with a residual."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.d_model), nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, config.d_ff), nn.GELU(), nn.Linear(config.d_ff, config.d_model))

    def forward(self, x, past):
        attended, k, v = self.attn(self.ln1(x), past)
        x = x + attended
        return x + self.mlp(self.ln2(x)), k, v


class TinyDecoder(nn.Module):
    """Token + learned position embeddings, ``n_layers`` blocks, a final LayerNorm and the vocabulary head.

    ``forward(input_ids, past)`` returns ``(logits (B, T, V), presents)`` where ``presents`` is a list of
    ``(key, value)`` per layer, each (B, heads, past + T, head_dim); pass it back as ``past``.
    """

    def __init__(self, config: TinyConfig = TinyConfig()) -> None:
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = nn.Embedding(config.max_positions, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, past: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None):
        past_length = 0 if past is None else past[0][0].shape[2]
        positions = torch.arange(input_ids.shape[1]) + past_length
        x = self.tokens(input_ids) + self.positions(positions)
        presents = []
        for index, block in enumerate(self.blocks):
            x, k, v = block(x, None if past is None else past[index])
            presents.append((k, v))
        return self.head(self.ln_f(x)), presents


class FullDecoder(nn.Module):
    """Export wrapper without a cache: ``input_ids`` (B, T) -> ``logits`` (B, T, V)."""

    def __init__(self, model: TinyDecoder) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)[0]


class CachedDecoder(nn.Module):
    """Export wrapper with a KV cache: ``(input_ids, past_key_0, past_value_0, ...)`` -> ``(logits, present_key_0, ...)``."""

    def __init__(self, model: TinyDecoder) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, past_key_values: tuple[torch.Tensor, ...]):
        pairs = [(past_key_values[2 * i], past_key_values[2 * i + 1]) for i in range(len(past_key_values) // 2)]
        logits, presents = self.model(input_ids, pairs)
        return (logits, *(t for pair in presents for t in pair))


def cache_names(config: TinyConfig = TinyConfig()) -> tuple[list[str], list[str]]:
    """Input and output names of the cached export: ``input_ids, past_key_0, past_value_0, ...`` / ``logits, present_key_0, ...``."""
    past = [f"past_{kind}_{i}" for i in range(config.n_layers) for kind in ("key", "value")]
    present = [name.replace("past_", "present_") for name in past]
    return ["input_ids", *past], ["logits", *present]


def empty_cache(config: TinyConfig, batch_size: int = 1) -> list[np.ndarray]:
    """The cache before the first step: 2 * n_layers float32 arrays of shape (B, heads, 0, head_dim)."""
    return [np.zeros((batch_size, config.n_heads, 0, config.head_dim), np.float32) for _ in range(2 * config.n_layers)]


# ---------------------------------------------------------------- training and the cached weights
@dataclass
class TrainLog:
    """Loss every 100 steps and the final exact-match accuracy on a held-out set (``train_tiny_transformer``)."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: float | None = None
    seconds: float = 0.0

    def __repr__(self) -> str:
        if not self.loss:
            return "TrainLog(no steps)"
        acc = "n/a" if self.accuracy is None else f"{self.accuracy:.1%}"
        return f"TrainLog({self.steps[-1]} steps, final loss {self.loss[-1]:.3f}, held-out exact match {acc})"


def train_tiny_transformer(
    steps: int = 400, batch_size: int = 64, seed: int = 0, config: TinyConfig = TinyConfig()
) -> tuple[TinyDecoder, TrainLog]:
    """Train ``TinyDecoder`` on freshly generated reversal examples (deterministic for a seed); returns (model in eval mode, log).

    The loss is next-token cross-entropy on the answer tokens only. Single-threaded so that the
    same seed gives the same weights on every machine (notebook 11 loads the cached result).
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive whole number, got {steps!r}")
    log = TrainLog()
    start = time.perf_counter()
    with single_thread():
        torch.manual_seed(seed)
        model = TinyDecoder(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.1)
        loss_fn = nn.CrossEntropyLoss()
        model.train()
        for step in range(1, steps + 1):
            batch = torch.from_numpy(make_reversal_data(batch_size, seed=seed * 1_000_003 + step).sequences())
            logits, _ = model(batch[:, :-1])
            # position PROMPT_LENGTH - 1 (the "=") predicts the first answer token, and so on
            loss = loss_fn(logits[:, PROMPT_LENGTH - 1 :].reshape(-1, config.vocab_size), batch[:, PROMPT_LENGTH:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            if step % 100 == 0 or step == steps:
                log.steps.append(step)
                log.loss.append(loss.item())
        model.eval()
        held_out = make_reversal_data(500, seed=seed + 12345)
        log.accuracy = exact_match(generate_torch(model, held_out.prompts, ANSWER_LENGTH).tokens, held_out.answers)
    log.seconds = time.perf_counter() - start
    return model, log


def ensure_tiny_transformer(force: bool = False) -> Path:
    """Path of ``artifacts/tiny_transformer.pt``; trains the model first (quietly, 400 steps) if it is missing or ``force``."""
    path = artifact(WEIGHTS_NAME)
    if force or not path.is_file():
        model, _ = train_tiny_transformer()
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        torch.save(model.state_dict(), temporary)
        os.replace(temporary, path)  # a notebook running at the same time never reads half a file
    return path


def load_tiny_transformer() -> TinyDecoder:
    """The trained ``TinyDecoder`` in eval mode, from ``ensure_tiny_transformer()`` (notebook 11)."""
    model = TinyDecoder()
    model.load_state_dict(torch.load(ensure_tiny_transformer(), weights_only=True))
    return model.eval()


# ---------------------------------------------------------------- export
def _tiny_decoder(model: object) -> TinyDecoder:
    if not isinstance(model, TinyDecoder):
        raise TypeError(f"expected a labsupport.models.tiny_transformer.TinyDecoder, got {type(model).__name__}")
    return model


def _ids_dims(config: TinyConfig) -> dict[int, object]:
    """Batch and sequence axes of ``input_ids``, both dynamic."""
    return {0: torch.export.Dim("batch", max=4096), 1: torch.export.Dim("sequence", max=config.max_positions)}


def export_full(model: TinyDecoder, path: str | Path) -> Path:
    """Export without a cache (dynamo exporter): ``input_ids`` (batch, sequence) -> ``logits`` (batch, sequence, vocab)."""
    config = _tiny_decoder(model).config
    example = torch.from_numpy(make_reversal_data(2).prompts)
    return export_torch(
        FullDecoder(model),
        (example,),
        path,
        input_names=["input_ids"],
        output_names=["logits"],
        dynamic_shapes={"input_ids": _ids_dims(config)},
    )


def cached_dynamic_shapes(config: TinyConfig = TinyConfig()) -> tuple[dict[int, object], tuple[dict[int, object], ...]]:
    """``dynamic_shapes`` for ``CachedDecoder``: batch and new length on ``input_ids``; batch and past length on each cache tensor."""
    ids = _ids_dims(config)
    past = torch.export.Dim("past", max=config.max_positions)
    return (ids, tuple({0: ids[0], 2: past} for _ in range(2 * config.n_layers)))


def export_cached(model: TinyDecoder, path: str | Path) -> Path:
    """Export with a KV cache (dynamo exporter): inputs/outputs named by ``cache_names``, batch/sequence/past dynamic.

    The example uses a past of 3 tokens and 2 new ones (not 0 or 1, which ``torch.export`` would
    specialize on); the exported graph also runs with an empty past (length 0) for the prompt.
    """
    config = _tiny_decoder(model).config
    inputs, outputs = cache_names(config)
    example_ids = torch.from_numpy(make_reversal_data(2).prompts[:, :2])
    example_past = tuple(torch.randn(2, config.n_heads, 3, config.head_dim) for _ in range(2 * config.n_layers))
    return export_torch(
        CachedDecoder(model),
        (example_ids, example_past),
        path,
        input_names=inputs,
        output_names=outputs,
        dynamic_shapes=cached_dynamic_shapes(config),
    )


# ---------------------------------------------------------------- greedy generation, the PyTorch reference
@dataclass
class Generation:
    """Generated token ids (B, new_tokens) and the logits of every step (new_tokens arrays of (B, V)) (notebook 11)."""

    tokens: np.ndarray
    step_logits: list[np.ndarray]

    @property
    def logits(self) -> np.ndarray:
        """All step logits stacked: (new_tokens, B, V)."""
        return np.stack(self.step_logits)


def check_prompts(prompts: np.ndarray, new_tokens: int) -> np.ndarray:
    """``prompts`` as a (batch, length) int64 array, or a ValueError saying what a generation loop expects (notebook 11)."""
    prompts = np.asarray(prompts)
    if prompts.ndim != 2 or prompts.shape[1] < 1 or not np.issubdtype(prompts.dtype, np.integer):
        raise ValueError(f"prompts must be a (batch, length) integer array of token ids, got {prompts.dtype} {prompts.shape}")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise ValueError(f"new_tokens must be a positive whole number, got {new_tokens!r}")
    return prompts.astype(np.int64)


def generate_torch(model: TinyDecoder, prompts: np.ndarray, new_tokens: int) -> Generation:
    """The PyTorch reference: greedy decoding with full recomputation each step (no cache) (notebook 11)."""
    sequence = torch.from_numpy(check_prompts(prompts, new_tokens))
    steps = []
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(sequence)[0][:, -1]
            steps.append(logits.numpy())
            sequence = torch.cat([sequence, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return Generation(sequence[:, prompts.shape[1] :].numpy(), steps)
