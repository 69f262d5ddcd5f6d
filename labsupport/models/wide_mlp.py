"""The wide MLP of notebook 06: 64 -> 2048 -> 2048 -> 10, big enough for INT8 and INT4 to pay off.

Introduced in notebook 06 (quantization), also measured by ``python -m labsupport.bench quantization``.
Its layers are ``x @ W + b`` with ``W`` stored (in, out), so they export as MatMul + Add: the layout of
transformer layers, which INT4 weight-only quantization (MatMulNBits) works on. ``ensure_digits_mlp()``
returns ``artifacts/digits_mlp.onnx`` (17 MB of FP32 weights) and trains it first when it is missing
(seconds on one CPU core, deterministic for a seed).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from labsupport.course.data import load_digits
from labsupport.course.paths import artifact
from labsupport.models.contract import NUM_CLASSES, OUTPUT_NAME, SEED
from labsupport.onnxutil.export import export_torch, single_thread

ONNX_NAME = "digits_mlp.onnx"
INPUT_NAME = "pixels"  # float32 (N, 64): the 8x8 digits as flat rows
FEATURES = 64
WIDTH = 2048
EPOCHS = 5
BATCH_SIZE = 64
LEARNING_RATE = 1e-3


class Dense(nn.Module):
    """``y = x @ W + b`` with ``W`` stored (in, out): exports as MatMul + Add, the layout of transformer layers (notebook 06)."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(inputs, outputs))
        self.bias = nn.Parameter(torch.zeros(outputs))
        nn.init.kaiming_uniform_(self.weight.T, a=5**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


class WideMLP(nn.Module):
    """Three Dense layers with ReLU between them: (N, 64) flat digits -> (N, 10) logits (notebook 06)."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.net = nn.Sequential(Dense(FEATURES, width), nn.ReLU(), Dense(width, width), nn.ReLU(), Dense(width, NUM_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_wide_mlp(width: int = WIDTH) -> WideMLP:
    """An untrained wide MLP 64 -> width -> width -> 10 (notebook 06)."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive int, got {width!r}")
    return WideMLP(width)


def train_wide_mlp(epochs: int = EPOCHS, seed: int = SEED, width: int = WIDTH) -> WideMLP:
    """Train the wide MLP on the train split, single-threaded and seeded (deterministic); returns the eval-mode model (notebook 06)."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got {epochs!r}")
    digits = load_digits()
    features, labels = torch.from_numpy(digits.train.flat), torch.from_numpy(digits.train.labels)
    with single_thread():
        torch.manual_seed(seed)
        model = build_wide_mlp(width)
        optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        order = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(epochs):
            for batch in torch.randperm(len(labels), generator=order).split(BATCH_SIZE):
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(features[batch]), labels[batch]).backward()
                optimizer.step()
    return model.eval()


def export_wide_mlp(model: nn.Module, path: str | Path) -> Path:
    """Export the MLP (input ``"pixels"`` (batch, 64), output ``"logits"``) to one .onnx file; returns the path (notebook 06)."""
    batch = torch.export.Dim("batch", min=1, max=4096)
    example = torch.from_numpy(load_digits().test.flat[:2])
    return export_torch(model, (example,), path, input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], dynamic_shapes=({0: batch},))


def ensure_digits_mlp(force: bool = False) -> Path:
    """Path of ``artifacts/digits_mlp.onnx`` (17 MB of FP32 weights); trains and exports it (seconds) if missing (notebook 06)."""
    path = artifact(ONNX_NAME)
    if force or not path.is_file():
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.onnx")  # renamed when complete: no reader sees half a file
        export_wide_mlp(train_wide_mlp(), tmp)
        os.replace(tmp, path)
    return path
