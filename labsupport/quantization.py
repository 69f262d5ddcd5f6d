"""Quantization helpers: calibration data, the wide MLP, measuring variants, CPU features, FP32 leftovers.

Introduced in notebook 06 (quantization) and used by ``python -m labsupport.bench quantization``
and notebook 09 (which ships ``artifacts/digits_cnn_int8.onnx`` to mobile). The notebook calls
the ONNX Runtime quantization API itself; these helpers hold what the notebook, the benchmark and
the tests share: a ``CalibrationDataReader`` over the course's calibration split, the wide MLP
(64 -> 2048 -> 2048 -> 10) that is big enough for INT8 to pay off, one measurement of file size,
accuracy and latency for a set of model files, the CPU's INT8-relevant instruction sets, and a
per-node precision listing of a quantized graph.

Every INT8 model made here uses ``reduce_range=True`` (7-bit weights): on x86 CPUs without VNNI,
ONNX Runtime's U8xS8 kernels add pairs of products into int16 with saturation (VPMADDUBSW), and
255 * 127 * 2 does not fit while 255 * 64 * 2 does. So a file made here gives the same results on
every CPU (notebook 06, section 6).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import platform
import subprocess
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader

from labsupport.bench import speed_verdict
from labsupport.data import Split, load_digits
from labsupport.paths import artifact

MLP_NAME = "digits_mlp.onnx"
MLP_WEIGHTS_NAME = "digits_mlp.pt"
MLP_INPUT = "pixels"
MLP_WIDTH = 2048
MLP_EPOCHS = 5
CNN_INT8_NAME = "digits_cnn_int8.onnx"
CALIBRATION_BATCH = 20  # 180 calibration images = 9 equal batches (histogram calibrators need equal batches)
REDUCE_RANGE = True  # 7-bit weights: no U8xS8 saturation on x86 CPUs without VNNI (ORT's quantization guide)
AA_NAME = "FP32 again (A/A)"  # the FP32 file measured a second time: its latency ratio is pure timing noise
NOISE_FLOOR = 0.10  # latency ratios within 1 +- 10% (or the A/A deviation, if larger) are no measurable difference

# ops whose presence means "this node computes in integers" (QOperator / dynamic / weight-only formats)
INTEGER_OPS = {
    "ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul",
    "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax", "QLinearLeakyRelu",
    "QLinearSigmoid", "QAttention", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "MatMulIntegerToFloat",
}
NBITS_OPS = {"MatMulNBits", "GatherBlockQuantized"}
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}
# integer ops and the input index of their weight (input 0 is the activation)
WEIGHT_INPUT = {"QLinearConv": 3, "QLinearMatMul": 3, "QGemm": 3, "ConvInteger": 1, "MatMulInteger": 1}
# ops that only move or pick values: on quantized inputs they run on the 8-bit data as is
DATA_MOVEMENT_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "MaxPool", "Slice", "Gather", "Concat", "Split", "Pad"}


# --------------------------------------------------------------------------------------------
# calibration data


class DigitsCalibrationReader(CalibrationDataReader):
    """Feeds a split of the digits (default: the calibration split) to ``quantize_static`` in equal batches.

    ``input_name`` is the model's input; ``flat=True`` gives (N, 64) rows for the MLP instead of
    (N, 1, 8, 8) images. Every batch has the same size: ORT 1.31's histogram calibrators
    (Entropy, Percentile) stack the batches and fail on a ragged last one, so ``batch_size``
    must divide the split's length. ``rewind()`` starts over (a reader is consumed by one
    calibration). Introduced in notebook 06.
    """

    def __init__(
        self,
        input_name: str = "image",
        *,
        batch_size: int = CALIBRATION_BATCH,
        flat: bool = False,
        split: Split | None = None,
    ) -> None:
        data = split if split is not None else load_digits().calibration
        if not isinstance(data, Split):
            raise TypeError(f"split must be a labsupport.data Split such as load_digits().calibration, got {type(data).__name__}")
        if not isinstance(input_name, str) or not input_name:
            raise ValueError(f"input_name must be the model's input name (e.g. 'image'), got {input_name!r}")
        if not isinstance(batch_size, int) or batch_size < 1 or len(data) % batch_size:
            divisors = [n for n in range(1, len(data) + 1) if len(data) % n == 0]
            raise ValueError(
                f"batch_size must divide the {len(data)} images into equal batches (one of {divisors}), got {batch_size!r}"
            )
        self.input_name = input_name
        self.batch_size = batch_size
        self._arrays = data.flat if flat else data.images
        self._position = 0

    def __len__(self) -> int:
        return len(self._arrays) // self.batch_size

    def get_next(self) -> dict[str, np.ndarray] | None:
        """The next ``{input_name: batch}`` or None when the split is exhausted."""
        if self._position >= len(self._arrays):
            return None
        batch = self._arrays[self._position : self._position + self.batch_size]
        self._position += self.batch_size
        return {self.input_name: np.ascontiguousarray(batch)}

    def rewind(self) -> None:
        """Start again from the first batch."""
        self._position = 0


def model_input(model: str | Path | onnx.ModelProto) -> tuple[str, int]:
    """(name, rank) of a model's single input: rank 4 takes digit images, rank 2 takes flat rows."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    initializers = {t.name for t in proto.graph.initializer}
    inputs = [v for v in proto.graph.input if v.name not in initializers]
    if len(inputs) != 1:
        raise ValueError(f"expected a model with one input, got {[v.name for v in inputs]}")
    return inputs[0].name, len(inputs[0].type.tensor_type.shape.dim)


