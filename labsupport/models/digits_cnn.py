"""The course's PyTorch model: a small CNN for the 8x8 digits, its training loop and its ONNX export.

Introduced in notebook 02, which trains and exports it. Later notebooks (05-09) never retrain it:
they call ``ensure_digits_cnn()``, which returns ``artifacts/digits_cnn.onnx`` and, when the file
is missing, trains and exports it with exactly the code and seed that notebook 02 uses (a few
seconds on one CPU core). The weights are kept next to it as ``artifacts/digits_cnn.pt``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from labsupport.course.data import Split, load_digits
from labsupport.course.paths import artifact
from labsupport.models import contract
from labsupport.models.contract import BATCH_SIZE, IMAGE_SHAPE, INPUT_NAME, LEARNING_RATE, NUM_CLASSES, OUTPUT_NAME, SEED
from labsupport.onnxutil.export import export_torch, single_thread

ONNX_NAME = "digits_cnn.onnx"
WEIGHTS_NAME = "digits_cnn.pt"
DEFAULT_EPOCHS = 12


class DigitsCNN(nn.Module):
    """Two Conv-BatchNorm-ReLU blocks, max-pooling, dropout and a linear head: (N, 1, 8, 8) -> (N, 10) logits."""

    def __init__(self, channels: int = 16, dropout: float = 0.25) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(2 * channels),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(2 * channels * 4 * 4, NUM_CLASSES))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(image))


@dataclass
class History:
    """Per-epoch training loss and accuracy on the calibration split (never the test split) recorded by ``train_digits_cnn``."""

    loss: list[float] = field(default_factory=list)
    calibration_accuracy: list[float] = field(default_factory=list)

    def __repr__(self) -> str:
        if not self.loss:
            return "History(no epochs)"
        return f"History({len(self.loss)} epochs, final loss {self.loss[-1]:.3f}, final calibration accuracy {self.calibration_accuracy[-1]:.1%})"


def _check_images(images: np.ndarray | torch.Tensor, what: str = "images") -> torch.Tensor:
    tensor = torch.as_tensor(np.asarray(images, dtype=np.float32)) if not isinstance(images, torch.Tensor) else images
    if tensor.ndim != 4 or tuple(tensor.shape[1:]) != IMAGE_SHAPE:
        raise ValueError(f"{what} must have shape (N, 1, 8, 8), got {tuple(tensor.shape)}")
    return tensor.float()


def predict_logits(model: nn.Module, images: np.ndarray | torch.Tensor) -> np.ndarray:
    """The model's logits for (N, 1, 8, 8) images as a float32 NumPy array, in eval mode without gradients."""
    inputs = _check_images(images)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(inputs).numpy()
    finally:
        model.train(was_training)


def accuracy(model: nn.Module, split: Split) -> float:
    """Fraction of ``split`` (a ``load_digits()`` split) that the model classifies correctly (notebook 02)."""
    if not isinstance(split, Split):
        raise TypeError(f"accuracy() expects a labsupport.course.data Split such as load_digits().test, got {type(split).__name__}")
    return contract.accuracy(predict_logits(model, split.images), split.labels)


def train_digits_cnn(epochs: int = DEFAULT_EPOCHS, seed: int = SEED, progress: bool = True) -> tuple[DigitsCNN, History]:
    """Train ``DigitsCNN`` on the digits train split (deterministic for a seed); returns (model in eval mode, history).

    Notebook 02 trains it; ``ensure_digits_cnn`` calls this with the same defaults when the
    artifact is missing. ``progress`` shows a tqdm bar over the epochs.
    """
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive whole number, got {epochs!r}")
    with warnings.catch_warnings():  # tqdm.auto warns when ipywidgets is missing, then uses the text bar
        warnings.simplefilter("ignore")
        from tqdm.auto import tqdm

    digits = load_digits()
    images = torch.from_numpy(digits.train.images)
    labels = torch.from_numpy(digits.train.labels)
    history = History()
    with single_thread():
        torch.manual_seed(seed)
        model = DigitsCNN()
        optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        loss_fn = nn.CrossEntropyLoss()
        order = torch.Generator().manual_seed(seed)
        bar = tqdm(range(epochs), desc="training DigitsCNN", unit="epoch", disable=not progress)
        for _ in bar:
            model.train()
            total = 0.0
            for batch in torch.randperm(len(labels), generator=order).split(BATCH_SIZE):
                optimizer.zero_grad()
                loss = loss_fn(model(images[batch]), labels[batch])
                loss.backward()
                optimizer.step()
                total += loss.item() * len(batch)
            history.loss.append(total / len(labels))
            history.calibration_accuracy.append(accuracy(model, digits.calibration))  # monitoring only, not the test split
            bar.set_postfix(loss=f"{history.loss[-1]:.3f}", calibration_acc=f"{history.calibration_accuracy[-1]:.1%}")
    model.eval()
    return model, history


