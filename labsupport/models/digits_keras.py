"""The course's Keras model: a small CNN for the 8x8 digits, its training and its tf2onnx export.

Introduced in notebook 03, which trains and converts it. It solves the same task as the PyTorch
CNN of notebook 02 (``labsupport.models.digits_cnn``). Keras works channels-last (NHWC), so the model takes
(N, 8, 8, 1) images; ``to_nhwc`` turns the course's (N, 1, 8, 8) images into that layout.
``ensure_digits_keras()`` returns ``artifacts/digits_keras.onnx`` and, when it is missing, trains
and converts the model with exactly the code and seed that notebook 03 uses (a few seconds).
The saved ONNX model takes the same (N, 1, 8, 8) "image" input as ``digits_cnn.onnx``
(converted with ``inputs_as_nchw``) and returns (N, 10) "logits".

Importing this module imports TensorFlow, after quieting its C++ log (``quiet_tensorflow``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.course.data import Split, load_digits
from labsupport.course.paths import artifact
from labsupport.models import contract
from labsupport.models.contract import BATCH_SIZE, IMAGE_SHAPE, INPUT_NAME, LEARNING_RATE, NUM_CLASSES, OUTPUT_NAME, SEED


def quiet_tensorflow() -> None:
    """Silence TensorFlow's C++ console noise and oneDNN notices; must run before ``import tensorflow`` (03)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # 3: errors only from the C++ runtime
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # reproducible numbers, no oneDNN banner
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")


quiet_tensorflow()

import keras  # noqa: E402 - after quiet_tensorflow(), which must run before TensorFlow loads
import tensorflow as tf  # noqa: E402 - after quiet_tensorflow(), which must run before TensorFlow loads

ONNX_NAME = "digits_keras.onnx"
IMAGE_SHAPE_NHWC = (8, 8, 1)
DEFAULT_EPOCHS = 10
# tf2onnx 1.17 converts up to opset 18, so the Keras model keeps the converter's target, not contract.OPSET
DEFAULT_OPSET = 18


def to_nhwc(images: np.ndarray) -> np.ndarray:
    """(N, 1, 8, 8) course images -> (N, 8, 8, 1) float32, the channels-last layout Keras expects (03)."""
    array = np.asarray(images, dtype=np.float32)
    if array.ndim != 4 or array.shape[1:] != IMAGE_SHAPE:
        raise ValueError(f"to_nhwc() expects images of shape (N, 1, 8, 8), got {array.shape}")
    return np.ascontiguousarray(array.transpose(0, 2, 3, 1))


def build_digits_keras(seed: int = SEED, channels: int = 16, dropout: float = 0.25) -> keras.Model:
    """The Keras twin of ``DigitsCNN``: Conv-BatchNorm-ReLU x2, max-pooling, dropout, a dense head (03).

    A functional model (``keras.Input`` -> layers -> ``keras.Model``): input "image" (N, 8, 8, 1),
    output "logits" (N, 10). (tf2onnx 1.17 cannot name the outputs of a Keras 3 ``Sequential``.)
    """
    keras.utils.set_random_seed(seed)
    image = keras.Input(shape=IMAGE_SHAPE_NHWC, name=INPUT_NAME)
    x = image
    for width in (channels, 2 * channels):
        x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    x = keras.layers.MaxPooling2D(2)(x)  # 8x8 -> 4x4
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dropout(dropout, seed=seed)(x)
    logits = keras.layers.Dense(NUM_CLASSES, name=OUTPUT_NAME)(x)
    return keras.Model(image, logits, name="digits_keras")


def _progress_callback(epochs: int) -> keras.callbacks.Callback:
    import warnings

    from tqdm.std import tqdm  # plain text bar on stderr (not a widget), left out of nbval's comparison

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tqdm.keras imports tqdm.auto, which warns when ipywidgets is absent
        from tqdm.keras import TqdmCallback

    # No elapsed time or rate in the bar and a redraw on every epoch: its final state is the same on
    # every run, so the bar stays reproducible even where a notebook checker compares stderr.
    return TqdmCallback(
        epochs=epochs,
        verbose=0,
        tqdm_class=tqdm,
        desc="training digits_keras",
        file=sys.stderr,
        mininterval=0,
        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} epochs{postfix}",
    )


