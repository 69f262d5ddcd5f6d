"""Quantization helpers of notebook 06: calibration data, making the variants, accuracy, what each node computes in.

Introduced in notebook 06 (quantization) and used by ``python -m labsupport.bench quantization``
(which measures the variants made here), notebook 09 (which ships ``artifacts/digits_cnn_int8.onnx``
to mobile) and notebooks 11 and 12 (INT4 and INT8 of transformers). The notebook calls the ONNX
Runtime quantization API itself first; these helpers hold what the notebooks, the benchmark and the
tests share: a ``CalibrationDataReader`` over the course's calibration split, one call per variant
(``make_static_int8``, ``make_dynamic_int8``, ``make_int4``, ``make_fp16``), the test accuracy of a
digits model and a per-node precision listing of a quantized graph.

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
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader

from labsupport.course.data import Split, load_digits, sha256_of
from labsupport.course.paths import artifact
from labsupport.models import contract
from labsupport.models.contract import onnx_logits
from labsupport.onnxutil.graph import ModelLike, dtype_name, load_model

CNN_INT8_NAME = "digits_cnn_int8.onnx"
CALIBRATION_BATCH = 20  # 180 calibration images = 9 equal batches (histogram calibrators need equal batches)
REDUCE_RANGE = True  # 7-bit weights: no U8xS8 saturation on x86 CPUs without VNNI (ORT's quantization guide)
log = logging.getLogger(__name__)
AA_NAME = "FP32 again (A/A)"  # the FP32 file measured a second time: its latency ratio is pure timing noise

# ops whose presence means "this node computes in integers" (QOperator / dynamic / weight-only formats)
INTEGER_OPS = {
    "ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul",
    "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax", "QLinearLeakyRelu",
    "QLinearSigmoid", "QAttention", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "MatMulIntegerToFloat",
}  # fmt: skip
NBITS_OPS = {"MatMulNBits", "GatherBlockQuantized"}
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}
# integer ops and the input index of their weight (input 0 is the activation)
WEIGHT_INPUT = {"QLinearConv": 3, "QLinearMatMul": 3, "QGemm": 3, "ConvInteger": 1, "MatMulInteger": 1}
# ops that only move or pick values: on quantized inputs they run on the 8-bit data as is
DATA_MOVEMENT_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "MaxPool", "Slice", "Gather", "Concat", "Split", "Pad"}
# ops whose output type is not their first input's: shape inference must say, not the first input
TYPE_CHANGING_OPS = QDQ_OPS | {"Cast", "Shape", "Size", "ArgMax", "ArgMin"}
PRECISION_ORDER = ("int8", "int4", "int2", "fp16", "fp32", "q/dq", "cast", "other")


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
            raise TypeError(f"split must be a labsupport.course.data Split such as load_digits().calibration, got {type(data).__name__}")
        if not isinstance(input_name, str) or not input_name:
            raise ValueError(f"input_name must be the model's input name (e.g. 'image'), got {input_name!r}")
        if not isinstance(batch_size, int) or batch_size < 1 or len(data) % batch_size:
            divisors = [n for n in range(1, len(data) + 1) if len(data) % n == 0]
            raise ValueError(f"batch_size must divide the {len(data)} images into equal batches (one of {divisors}), got {batch_size!r}")
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


def model_input(model: ModelLike) -> tuple[str, int]:
    """(name, rank) of a model's single input: rank 4 takes digit images, rank 2 takes flat rows (notebook 06)."""
    proto = load_model(model)
    initializers = {t.name for t in proto.graph.initializer}
    inputs = [v for v in proto.graph.input if v.name not in initializers]
    if len(inputs) != 1:
        raise ValueError(f"expected a model with one input, got {[v.name for v in inputs]}")
    return inputs[0].name, len(inputs[0].type.tensor_type.shape.dim)