def example_input(batch_size: int = 2) -> torch.Tensor:
    """A (batch_size, 1, 8, 8) batch of real test digits, the example input used for export."""
    return torch.from_numpy(load_digits().test.images[:batch_size])


def export_digits_cnn(model: nn.Module, path: str | Path, opset_version: int | None = None) -> Path:
    """Export a digits model with the dynamo exporter: input "image" (batch dynamic), output "logits"; returns the path.

    The model is exported in eval mode (a copy is switched, the caller's model is left as it was);
    the weights are stored inside the single .onnx file. Introduced in notebook 02.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"export_digits_cnn() expects a torch.nn.Module, got {type(model).__name__}")
    batch = torch.export.Dim("batch", min=1, max=4096)
    # dynamic shapes by position, so forward()'s argument may have any name
    return export_torch(
        model,
        (example_input(),),
        path,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        dynamic_shapes=({0: batch},),
        opset_version=opset_version,
    )


def ensure_digits_cnn(force: bool = False) -> Path:
    """Path of ``artifacts/digits_cnn.onnx``; trains (quietly) and exports it first if it is missing or ``force``.

    This is how notebooks 05-09 get the course CNN without re-running notebook 02. It also
    writes the weights to ``artifacts/digits_cnn.pt`` (see ``load_digits_cnn``).
    """
    onnx_path, weights_path = artifact(ONNX_NAME), artifact(WEIGHTS_NAME)
    if force or not onnx_path.is_file() or not weights_path.is_file():
        model, _ = train_digits_cnn(progress=False)
        save_digits_cnn(model)
    return onnx_path


def save_digits_cnn(model: nn.Module) -> Path:
    """Write a trained model to the course artifacts (``digits_cnn.pt`` weights and ``digits_cnn.onnx``); returns the .onnx path."""
    if not isinstance(model, DigitsCNN):
        raise TypeError(f"save_digits_cnn() expects a DigitsCNN, got {type(model).__name__}")
    onnx_path, weights_path = artifact(ONNX_NAME), artifact(WEIGHTS_NAME)
    # write under temporary names, then rename: a notebook running at the same time never reads half a file
    suffix = f".{os.getpid()}.tmp"
    weights_tmp = weights_path.with_name(weights_path.name + suffix)
    onnx_tmp = onnx_path.with_name(onnx_path.stem + suffix + ".onnx")
    torch.save(model.state_dict(), weights_tmp)
    export_digits_cnn(model, onnx_tmp)
    os.replace(weights_tmp, weights_path)
    os.replace(onnx_tmp, onnx_path)
    return onnx_path


def load_digits_cnn() -> DigitsCNN:
    """The course CNN in eval mode with the weights of ``artifacts/digits_cnn.pt`` (made by ``ensure_digits_cnn`` if missing)."""
    ensure_digits_cnn()
    model = DigitsCNN()
    try:
        model.load_state_dict(torch.load(artifact(WEIGHTS_NAME), weights_only=True))
    except (RuntimeError, KeyError) as error:
        raise RuntimeError(
            f"artifacts/{WEIGHTS_NAME} does not hold DigitsCNN weights (made by an older version of the course?); "
            f"regenerate it with labsupport.models.digits_cnn.ensure_digits_cnn(force=True) or re-run notebook 02: {error}"
        ) from None
    return model.eval()