def reader_for(model: str | Path, *, split: Split | None = None, batch_size: int = CALIBRATION_BATCH) -> DigitsCalibrationReader:
    """A calibration reader matched to a digits model's input name and layout (images or flat rows)."""
    name, rank = model_input(model)
    if rank not in (2, 4):
        raise ValueError(f"{Path(str(model)).name}: input {name!r} has rank {rank}; digits models take rank 4 images or rank 2 rows")
    return DigitsCalibrationReader(name, batch_size=batch_size, flat=rank == 2, split=split)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the quantizers' chatter (prints, logging warnings, UserWarnings) inside the block."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


# --------------------------------------------------------------------------------------------
# the wide MLP


def _torch():
    import torch

    return torch


def build_wide_mlp(width: int = MLP_WIDTH):
    """The wide MLP 64 -> width -> width -> 10 whose layers are ``x @ W + b`` (MatMul + Add in ONNX)."""
    torch = _torch()
    from torch import nn

    class Dense(nn.Module):
        """y = x @ W + b with W stored (in, out): exports as MatMul + Add, the layout of transformer layers."""

        def __init__(self, inputs: int, outputs: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.empty(inputs, outputs))
            self.bias = nn.Parameter(torch.zeros(outputs))
            nn.init.kaiming_uniform_(self.weight.T, a=5**0.5)

        def forward(self, x):
            return x @ self.weight + self.bias

    class WideMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(Dense(64, width), nn.ReLU(), Dense(width, width), nn.ReLU(), Dense(width, 10))

        def forward(self, x):
            return self.net(x)

    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive int, got {width!r}")
    return WideMLP()


def train_wide_mlp(epochs: int = MLP_EPOCHS, seed: int = 0, width: int = MLP_WIDTH):
    """Train the wide MLP on the train split, single-threaded and seeded (deterministic); returns the eval-mode model."""
    torch = _torch()
    from labsupport.models import single_thread

    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got {epochs!r}")
    digits = load_digits()
    features, labels = torch.from_numpy(digits.train.flat), torch.from_numpy(digits.train.labels)
    with single_thread():
        torch.manual_seed(seed)
        model = build_wide_mlp(width)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        order = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(epochs):
            for batch in torch.randperm(len(labels), generator=order).split(64):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(features[batch]), labels[batch]).backward()
                optimizer.step()
    return model.eval()


def export_wide_mlp(model, path: str | Path) -> Path:
    """Export the MLP with the dynamo exporter: input "pixels" (batch, 64), output "logits"; returns the path."""
    torch = _torch()
    path = Path(path)
    if path.suffix != ".onnx":
        raise ValueError(f"the ONNX file name must end in .onnx, got {path.name!r}")
    from labsupport.models import quiet_export, remove_stack_traces, single_thread

    example = torch.from_numpy(load_digits().test.flat[:2])
    with quiet_export(), single_thread():
        program = torch.onnx.export(
            model.eval(),
            (example,),
            dynamo=True,
            input_names=[MLP_INPUT],
            output_names=["logits"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=4096)}},
            verbose=False,
        )
    remove_stack_traces(program)  # they hold this machine's paths, and so change the file's size
    program.save(path, external_data=False)
    return path