def train_digits_keras(epochs: int = DEFAULT_EPOCHS, seed: int = SEED, progress: bool = True) -> tuple[keras.Model, dict[str, list[float]]]:
    """Train ``build_digits_keras`` on the digits train split, deterministically; returns (model, history) (03).

    The history maps "loss" and "accuracy" to per-epoch training values. ``progress`` shows a
    tqdm bar on stderr; Keras' own progress printing is off.
    """
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ValueError(f"epochs must be a positive whole number, got {epochs!r}")
    tf.config.experimental.enable_op_determinism()
    digits = load_digits()
    model = build_digits_keras(seed)
    model.compile(
        optimizer=keras.optimizers.Adam(LEARNING_RATE),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    fit = model.fit(
        to_nhwc(digits.train.images),
        digits.train.labels,
        epochs=epochs,
        batch_size=BATCH_SIZE,
        shuffle=True,
        verbose=0,
        callbacks=[_progress_callback(epochs)] if progress else [],
    )
    return model, {key: [float(v) for v in values] for key, values in fit.history.items()}


def predict_logits(model: keras.Model, images: np.ndarray) -> np.ndarray:
    """The model's (N, 10) float32 logits for (N, 1, 8, 8) course images, in inference mode (03)."""
    if not isinstance(model, keras.Model):
        raise TypeError(f"predict_logits() expects a keras.Model, got {type(model).__name__}")
    return np.asarray(model(to_nhwc(images), training=False), dtype=np.float32)


def accuracy(model: keras.Model, split: Split) -> float:
    """Fraction of ``split`` (a ``load_digits()`` split) the Keras model classifies correctly (03)."""
    if not isinstance(split, Split):
        raise TypeError(f"accuracy() expects a labsupport.course.data Split such as load_digits().test, got {type(split).__name__}")
    return contract.accuracy(predict_logits(model, split.images), split.labels)


def input_signature(batch: int | None = None) -> tuple[tf.TensorSpec, ...]:
    """The tf2onnx input signature: one float32 "image" (batch, 8, 8, 1); ``None`` batch means dynamic (03)."""
    return (tf.TensorSpec((batch, *IMAGE_SHAPE_NHWC), tf.float32, name=INPUT_NAME),)


def convert_digits_keras(model: keras.Model, path: str | Path | None = None, opset: int = DEFAULT_OPSET, nchw: bool = True) -> Any:
    """Convert with ``tf2onnx.convert.from_keras`` (dynamic batch); returns the ModelProto, saved to ``path`` if given (03).

    ``nchw=True`` makes the ONNX input (batch, 1, 8, 8) like the PyTorch CNN's (``inputs_as_nchw``);
    ``nchw=False`` keeps Keras' (batch, 8, 8, 1). The batch dimension is named ``batch``, as in the
    PyTorch CNN: tf2onnx's own name (``unk__`` and a counter) changes from run to run.
    """
    import onnx
    import tf2onnx
    from onnx.tools.update_model_dims import update_inputs_outputs_dims

    if not isinstance(model, keras.Model):
        raise TypeError(f"convert_digits_keras() expects a keras.Model, got {type(model).__name__}")
    if path is not None and Path(path).suffix != ".onnx":
        raise ValueError(f"the ONNX file name must end in .onnx, got {Path(path).name!r}")
    proto, _ = tf2onnx.convert.from_keras(
        model, input_signature=input_signature(), opset=opset, inputs_as_nchw=[INPUT_NAME] if nchw else None
    )
    image = ["batch", *(IMAGE_SHAPE if nchw else IMAGE_SHAPE_NHWC)]
    proto = update_inputs_outputs_dims(proto, {INPUT_NAME: image}, {OUTPUT_NAME: ["batch", NUM_CLASSES]})
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(proto, path)
    return proto


def ensure_digits_keras(force: bool = False) -> Path:
    """Path of ``artifacts/digits_keras.onnx`` (input "image" (N, 1, 8, 8), output "logits"); trains and converts it if missing (03)."""
    path = artifact(ONNX_NAME)
    if force or not path.is_file():
        model, _ = train_digits_keras(progress=False)
        convert_digits_keras(model, path)
    return path