def reader_for(model: str | Path, *, split: Split | None = None, batch_size: int = CALIBRATION_BATCH) -> DigitsCalibrationReader:
    """A calibration reader matched to a digits model's input name and layout (images or flat rows); notebook 06."""
    name, rank = model_input(model)
    if rank not in (2, 4):
        raise ValueError(f"{Path(str(model)).name}: input {name!r} has rank {rank}; digits models take rank 4 images or rank 2 rows")
    return DigitsCalibrationReader(name, batch_size=batch_size, flat=rank == 2, split=split)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the quantizers' chatter (prints, logging warnings, UserWarnings) inside the block (notebook 06)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


# --------------------------------------------------------------------------------------------
# making variants


def preprocess(src: str | Path, dst: str | Path, *, skip_optimization: bool = False) -> Path:
    """``quant_pre_process`` (symbolic + ONNX shape inference, then ORT's fusions unless ``skip_optimization``) quietly.

    Returns ``dst``. Introduced in notebook 06, which shows what it changes.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with quiet():
        quant_pre_process(str(src), str(dst), skip_optimization=skip_optimization)
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
    """Static INT8 (calibrated on the calibration split, 7-bit weights by default) of a pre-processed digits model.

    Returns ``dst``. Introduced in notebook 06.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

    formats = {"QDQ": QuantFormat.QDQ, "QOperator": QuantFormat.QOperator}
    methods = {m.name: m for m in CalibrationMethod}
    if quant_format not in formats:
        raise ValueError(f"quant_format must be one of {list(formats)}, got {quant_format!r}")
    if method not in methods:
        raise ValueError(f"method must be one of {list(methods)}, got {method!r}")
    with quiet():
        quantize_static(
            str(src),
            str(dst),
            reader_for(src),
            quant_format=formats[quant_format],
            per_channel=per_channel,
            calibrate_method=methods[method],
            nodes_to_exclude=list(nodes_to_exclude),
            extra_options=dict(extra_options or {}),
            reduce_range=reduce_range,
        )
    return Path(dst)


def make_dynamic_int8(src: str | Path, dst: str | Path, *, reduce_range: bool = REDUCE_RANGE) -> Path:
    """Dynamic INT8 (weights quantized ahead of time, 7-bit by default; activations at run time) of a pre-processed model.

    Returns ``dst``. Introduced in notebook 06, used again in notebook 12.
    """
    from onnxruntime.quantization import quantize_dynamic

    with quiet():
        quantize_dynamic(str(src), str(dst), reduce_range=reduce_range)
    return Path(dst)


def make_int4(src: str | Path, dst: str | Path, *, block_size: int = 32) -> Path:
    """INT4 weight-only quantization of MatMul weights (MatMulNBits, symmetric blocks, int8 compute); returns ``dst``.

    Each MatMul with a constant weight becomes one MatMulNBits node (Gemm nodes are left alone).
    Introduced in notebook 06, used again in notebooks 11 and 12.
    """
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, accuracy_level=4)
    with quiet():
        quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), algo_config=config)
        quantizer.process()
        quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return Path(dst)


def make_fp16(src: str | Path, dst: str | Path) -> Path:
    """FP16 weights and compute with FP32 inputs/outputs (onnxconverter-common's float16 converter); returns ``dst`` (notebook 06).

    The converter warns when it clamps a value into FP16's safe range (below 1e-7 or from 1e4 on, its defaults): those
    warnings are reported, counted, through this module's logger (a Python warning would print the converter's path).
    """
    from onnxconverter_common import float16

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        onnx.save(float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(dst))
    if caught:
        log.warning("FP16 conversion of %s: %d converter warning(s), e.g. %s", Path(src).name, len(caught), caught[0].message)
    return Path(dst)


def has_matmul_weights(model: ModelLike) -> bool:
    """True when some MatMul multiplies by a constant weight: the only thing INT4 weight-only quantization changes (notebook 06)."""
    proto = load_model(model)
    initializers = {t.name for t in proto.graph.initializer}
    return any(node.op_type == "MatMul" and node.input[1] in initializers for node in proto.graph.node)