def ensure_digits_mlp(force: bool = False) -> Path:
    """Path of ``artifacts/digits_mlp.onnx`` (17 MB of FP32 weights); trains and exports it (seconds) if missing."""
    path = artifact(MLP_NAME)
    if force or not path.is_file():
        model = train_wide_mlp()
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.onnx")
        export_wide_mlp(model, tmp)
        os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------------
# making variants


def preprocess(src: str | Path, dst: str | Path) -> Path:
    """``quant_pre_process`` (symbolic + ONNX shape inference, ORT optimization) quietly; returns ``dst``."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with quiet():
        quant_pre_process(str(src), str(dst))
    return Path(dst)


def make_static_int8(
    src: str | Path,
    dst: str | Path,
    *,
    per_channel: bool = True,
    quant_format: str = "QDQ",
    method: str = "MinMax",
    nodes_to_exclude: Sequence[str] = (),
    extra_options: Mapping[str, object] | None = None,
    reduce_range: bool = REDUCE_RANGE,
) -> Path:
    """Static INT8 (calibrated on the calibration split, 7-bit weights by default) of a pre-processed digits model; returns ``dst``."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

    formats = {"QDQ": QuantFormat.QDQ, "QOperator": QuantFormat.QOperator}
    methods = {m.name: m for m in CalibrationMethod}
    if quant_format not in formats:
        raise ValueError(f"quant_format must be one of {list(formats)}, got {quant_format!r}")
    if method not in methods:
        raise ValueError(f"method must be one of {list(methods)}, got {method!r}")
    with quiet():
        quantize_static(
            str(src), str(dst), reader_for(src),
            quant_format=formats[quant_format], per_channel=per_channel, calibrate_method=methods[method],
            nodes_to_exclude=list(nodes_to_exclude), extra_options=dict(extra_options or {}), reduce_range=reduce_range,
        )
    return Path(dst)


def make_dynamic_int8(src: str | Path, dst: str | Path, *, reduce_range: bool = REDUCE_RANGE) -> Path:
    """Dynamic INT8 (weights quantized ahead of time, 7-bit by default; activations at run time) of a pre-processed model."""
    from onnxruntime.quantization import quantize_dynamic

    with quiet():
        quantize_dynamic(str(src), str(dst), reduce_range=reduce_range)
    return Path(dst)