def build_variants(src: str | Path, folder: str | Path, *, int4: bool = True) -> dict[str, Path]:
    """FP32, its variants (INT8 dynamic, INT8 static QDQ per-channel, INT4, FP16) and the A/A control under ``folder``.

    INT4 is made only for a graph with MatMul weights (on any other it would be the FP32 graph
    unchanged). ``AA_NAME`` is the FP32 file again: measured as a separate variant, its latency
    ratio shows the timing noise of the run. Introduced in notebook 06.
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


def _metadata(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


def _quantize_cnn(source: Path, path: Path, stamp: Mapping[str, str]) -> None:
    """Pre-process and quantize ``source`` with ``CNN_INT8_SETTINGS`` into ``path``, with ``stamp`` in its metadata."""
    tag = f"{os.getpid()}.tmp"
    pre = path.with_name(f"digits_cnn_pre.{tag}.onnx")
    tmp = path.with_name(f"digits_cnn_int8.{tag}.onnx")
    settings = CNN_INT8_SETTINGS
    try:
        preprocess(source, pre)
        make_static_int8(
            pre,
            tmp,
            quant_format=settings["format"],
            per_channel=settings["per_channel"],
            method=settings["method"],
            reduce_range=settings["reduce_range"],
        )
        model = onnx.load(str(tmp))
        onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props}, **stamp})
        onnx.save(model, str(tmp))
        os.replace(tmp, path)  # renamed when complete: no reader sees half a file
    finally:
        pre.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)


def ensure_digits_cnn_int8(force: bool = False) -> Path:
    """Path of ``artifacts/digits_cnn_int8.onnx``: the course CNN, static INT8, QDQ, per-channel, 7-bit weights, MinMax.

    Notebook 06 recommends it; notebook 09 converts it for mobile. Made (deterministically) when it is
    missing, was quantized from another ``digits_cnn.onnx`` than the current one, or with other
    settings than ``CNN_INT8_SETTINGS`` (the source's SHA-256 and the settings are stored in the
    model's metadata under ``SOURCE_KEY`` and ``SETTINGS_KEY``).
    """
    from labsupport.models.digits_cnn import ensure_digits_cnn

    source = ensure_digits_cnn()
    stamp = {SOURCE_KEY: sha256_of(source), SETTINGS_KEY: json.dumps(CNN_INT8_SETTINGS, sort_keys=True)}
    path = artifact(CNN_INT8_NAME)
    if force or not path.is_file() or any(_metadata(path).get(key) != value for key, value in stamp.items()):
        _quantize_cnn(source, path, stamp)
    return path


# --------------------------------------------------------------------------------------------
# accuracy


def inputs_for(model: ModelLike, split: Split) -> tuple[str, np.ndarray]:
    """(input name, the split's images or flat rows) for a digits model, matched to its input's rank (notebook 06)."""
    name, rank = model_input(model)
    return name, (split.flat if rank == 2 else split.images)


def accuracy(path: str | Path, split: Split | None = None, config: Mapping[str, str] | None = None) -> float:
    """Fraction of ``split`` (default: the test split) a digits ONNX model classifies correctly (notebook 06)."""
    split = split if split is not None else load_digits().test
    return contract.accuracy(onnx_logits(path, split, config=config), split.labels)


# --------------------------------------------------------------------------------------------
# what each node computes in


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    """``{tensor: element type}`` from shape inference, with contrib ops' outputs typed like their first input."""
    with contextlib.suppress(Exception):  # contrib ops or odd graphs: use what the file already records
        proto = onnx.shape_inference.infer_shapes(proto)
    graph = proto.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    # contrib ops (MatMulNBits...) are opaque to ONNX shape inference: carry the first input's type on
    for node in graph.node:
        first = next((name for name in node.input if name), None)
        if first in types and node.op_type not in TYPE_CHANGING_OPS:
            for out in node.output:
                types.setdefault(out, types[first])
    return types


@dataclass
class _GraphFacts:
    """What deciding one node's precision needs to know about the rest of the graph."""

    initializers: set[str]
    producer: dict[str, onnx.NodeProto]
    consumers: dict[str, list[onnx.NodeProto]]
    types: dict[str, int]

    @classmethod
    def of(cls, proto: onnx.ModelProto) -> _GraphFacts:
        consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in proto.graph.node:
            for name in node.input:
                consumers.setdefault(name, []).append(node)
        producer = {out: node for node in proto.graph.node for out in node.output}
        return cls({t.name for t in proto.graph.initializer}, producer, consumers, _elem_types(proto))

    def runs_on_dequantized_data(self, node: onnx.NodeProto) -> bool:
        """True for a float op of a QDQ graph that ORT fuses into an integer kernel (DQ on every data input, no float weight)."""
        data_inputs = [name for name in node.input if name and name not in self.initializers]
        from_dq = all(name in self.producer and self.producer[name].op_type == "DequantizeLinear" for name in data_inputs)
        feeds_q = any(c.op_type == "QuantizeLinear" for out in node.output for c in self.consumers.get(out, []))
        float_weights = any(self.types.get(name) in FLOAT_TYPES for name in node.input if name in self.initializers)
        return bool(data_inputs) and from_dq and not float_weights and (feeds_q or node.op_type not in DATA_MOVEMENT_OPS)


_BY_TYPE = {onnx.TensorProto.FLOAT: "fp32", onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "int8"}


def _precision(node: onnx.NodeProto, facts: _GraphFacts) -> str:
    op = node.op_type
    if op in QDQ_OPS:
        return "q/dq"
    if op in NBITS_OPS:
        bits = {a.name: a.i for a in node.attribute}.get("bits", 4)
        return f"int{bits}"
    if op in INTEGER_OPS:
        return "int8"
    if op == "Cast":
        return "cast"
    if facts.runs_on_dequantized_data(node):
        return "int8"
    first = next((name for name in node.input if name), "")
    return _BY_TYPE.get(facts.types.get(first, 0), "other")


def node_precisions(model: ModelLike) -> list[dict[str, str]]:
    """Each node of a (quantized) graph with the precision it computes in: int8, int4, fp16, fp32, q/dq, cast or other.

    QDQ graphs: a compute node whose float inputs all come from DequantizeLinear runs as an INT8
    kernel once ONNX Runtime fuses the Q/DQ pairs around it. Other nodes take the element type
    of their first input (float16 -> fp16, float -> fp32, 8-bit -> int8). Introduced in notebook 06.
    """
    proto = load_model(model)
    facts = _GraphFacts.of(proto)
    return [
        {"node": node.name or f"({node.op_type})", "op": node.op_type, "precision": _precision(node, facts)} for node in proto.graph.node
    ]


def integer_operand_types(model: ModelLike) -> str:
    """``"QLinearConv uint8 x int8 x2, ..."``: activation x weight element types of each integer op in a graph ("-" if none).

    QOperator and dynamic files name them; for a QDQ file, save the graph ONNX Runtime runs
    (``open_session(..., optimized_path=...)``) and read that: ORT picks the types per CPU (notebook 06).
    """
    proto = load_model(model)
    types = _elem_types(proto)
    counts: Counter[str] = Counter()
    for node in proto.graph.node:
        if node.op_type in WEIGHT_INPUT:
            activation, weight = node.input[0], node.input[WEIGHT_INPUT[node.op_type]]
            counts[f"{node.op_type} {dtype_name(types.get(activation, 0))} x {dtype_name(types.get(weight, 0))}"] += 1
    return ", ".join(f"{key} x{n}" for key, n in counts.items()) or "-"


def fp32_nodes(model: ModelLike) -> list[str]:
    """``"name (Op)"`` of every node that still computes in FP32 in a quantized graph (notebook 06)."""
    return [f"{row['node']} ({row['op']})" for row in node_precisions(model) if row["precision"] == "fp32"]


def precision_summary(model: ModelLike) -> dict[str, str]:
    """``{precision: "Op xN, ..."}`` for a graph: which ops run in int8/int4/fp16/fp32 and how much Q/DQ glue (notebook 06)."""
    groups: dict[str, Counter[str]] = {}
    for row in node_precisions(model):
        groups.setdefault(row["precision"], Counter())[row["op"]] += 1
    return {p: ", ".join(f"{op} x{n}" for op, n in sorted(groups[p].items())) for p in PRECISION_ORDER if p in groups}