def make_int4(src: str | Path, dst: str | Path, *, block_size: int = 32) -> Path:
    """INT4 weight-only quantization of MatMul weights (MatMulNBits, symmetric blocks, int8 compute)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, accuracy_level=4)
    with quiet():
        quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), algo_config=config)
        quantizer.process()
        quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return Path(dst)


def make_fp16(src: str | Path, dst: str | Path) -> Path:
    """FP16 weights and compute with FP32 inputs/outputs (onnxconverter-common's float16 converter)."""
    from onnxconverter_common import float16

    with quiet():
        onnx.save(float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(dst))
    return Path(dst)


def has_matmul_weights(model: str | Path | onnx.ModelProto) -> bool:
    """True when some MatMul multiplies by a constant weight: the only thing INT4 weight-only quantization changes."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    initializers = {t.name for t in proto.graph.initializer}
    return any(node.op_type == "MatMul" and node.input[1] in initializers for node in proto.graph.node)


def build_variants(src: str | Path, folder: str | Path, *, int4: bool = True) -> dict[str, Path]:
    """FP32, its variants (INT8 dynamic, INT8 static QDQ per-channel, INT4, FP16) and the A/A control under ``folder``.

    INT4 is made only for a graph with MatMul weights (on any other it would be the FP32 graph
    unchanged). ``AA_NAME`` is the FP32 file again: measured as a separate variant, its latency
    ratio shows the timing noise of the run.
    """
    src, folder = Path(src), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = src.stem
    pre = preprocess(src, folder / f"{stem}_pre.onnx")
    variants = {
        "FP32": src,
        "INT8 dynamic": make_dynamic_int8(pre, folder / f"{stem}_int8_dynamic.onnx"),
        "INT8 static": make_static_int8(pre, folder / f"{stem}_int8_static.onnx"),
    }
    if int4 and has_matmul_weights(src):
        variants["INT4 weights"] = make_int4(src, folder / f"{stem}_int4.onnx")
    variants["FP16"] = make_fp16(src, folder / f"{stem}_fp16.onnx")
    variants[AA_NAME] = src
    return variants


SOURCE_KEY = "labsupport.source_sha256"
SETTINGS_KEY = "labsupport.quantization_settings"
CNN_INT8_SETTINGS = {"format": "QDQ", "per_channel": True, "method": "MinMax", "reduce_range": REDUCE_RANGE}


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def ensure_digits_cnn_int8(force: bool = False) -> Path:
    """Path of ``artifacts/digits_cnn_int8.onnx``: the course CNN, static INT8, QDQ, per-channel, 7-bit weights, MinMax.

    Notebook 06 recommends it; notebook 09 converts it for mobile. Made (deterministically) when it is
    missing, was quantized from another ``digits_cnn.onnx`` than the current one, or with other
    settings than ``CNN_INT8_SETTINGS`` (the source's SHA-256 and the settings are stored in the
    model's metadata under ``SOURCE_KEY`` and ``SETTINGS_KEY``).
    """
    from labsupport.models import ensure_digits_cnn

    source = ensure_digits_cnn()
    stamp = {SOURCE_KEY: _sha256(source), SETTINGS_KEY: json.dumps(CNN_INT8_SETTINGS, sort_keys=True)}
    path = artifact(CNN_INT8_NAME)
    if not force and path.is_file():
        stored = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        if all(stored.get(key) == value for key, value in stamp.items()):
            return path
    tag = f"{os.getpid()}.tmp"
    pre = preprocess(source, path.with_name(f"digits_cnn_pre.{tag}.onnx"))
    tmp = path.with_name(f"digits_cnn_int8.{tag}.onnx")
    settings = CNN_INT8_SETTINGS
    try:
        make_static_int8(pre, tmp, quant_format=settings["format"], per_channel=settings["per_channel"],
                         method=settings["method"], reduce_range=settings["reduce_range"])
        model = onnx.load(str(tmp))
        onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props}, **stamp})
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    finally:
        pre.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return path


# --------------------------------------------------------------------------------------------
# measuring


def session(path: str | Path, threads: int = 1, config: Mapping[str, str] | None = None) -> ort.InferenceSession:
    """A CPU InferenceSession with ``threads`` intra-op threads (1: measures kernels, not thread scheduling).

    ``config`` holds session config entries, e.g. ``{"session.x64quantprecision": "1"}`` for ORT's
    U8U8 integer kernels (notebook 06, section 6).
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _inputs_for(path: str | Path, split: Split) -> tuple[str, np.ndarray]:
    name, rank = model_input(path)
    return name, (split.flat if rank == 2 else split.images)


def logits(path: str | Path, split: Split | None = None, config: Mapping[str, str] | None = None) -> np.ndarray:
    """The logits of a digits ONNX model on ``split`` (default: the test split), with optional session ``config``."""
    split = split if split is not None else load_digits().test
    if not isinstance(split, Split):
        raise TypeError(f"expected a labsupport.data Split such as load_digits().test, got {type(split).__name__}")
    name, data = _inputs_for(path, split)
    return session(path, config=config).run(None, {name: data})[0]


def accuracy(path: str | Path, split: Split | None = None, config: Mapping[str, str] | None = None) -> float:
    """Fraction of ``split`` (default: the test split) a digits ONNX model classifies correctly."""
    split = split if split is not None else load_digits().test
    return float(np.mean(logits(path, split, config).argmax(axis=1) == split.labels))


def file_kb(path: str | Path) -> float:
    """File size in KB (1 KB = 1024 bytes)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model file at {path.name!r}")
    return path.stat().st_size / 1024


@dataclass
class VariantResult:
    """Size, test accuracy and median latency (ms, per batch size) of one model file."""

    name: str
    size_kb: float
    accuracy: float
    latency_ms: dict[int, float] = field(default_factory=dict)


@dataclass
class VariantReport:
    """Measurements of several variants of one model, with ratios against ``baseline`` (notebook 06)."""

    model: str
    baseline: str
    results: list[VariantResult]
    threads: int = 1

    def get(self, name: str) -> VariantResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(f"no variant {name!r}; measured: {[r.name for r in self.results]}")

    def size_ratio(self, name: str) -> float:
        """File size of ``name`` / the baseline's (below 1: smaller)."""
        return self.get(name).size_kb / self.get(self.baseline).size_kb

    def latency_ratio(self, name: str, batch_size: int) -> float:
        """Median latency of ``name`` / the baseline's at ``batch_size`` (below 1: faster)."""
        mine, base = self.get(name).latency_ms, self.get(self.baseline).latency_ms
        if batch_size not in mine or batch_size not in base:
            raise KeyError(f"latency at batch {batch_size} was not measured (measured: {sorted(base)})")
        return mine[batch_size] / base[batch_size]

    def timing_noise(self, batch_size: int) -> float:
        """Relative latency differences below this are noise: the A/A deviation ``|ratio(AA_NAME) - 1|``, at least ``NOISE_FLOOR``."""
        try:
            deviation = abs(self.latency_ratio(AA_NAME, batch_size) - 1)
        except KeyError:
            deviation = 0.0
        return max(deviation, NOISE_FLOOR)

    def speed_text(self, name: str, batch_size: int) -> str:
        """``name``'s latency against the baseline in words, saying so when the difference is inside the timing noise."""
        ratio = self.latency_ratio(name, batch_size)
        verdict = speed_verdict(ratio, noise=self.timing_noise(batch_size))
        return f"{ratio:.2f}x the {self.baseline} time at batch {batch_size}: {verdict} {self.baseline}"

    def accuracy_delta(self, name: str) -> float:
        """Accuracy change of ``name`` against the baseline, in percentage points (positive: better).

        Both accuracies are rounded to 0.1 % first, as every table shows them, so the change always
        equals the difference of the printed accuracies (99.3 -> 99.4 is +0.1, never +0.2).
        """
        mine, base = round(100 * self.get(name).accuracy, 1), round(100 * self.get(self.baseline).accuracy, 1)
        return round(mine - base, 1)

    def rows(self, timings: bool = True, accuracy: bool = True) -> list[dict[str, object]]:
        """One row per variant; ``timings=False`` leaves the run-dependent latency columns out, ``accuracy=False``
        the accuracy columns (after integer quantization they depend on the CPU's kernels)."""
        rows = []
        for result in self.results:
            row: dict[str, object] = {
                "variant": result.name,
                "size KB": round(result.size_kb),
                "size ratio": round(self.size_ratio(result.name), 2),
            }
            if accuracy:
                row["accuracy %"] = round(100 * result.accuracy, 1)
                row["Δ acc (points)"] = f"{self.accuracy_delta(result.name):+.1f}"
            if timings:
                for batch, ms in sorted(result.latency_ms.items()):
                    row[f"ms @ batch {batch}"] = round(ms, 3)
                    row[f"latency ratio @ {batch}"] = round(self.latency_ratio(result.name, batch), 2)
            rows.append(row)
        return rows

    def to_frame(self, timings: bool = True, accuracy: bool = True):
        """The rows as a pandas DataFrame indexed by variant."""
        import pandas as pd

        return pd.DataFrame(self.rows(timings, accuracy)).set_index("variant")

    def within(self, points: float = 1.0) -> bool:
        """True when every variant's test accuracy is within ``points`` percentage points of the baseline's."""
        base = self.get(self.baseline).accuracy
        return all(abs(result.accuracy - base) * 100 <= points for result in self.results)

    def to_dict(self) -> dict[str, object]:
        return {"model": self.model, "baseline": self.baseline, "threads": self.threads, "results": [asdict(r) for r in self.results]}

    def plot(self, ax=None, batch_size: int = 64):
        """Scatter of size ratio vs latency ratio (log scale) at ``batch_size``; the legend gives accuracy deltas."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5.5, 4))
        for result in self.results:
            x, y = self.size_ratio(result.name), self.latency_ratio(result.name, batch_size)
            ax.scatter(x, y, s=60, label=f"{result.name} ({self.accuracy_delta(result.name):+.1f} pt acc.)", alpha=0.8)
        ax.axhline(1, color="grey", lw=0.8, ls="--")
        ax.axvline(1, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("file size / FP32")
        ax.set_ylabel(f"median latency / FP32 (batch {batch_size})")
        ax.set_title(self.model)
        ax.set_xlim(0, 1.15)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        return ax


def measure_variants(
    variants: Mapping[str, str | Path],
    *,
    model: str = "model",
    baseline: str = "FP32",
    batch_sizes: Sequence[int] = (1, 64),
    threads: int = 1,
    repeat: int = 20,
    warmup: int = 3,
    timings: bool = True,
) -> VariantReport:
    """File size, test accuracy and (``timings=True``) median latency per batch size of each variant, in one run.

    Latencies are measured interleaved across variants (``labsupport.bench.compare_candidates``)
    on real test digits, with ``threads`` intra-op threads.
    """
    from labsupport.bench import compare_candidates

    if baseline not in variants:
        raise KeyError(f"baseline {baseline!r} is not among the variants {list(variants)}")
    if not batch_sizes or any(not isinstance(b, int) or b < 1 for b in batch_sizes):
        raise ValueError(f"batch_sizes must be positive ints, got {batch_sizes!r}")
    test = load_digits().test
    results = {name: VariantResult(name, file_kb(path), accuracy(path, test)) for name, path in variants.items()}
    if timings:
        sessions = {name: session(path, threads) for name, path in variants.items()}
        for batch in batch_sizes:
            if batch > len(test):
                raise ValueError(f"batch size {batch} exceeds the {len(test)} test images")
            candidates = {}
            for name, path in variants.items():
                input_name, data = _inputs_for(path, test)
                feed = {input_name: np.ascontiguousarray(data[:batch])}
                candidates[name] = (lambda s=sessions[name], f=feed: s.run(None, f))
            table = compare_candidates(candidates, baseline=baseline, batch_size=batch, warmup=warmup, repeat=repeat)
            for name in variants:
                results[name].latency_ms[batch] = table.get(name, batch).median_ms
    return VariantReport(model, baseline, list(results.values()), threads)


# --------------------------------------------------------------------------------------------
# the course's targets for notebook 06 and the quantization benchmark


@dataclass(frozen=True)
class Target:
    """One benchmark target: ``value`` must be <= ``limit`` (or >= ``limit`` when ``at_least``)."""

    model: str
    what: str
    value: float
    limit: float
    timing: bool  # True when the value is a latency ratio (varies from run to run)
    at_least: bool = False  # True for accuracy changes: higher is better
    fmt: str = ".2f"  # how the value is printed
    cpu_dependent: bool = False  # True when the value depends on the CPU's kernels (accuracy after quantization)

    @property
    def met(self) -> bool:
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    @property
    def _relation(self) -> str:
        return ">=" if self.at_least else "<="

    def __str__(self) -> str:
        return f"{'MET ' if self.met else 'MISSED'}  {self.model}: {self.what} = {self.value + 0.0:{self.fmt}} (target {self._relation} {self.limit:g})"

    @property
    def verdict(self) -> str:
        """Like ``str(target)``, without the value when it varies by run or CPU: the same text on every machine."""
        if not (self.timing or self.cpu_dependent):
            return str(self)
        return f"{'MET ' if self.met else 'MISSED'}  {self.model}: {self.what} {self._relation} {self.limit:g}"


def check_targets(mlp: VariantReport, cnn: VariantReport | None = None, batch_size: int = 64) -> list[Target]:
    """The course's targets: wide MLP INT8 size ratio <= 0.27, latency ratio <= 0.5 at batch 64,
    accuracy change >= -1 point; CNN static per-channel QDQ accuracy change >= -1 point."""
    targets = []
    for name in ("INT8 dynamic", "INT8 static"):
        targets.append(Target(mlp.model, f"{name} size ratio", mlp.size_ratio(name), 0.27, False))
        if batch_size in mlp.get(name).latency_ms:
            targets.append(Target(mlp.model, f"{name} latency ratio @ batch {batch_size}", mlp.latency_ratio(name, batch_size), 0.5, True))
        targets.append(Target(mlp.model, f"{name} accuracy change (points)", mlp.accuracy_delta(name), -1.0, False, True, "+.1f", True))
    if cnn is not None:
        targets.append(Target(cnn.model, "INT8 static accuracy change (points)", cnn.accuracy_delta("INT8 static"), -1.0, False, True, "+.1f", True))
    return targets


# --------------------------------------------------------------------------------------------
# the CPU and the graph


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's architecture and which INT8-relevant instruction sets it reports (notebook 06)."""

    arch: str
    source: str
    features: dict[str, bool]

    @property
    def int8_dot_product(self) -> bool:
        """True when the CPU has a fast INT8 dot-product instruction (VNNI, AMX, Arm dotprod/i8mm)."""
        keys = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")
        return any(self.features.get(key, False) for key in keys)

    @property
    def is_arm(self) -> bool:
        return self.arch.lower() in ("aarch64", "arm64")

    @property
    def u8s8_saturates(self) -> bool:
        """True on x86 with AVX2 but no VNNI: ORT's U8xS8 kernels add product pairs into int16 with saturation (VPMADDUBSW)."""
        vnni = any(self.features.get(key, False) for key in ("avx512_vnni", "avx_vnni", "amx_int8"))
        return not self.is_arm and self.features.get("avx2", False) and not vnni

    def __str__(self) -> str:
        found = [name for name, present in self.features.items() if present]
        lines = [f"CPU architecture: {self.arch} (read from {self.source})", f"INT8-relevant features: {', '.join(found) or 'none found'}"]
        if self.int8_dot_product:
            lines.append("This CPU has INT8 dot-product instructions: INT8 MatMul/Conv kernels can beat FP32 clearly.")
        else:
            lines.append("No INT8 dot-product instructions found: INT8 mainly saves memory here; speed-ups are small or absent.")
        if self.u8s8_saturates:
            lines.append("x86 without VNNI: ORT's U8xS8 kernels add pairs of products into int16 with saturation (AVX2 VPMADDUBSW).")
        elif self.is_arm or self.int8_dot_product:
            lines.append("ORT's INT8 kernels accumulate exactly in int32 here (VNNI or Arm integer instructions): no saturation.")
        return "\n".join(lines)


X86_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
ARM_FEATURES = ("asimd", "asimddp", "i8mm", "bf16", "sve", "fphp")


def parse_cpuinfo(text: str, arch: str | None = None) -> CpuFeatures:
    """INT8-relevant features from the text of /proc/cpuinfo (x86 ``flags`` or Arm ``Features`` lines)."""
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    arch = arch or platform.machine() or "unknown"
    is_arm = arch.lower() in ("aarch64", "arm64") or ("asimd" in flags and "sse" not in flags)
    names = ARM_FEATURES if is_arm else X86_FEATURES
    return CpuFeatures(arch, "/proc/cpuinfo", {name: name in flags for name in names})


def _macos_features(arch: str) -> CpuFeatures:
    def sysctl(name: str) -> str:
        try:
            return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    if arch == "arm64":
        keys = {"asimddp": "hw.optional.arm.FEAT_DotProd", "i8mm": "hw.optional.arm.FEAT_I8MM", "bf16": "hw.optional.arm.FEAT_BF16", "fphp": "hw.optional.arm.FEAT_FP16"}
        return CpuFeatures(arch, "sysctl", {name: sysctl(key) == "1" for name, key in keys.items()})
    flags = (sysctl("machdep.cpu.features") + " " + sysctl("machdep.cpu.leaf7_features")).lower().replace(".", "_")
    return CpuFeatures(arch, "sysctl", {name: name in flags.split() for name in X86_FEATURES})


def cpu_features() -> CpuFeatures:
    """Which INT8-relevant instruction sets this CPU has (Linux /proc/cpuinfo, macOS sysctl, else unknown)."""
    arch = platform.machine() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        return parse_cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace"), arch)
    if platform.system() == "Darwin":
        return _macos_features(arch)
    return CpuFeatures(arch, f"nothing readable on {platform.system() or 'this OS'}", {})


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    try:
        proto = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # contrib ops or odd graphs: use what the file already records
        pass
    graph = proto.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    # contrib ops (MatMulNBits...) are opaque to ONNX shape inference: carry the first input's type on
    for node in graph.node:
        first = next((name for name in node.input if name), None)
        if first in types and node.op_type not in QDQ_OPS | {"Cast", "Shape", "Size", "ArgMax", "ArgMin"}:
            for out in node.output:
                types.setdefault(out, types[first])
    return types


def node_precisions(model: str | Path | onnx.ModelProto) -> list[dict[str, str]]:
    """Each node of a (quantized) graph with the precision it computes in: int8, int4, fp16, fp32, q/dq, cast or other.

    QDQ graphs: a compute node whose float inputs all come from DequantizeLinear runs as an INT8
    kernel once ONNX Runtime fuses the Q/DQ pairs around it. Other nodes take the element type
    of their first input (float16 -> fp16, float -> fp32, 8-bit -> int8). Introduced in notebook 06.
    """
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    types = _elem_types(proto)
    by_type = {onnx.TensorProto.FLOAT: "fp32", onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "int8"}
    rows = []
    for node in graph.node:
        op = node.op_type
        if op in QDQ_OPS:
            precision = "q/dq"
        elif op in NBITS_OPS:
            bits = {a.name: a.i for a in node.attribute}.get("bits", 4)
            precision = "int4" if bits == 4 else f"int{bits}"
        elif op in INTEGER_OPS:
            precision = "int8"
        elif op == "Cast":
            precision = "cast"
        else:
            data_inputs = [name for name in node.input if name and name not in initializers]
            from_dq = [name in producer and producer[name].op_type == "DequantizeLinear" for name in data_inputs]
            feeds_q = any(c.op_type == "QuantizeLinear" for out in node.output for c in consumers.get(out, []))
            float_weights = any(types.get(name) in FLOAT_TYPES for name in node.input if name in initializers)
            if data_inputs and all(from_dq) and not float_weights and (feeds_q or op not in DATA_MOVEMENT_OPS):
                precision = "int8"
            else:
                first = next((name for name in node.input if name), "")
                precision = by_type.get(types.get(first, 0), "other")
        rows.append({"node": node.name or f"({op})", "op": op, "precision": precision})
    return rows


def integer_operand_types(model: str | Path | onnx.ModelProto) -> str:
    """``"QLinearConv uint8 x int8 x2, ..."``: activation x weight element types of each integer op in a graph ("-" if none).

    QOperator and dynamic files name them; for a QDQ file, save the graph ONNX Runtime runs
    (``optimized_model_filepath``) and read that: ORT picks the types per CPU (notebook 06).
    """
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    types = _elem_types(proto)

    def type_name(tensor: str) -> str:
        return onnx.helper.tensor_dtype_to_np_dtype(types[tensor]).name if types.get(tensor) else "?"

    counts: Counter[str] = Counter()
    for node in proto.graph.node:
        if node.op_type in WEIGHT_INPUT:
            counts[f"{node.op_type} {type_name(node.input[0])} x {type_name(node.input[WEIGHT_INPUT[node.op_type]])}"] += 1
    return ", ".join(f"{key} x{n}" for key, n in counts.items()) or "-"


def fp32_nodes(model: str | Path | onnx.ModelProto) -> list[str]:
    """``"name (Op)"`` of every node that still computes in FP32 in a quantized graph."""
    return [f"{row['node']} ({row['op']})" for row in node_precisions(model) if row["precision"] == "fp32"]


def precision_summary(model: str | Path | onnx.ModelProto) -> dict[str, str]:
    """``{precision: "Op xN, ..."}`` for a graph: which ops run in int8/int4/fp16/fp32 and how much Q/DQ glue."""
    groups: dict[str, Counter[str]] = {}
    for row in node_precisions(model):
        groups.setdefault(row["precision"], Counter())[row["op"]] += 1
    order = ["int8", "int4", "int2", "fp16", "fp32", "q/dq", "cast", "other"]
    return {p: ", ".join(f"{op} x{n}" for op, n in sorted(groups[p].items())) for p in order if p in groups}


# --------------------------------------------------------------------------------------------
# LLM memory arithmetic


def weight_bytes(parameters: float, bits: float, block_size: int | None = None, scale_bits: int = 16) -> float:
    """Bytes of weights at ``bits`` per parameter, plus one ``scale_bits`` scale per ``block_size`` weights."""
    if parameters <= 0 or bits <= 0:
        raise ValueError(f"parameters and bits must be positive, got {parameters!r}, {bits!r}")
    per_weight = bits + (scale_bits / block_size if block_size else 0)
    return parameters * per_weight / 8


def llm_memory_table(parameters: float = 7e9, block_size: int = 32) -> list[dict[str, object]]:
    """Weight memory of a ``parameters``-parameter model at FP32/FP16/INT8/INT4 (INT4 with FP16 block scales)."""
    formats = [("FP32", 32, None), ("FP16", 16, None), ("INT8 (per-channel)", 8, None), (f"INT4 (block {block_size}, FP16 scales)", 4, block_size)]
    rows = []
    for name, bits, block in formats:
        size = weight_bytes(parameters, bits, block)
        rows.append({
            "format": name,
            "bits / weight": round(bits + (16 / block if block else 0), 2),
            "GB (1e9 bytes)": round(size / 1e9, 1),
            "GiB": round(size / 2**30, 1),
            "vs FP32": round(size / weight_bytes(parameters, 32), 3),
        })
    return rows


def save_json(path: str | Path, payload: Mapping[str, object]) -> Path:
    """Write ``payload`` as indented JSON; returns the path."""
    path = Path(path)
    path.write_text(json.dumps(payload, indent=2, default=float), encoding="utf-8")
    return path
