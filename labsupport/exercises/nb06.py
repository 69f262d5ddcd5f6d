"""Exercises of notebook 06 (quantization)."""

from __future__ import annotations

import functools
import tempfile
import warnings
from pathlib import Path

import numpy as np

from labsupport.course.data import Split, load_digits
from labsupport.exercises import Exercise, Incorrect
from labsupport.models import contract
from labsupport.models.wide_mlp import INPUT_NAME as MLP_INPUT

BROKEN_PERCENTILE = 80.0  # exercise 2: Percentile calibration that clips the top 20% of every activation
RESTORE_THRESHOLD = 0.97
MAX_BATCHES = 10_000
COMPUTE_OPS = {"Gemm", "MatMul", "Conv"}
QOPERATOR_OPS = {"QGemm", "QLinearMatMul", "QLinearConv", "MatMulInteger", "ConvInteger"}  # integer ops of the QOperator format


# ------------------------------------------------------------------ exercise 1: a reader for the MLP


def _sorted_rows(rows: np.ndarray) -> np.ndarray:
    rows = np.ascontiguousarray(rows.reshape(len(rows), -1))
    return rows[np.lexsort(rows.T[::-1])]


def _same_rows(a: np.ndarray, b: np.ndarray) -> bool:
    return len(a) == len(b) and np.array_equal(_sorted_rows(a), _sorted_rows(b))


def _handed_out(reader) -> list:
    """What get_next() returns until it returns None."""
    if not callable(getattr(reader, "get_next", None)):
        raise Incorrect(f"calling your class must give a reader with get_next(), got {type(reader).__name__}")
    batches = []
    for _ in range(MAX_BATCHES):
        item = reader.get_next()
        if item is None:
            return batches
        batches.append(item)
    raise Incorrect(f"get_next() never returned None after {MAX_BATCHES} batches; it must return None when the split is used up")


def _fed_rows(reader, batch_size: int) -> np.ndarray:
    """Every batch the reader hands out, checked for the MLP's input format, concatenated."""
    batches = _handed_out(reader)
    if not batches:
        raise Incorrect("the first get_next() already returned None: the reader yields no data")
    for number, item in enumerate(batches):
        if not isinstance(item, dict) or set(item) != {MLP_INPUT}:
            got = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise Incorrect(f"batch {number} must be a dict {{'{MLP_INPUT}': array}} (the MLP's input name), got {got}")
        array = item[MLP_INPUT]
        if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.ndim != 2 or array.shape[1] != 64:
            got = f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
            raise Incorrect(f"batch {number} must be a float32 array of flat rows, shape (N, 64), got {got}")
        if len(array) != batch_size:
            raise Incorrect(f"batch {number} has {len(array)} rows; every batch must have batch_size={batch_size} rows")
    return np.concatenate([item[MLP_INPUT] for item in batches])


DRAWN_BATCH_SIZES = (7, 11, 13)  # none divides 540 or 180


def _drawn_case(digits) -> tuple[str, Split, int]:
    """A split of the training images whose size is a random multiple of a random batch size from DRAWN_BATCH_SIZES."""
    rng = np.random.default_rng()
    batch_size = int(rng.choice(DRAWN_BATCH_SIZES))
    count = batch_size * int(rng.integers(3, 8))
    rows = rng.choice(len(digits.train), size=count, replace=False)
    split = Split(digits.train.images[rows], digits.train.labels[rows])
    return f"{count}-image training", split, batch_size


def _check_reader_class(reader_class) -> str:
    is_instance = not isinstance(reader_class, type) and callable(getattr(reader_class, "get_next", None))
    if not callable(reader_class) or is_instance:
        got = "an instance" if is_instance else f"a {type(reader_class).__name__}"
        raise Incorrect(f"answer with the class itself (answer = MlpReader), got {got}: the checker makes several readers")
    digits = load_digits()
    # 27 divides the 540 test images but not the 180 calibration images; the drawn split has a size and a batch size that
    # share no divisor with 540 or 180: a divisibility test tied to one split, a global split or a whitelist fails one of them
    cases = [("calibration", digits.calibration, 60), ("test", digits.test, 20), ("test", digits.test, 27), _drawn_case(digits)]
    for name, split, batch_size in cases:
        try:
            reader = reader_class(split, batch_size)
        except ValueError as error:
            raise Incorrect(
                f"MlpReader({name} split, {batch_size}) raised ValueError ({error}), but {batch_size} divides its {len(split)} images"
            ) from None
        fed = _fed_rows(reader, batch_size)
        if name != "calibration" and _same_rows(fed, digits.calibration.flat):
            raise Incorrect(f"given the {name} split, the reader fed the calibration images: read the split it is given")
        if len(fed) == len(split) and not _same_rows(fed, split.flat):
            raise Incorrect(
                f"given the {name} split, the reader fed {len(fed)} rows, as many as the split has, but not its rows: "
                "feed each of split.flat's rows once and unchanged (no row repeated or left out, no rescaling or reordering "
                "of the values in a row)"
            )
        if not _same_rows(fed, split.flat):
            raise Incorrect(
                f"given the {name} split ({len(split)} images) in batches of {batch_size}, the reader fed {len(fed)} rows, "
                "not each of its images exactly once (split.flat holds them as rows)"
            )
    _check_readers_made_together(reader_class, digits)
    _check_ragged_refused(reader_class, digits)
    return "flat float32 rows under 'pixels', every image of the given split once, in equal batches"


def _check_readers_made_together(reader_class, digits) -> None:
    """Two readers made before either is drained feed their own splits (a notebook makes the test reader next to the other)."""
    calibration = reader_class(digits.calibration, 60)
    reader_class(digits.test, 20)
    batches = [np.asarray(item[MLP_INPUT]) for item in _handed_out(calibration)]  # their format passed the checks above
    fed = np.concatenate(batches) if batches else np.empty((0, 64), np.float32)
    if not _same_rows(fed, digits.calibration.flat):
        test_rows = {row.tobytes() for row in digits.test.flat}
        mixed = sum(row.tobytes() in test_rows for row in fed)
        raise Incorrect(
            f"MlpReader(calibration split, 60), made just before MlpReader(test split, 20), fed {len(fed)} rows, {mixed} of "
            "them test images: your readers share their batches (a class attribute or a global), so making a second reader "
            "changes the first and calibration sees the test split. Keep the batches on the instance: assign them to self in __init__"
        )


def _check_ragged_refused(reader_class, digits) -> None:
    """The constructor refuses a batch size that does not divide the split; raising later, in get_next, is too late."""
    try:
        reader = reader_class(digits.calibration, 7)
    except ValueError:
        return
    except Exception as error:
        raise Incorrect(
            f"MlpReader(calibration, 7) raised {type(error).__name__}; raise ValueError when batch_size does not divide the split"
        ) from None
    handed_out = 0
    try:
        while reader.get_next() is not None and handed_out < MAX_BATCHES:
            handed_out += 1
    except ValueError:
        raise Incorrect(
            f"MlpReader(calibration, 7) raised ValueError only in get_next(), after handing out {handed_out} batches: raise it "
            "in __init__, so a wrong batch size fails where the reader is made, before quantize_static runs the model on any batch"
        ) from None
    raise Incorrect(
        "MlpReader(calibration, 7) must raise ValueError: 180 images do not split into equal batches of 7, "
        "and the histogram calibrators fail on a ragged last batch"
    )


# ------------------------------------------------------------------ exercise 2: exclude the sensitive node


@functools.cache
def mlp_preprocessed() -> str:
    """Path of the pre-processed wide MLP (Gemm layers) that exercise 2 quantizes."""
    from labsupport.course.paths import artifact
    from labsupport.models.wide_mlp import ensure_digits_mlp
    from labsupport.topics.quantization import preprocess

    path = artifact("quantization/exercises/digits_mlp_pre.onnx")
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        preprocess(ensure_digits_mlp(), path)
    return str(path)


def _activation_scales(model) -> dict[str, float]:
    """{tensor: scale} of every activation a QDQ model quantizes (weights left out)."""
    from onnx import numpy_helper

    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {
        node.input[0]: float(constants[node.input[1]])
        for node in model.graph.node
        if node.op_type == "QuantizeLinear" and node.input[0] not in constants and node.input[1] in constants
    }


@functools.cache
def _broken_scales() -> tuple[tuple[str, float], ...]:
    """Activation scales of the MLP after the exercise's Percentile-80 calibration (what every answer must keep)."""
    import onnx

    from labsupport.topics.quantization import make_static_int8

    with tempfile.TemporaryDirectory() as folder:
        out = make_static_int8(
            mlp_preprocessed(), Path(folder) / "broken.onnx", method="Percentile", extra_options={"CalibPercentile": BROKEN_PERCENTILE}
        )
        return tuple(sorted(_activation_scales(onnx.load(out)).items()))


def float_compute_nodes(model) -> list[str]:
    """Names of the Gemm/MatMul/Conv nodes whose weights are still float: the nodes ``nodes_to_exclude`` left in FP32."""
    from onnx import TensorProto

    floats = {t.name for t in model.graph.initializer if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16)}
    return [node.name for node in model.graph.node if node.op_type in COMPUTE_OPS and node.input[1] in floats]


def _quantized_weights(model) -> list[tuple[int, np.ndarray]]:
    """(largest |weight - zero point|, scale) for every 8-bit integer weight (INT8 or UINT8) a DequantizeLinear reads.

    With reduce_range=True (7 bits) the largest distance from the zero point is 64, with 8 bits it reaches 127.
    """
    from onnx import TensorProto, numpy_helper

    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    integer = {t.name for t in model.graph.initializer if t.data_type in (TensorProto.INT8, TensorProto.UINT8)}
    weights = []
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in integer or node.input[1] not in constants:
            continue
        values = constants[node.input[0]].astype(np.int32)
        zero = constants[node.input[2]].astype(np.int32) if len(node.input) > 2 and node.input[2] in constants else np.int32(0)
        if zero.ndim == 1:  # per-channel zero points lie along the node's axis
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % values.ndim
            zero = zero.reshape([-1 if d == axis else 1 for d in range(values.ndim)])
        weights.append((int(np.abs(values - zero).max()), constants[node.input[1]]))
    return weights


def _gemm_names() -> list[str]:
    import onnx

    return [node.name for node in onnx.load(mlp_preprocessed()).graph.node if node.op_type == "Gemm"]


def _check_eight_bits(model) -> None:
    """Activations and weights are stored in 8 bits (INT8 or UINT8), the exercise's static INT8."""
    from onnx import TensorProto

    types = {t.name: t.data_type for t in model.graph.initializer}
    eight_bits = (TensorProto.INT8, TensorProto.UINT8)
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in types or len(node.input) < 3 or node.input[2] not in types:
            continue
        if types[node.input[2]] not in eight_bits:
            kind = TensorProto.DataType.Name(types[node.input[2]])
            raise Incorrect(
                f"the activations are quantized to {kind} (the zero point of {node.input[0]!r} is {kind}): this exercise is static "
                "INT8, keep activation_type=QuantType.QInt8 or QUInt8"
            )
    for node in model.graph.node:  # biases are INT32 in every QDQ model
        if node.op_type == "DequantizeLinear" and types.get(node.input[0], TensorProto.INT8) not in (*eight_bits, TensorProto.INT32):
            kind = TensorProto.DataType.Name(types[node.input[0]])
            raise Incorrect(
                f"the weight {node.input[0]!r} is stored as {kind}: this exercise is static INT8, keep weight_type=QuantType.QInt8"
            )


def _check_model(model) -> str:
    """The single node the quantized MLP leaves in FP32, once the file is shown to be the exercise's QDQ model."""
    ops = {node.op_type for node in model.graph.node}
    if "DynamicQuantizeLinear" in ops:
        raise Incorrect("the file holds DynamicQuantizeLinear/MatMulInteger: that is quantize_dynamic; this exercise is quantize_static")
    qoperator = sorted(ops & QOPERATOR_OPS)
    if qoperator:
        raise Incorrect(
            f"the file holds QOperator integer ops ({', '.join(qoperator)}): quantize in the QDQ format the exercise asks for "
            "(quant_format=QuantFormat.QDQ, quantize_static's default)"
        )
    if not {"QuantizeLinear", "DequantizeLinear"} <= ops:
        raise Incorrect("the file at dst has no QuantizeLinear/DequantizeLinear nodes: quantize it with quantize_static (QDQ format)")
    if "Gemm" not in ops:
        raise Incorrect("the file has no Gemm layer: quantize the model quantize_mlp is given at src (the pre-processed MLP)")
    _check_eight_bits(model)
    weights = _quantized_weights(model)
    if weights and all(scale.size == 1 for _, scale in weights):
        raise Incorrect("every weight has a single scale: quantize per channel (per_channel=True), as the exercise asks")
    if any(distance > 64 for distance, _ in weights):
        raise Incorrect(
            "the weights use 8 bits: quantize with reduce_range=True as the course does (section 6), so the result holds on every CPU"
        )
    excluded = float_compute_nodes(model)
    if not excluded:
        raise Incorrect(
            "every layer is quantized: leave one node in FP32 with nodes_to_exclude=[its name]. quantize_static silently "
            "ignores names it does not find in the graph at src: the pre-processed MLP names its Gemms "
            f"{', '.join(_gemm_names())} (the exported MLP's names are gone after pre-processing)"
        )
    if len(excluded) > 1:
        raise Incorrect(f"{len(excluded)} layers stay in FP32 ({', '.join(excluded)}); exclude a single node: find the one that matters")
    expected = dict(_broken_scales())
    mine = _activation_scales(model)
    shared = set(mine) & set(expected)
    if not shared or any(not np.isclose(mine[t], expected[t], rtol=1e-6) for t in shared):
        raise Incorrect(
            f"the activation ranges are not those of Percentile calibration at {BROKEN_PERCENTILE:g} on the calibration split: "
            f"keep calibrate_method=CalibrationMethod.Percentile, extra_options={{'CalibPercentile': {BROKEN_PERCENTILE}}}, "
            "and calibrate with quant.reader_for(src), which reads the calibration split (never the test split) "
            "(better calibration is the other remedy; this exercise practises nodes_to_exclude)"
        )
    return excluded[0]


def _check_quantize_function(quantize_mlp) -> str:
    import onnx

    from labsupport.topics.quantization import accuracy, quiet

    if isinstance(quantize_mlp, str) or not callable(quantize_mlp):
        raise Incorrect(f"answer with your function quantize_mlp(src, dst), got {type(quantize_mlp).__name__}")
    with tempfile.TemporaryDirectory() as folder:
        dst = Path(folder) / "mlp_int8.onnx"
        with quiet():
            quantize_mlp(mlp_preprocessed(), str(dst))
        if not dst.is_file():
            raise Incorrect("quantize_mlp(src, dst) wrote nothing at dst: give dst to quantize_static as the output path")
        node = _check_model(onnx.load(str(dst)))
        restored = accuracy(dst)
    if restored < RESTORE_THRESHOLD:
        raise Incorrect(
            f"leaving {node!r} in FP32 gives {restored:.1%}, below {RESTORE_THRESHOLD:.0%}; "
            "the SQNR table is a clue, not a proof: try each candidate and measure"
        )
    return f"with {node!r} left in FP32 the MLP is back at {restored:.1%}"


# ------------------------------------------------------------------ exercise 3: LLM memory


PARAMETERS = 13e9  # exercise 3: a 13B model at INT4, blocks of 32 weights with one FP16 scale each
# bits per weight of the usual wrong computations, and what each one counted
_INT4_MISTAKES = (
    (4, "that counts 4 bits per weight only; every block of 32 weights also stores a 16-bit scale"),
    (
        4 + 32 / 32,
        "that is 5 bits per weight: 32 bits per block of 32 on top of the 4-bit weights, which is a 32-bit (FP32) scale, "
        "or an FP16 scale plus an FP16 zero point; the question's blocks store one FP16 scale and nothing else",
    ),
    (4 + 16 / 32 + 4 / 32, "that also counts a 4-bit zero point per block; the question's blocks store one FP16 scale and nothing else"),
    (4 + 16 / 32 + 8 / 32, "that also counts an 8-bit zero point per block; the question's blocks store one FP16 scale and nothing else"),
    (4 + 2 / 32, "that counts the FP16 scale as 2 bits per block: it takes 2 bytes, 16 bits"),
    (4 + 16 / 64, "that spreads the 16-bit scale over 64 weights; a block holds 32"),
    (8, "that is INT8, 8 bits per weight; the question is INT4"),
    (16, "that is the FP16 model, 16 bits per weight; the question is INT4"),
    (32, "that is the FP32 model, 32 bits per weight; the question is INT4"),
)


def _check_int4_gb(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise Incorrect(f"expected a number of GB, got {type(value).__name__}")
    value = float(value)
    truth = PARAMETERS * (4 + 16 / 32) / 8 / 1e9
    for bits, mistake in _INT4_MISTAKES:
        if abs(value - PARAMETERS * bits / 8 / 1e9) < 0.05:
            raise Incorrect(mistake)
    if abs(value - truth * 1e9 / 2**30) < 0.05:
        raise Incorrect("that is GiB (2**30 bytes); the question asks for GB (1e9 bytes)")
    if abs(value - truth * 8) < 0.05:
        raise Incorrect(f"{value:.4g} is gigabits (bits per weight x parameters / 1e9); divide by 8 for bytes")
    for unit, factor, divisor in (("bytes", 1e9, "1e9"), ("MB", 1e3, "1000")):
        if abs(value / factor - truth) < 0.05:
            raise Incorrect(f"{value:.4g} looks like {unit}; the question asks for GB: divide by {divisor}")
    if abs(value - truth) > 0.05:
        raise Incorrect(f"{value:.2f} GB is not it: bits per weight x parameters / 8 gives bytes")
    return f"{truth:.2f} GB: 4.5 bits per weight"


q1 = Exercise(
    1,
    "a calibration reader for the wide MLP",
    _check_reader_class,
    hint=(
        "The MLP reads 'pixels', rows of 64 floats: split.flat holds them. In __init__(self, split, batch_size) "
        "raise ValueError when len(split.flat) % batch_size != 0, then keep on self (not on the class) an iterator over "
        "[{'pixels': rows[i:i + batch_size]} ...]; get_next() returns next(iterator, None)."
    ),
    solution_code="""
        from onnxruntime.quantization import CalibrationDataReader

        class MlpReader(CalibrationDataReader):
            def __init__(self, split, batch_size):
                rows = split.flat
                if len(rows) % batch_size:
                    raise ValueError(f"batch_size {batch_size} does not divide the {len(rows)} images")
                self._batches = iter([{"pixels": rows[i:i + batch_size]} for i in range(0, len(rows), batch_size)])

            def get_next(self):
                return next(self._batches, None)

        answer = MlpReader
    """,
)

q2 = Exercise(
    2,
    "leave the sensitive node in FP32 yourself",
    _check_quantize_function,
    hint=(
        "Inside quantize_mlp(src, dst) call quantize_static(src, dst, quant.reader_for(src), per_channel=True, "
        "reduce_range=True, calibrate_method=CalibrationMethod.Percentile, extra_options={'CalibPercentile': 80.0}, "
        "nodes_to_exclude=[name]). To find the name, make a version that takes the node as a third argument, run it "
        "for each Gemm of onnx.load(mlp_pre).graph.node (the names in src: quantize_static silently ignores others), "
        "and measure quant.accuracy of each result."
    ),
    solution_code="""
        from onnxruntime.quantization import CalibrationMethod, quantize_static
        from labsupport.topics import quantization as quant

        def quantize_mlp(src, dst, node="node_matmul/MatMulAddFusion"):  # the first Gemm: measured, the only one that helps
            quantize_static(src, dst, quant.reader_for(src), per_channel=True, reduce_range=True,
                            calibrate_method=CalibrationMethod.Percentile, extra_options={"CalibPercentile": 80.0},
                            nodes_to_exclude=[node])

        answer = quantize_mlp
    """,
)

q3 = Exercise(
    3,
    "memory of a 13B model at INT4",
    _check_int4_gb,
    hint="INT4 with block size 32 and an FP16 scale per block stores 4 + 16/32 = 4.5 bits per weight.",
    solution_code="""
        from labsupport.topics.memory import weight_bytes

        answer = weight_bytes(13e9, bits=4, block_size=32, scale_dtype="fp16") / 1e9
    """,
)


# ------------------------------------------------------------------ exercise 4: the recipe on a model the notebook has not shown

CANCER_INPUT = "features"
CANCER_HIDDEN = 256
CANCER_SIZE_RATIO = 0.30  # exercise 4: static INT8 of the 30-256-256-2 MLP is about 0.27 of its FP32 file
CANCER_ACCURACY_DROP = 0.02


@functools.cache
def cancer_data() -> dict[str, np.ndarray]:
    """scikit-learn's breast-cancer set (569 patients, 30 float64 features standardized with the training rows' mean and
    standard deviation), split once, stratified and seeded."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    features, labels = load_breast_cancer(return_X_y=True)
    rest, test, rest_labels, test_labels = train_test_split(features, labels, test_size=171, stratify=labels, random_state=0)
    train, calibration, train_labels, _ = train_test_split(rest, rest_labels, test_size=60, stratify=rest_labels, random_state=0)
    mean, std = train.mean(axis=0), train.std(axis=0)
    train, calibration, test = ((rows - mean) / std for rows in (train, calibration, test))
    return {"train": train, "train_labels": train_labels, "calibration": calibration, "test": test, "test_labels": test_labels}


def _cancer_graph(coefs, intercepts):
    """The trained MLP as MatMul + Add (+ Relu) layers, its one logistic output unit z as the two logits (-z/2, z/2)."""
    from onnx import TensorProto, helper, numpy_helper

    coefs = [*coefs[:-1], np.hstack([-coefs[-1] / 2, coefs[-1] / 2])]
    intercepts = [*intercepts[:-1], np.hstack([-intercepts[-1] / 2, intercepts[-1] / 2])]
    nodes, initializers, current = [], [], CANCER_INPUT
    for layer, (weight, bias) in enumerate(zip(coefs, intercepts, strict=True)):
        initializers += [numpy_helper.from_array(weight.astype(np.float32), f"layer{layer}.weight")]
        initializers += [numpy_helper.from_array(bias.astype(np.float32), f"layer{layer}.bias")]
        nodes += [helper.make_node("MatMul", [current, f"layer{layer}.weight"], [f"matmul{layer}"], name=f"layer{layer}/MatMul")]
        last = layer == len(coefs) - 1
        nodes += [
            helper.make_node(
                "Add", [f"matmul{layer}", f"layer{layer}.bias"], ["logits" if last else f"add{layer}"], name=f"layer{layer}/Add"
            )
        ]
        if not last:
            nodes += [helper.make_node("Relu", [f"add{layer}"], [f"relu{layer}"], name=f"layer{layer}/Relu")]
            current = f"relu{layer}"
    graph = helper.make_graph(
        nodes,
        "breast_cancer_mlp",
        [helper.make_tensor_value_info(CANCER_INPUT, TensorProto.FLOAT, ["batch", coefs[0].shape[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@functools.cache
def cancer_model() -> str:
    """Path of exercise 4's FP32 model: a 30-256-256-2 MLP trained on the breast-cancer split."""
    import onnx
    from sklearn.neural_network import MLPClassifier

    from labsupport.course.paths import artifact

    path = artifact("quantization/exercises/breast_cancer_mlp.onnx")
    if not path.is_file():
        data = cancer_data()
        mlp = MLPClassifier((CANCER_HIDDEN, CANCER_HIDDEN), max_iter=40, random_state=0)
        with warnings.catch_warnings():  # 40 epochs are plenty here; sklearn would warn that it has not converged
            warnings.simplefilter("ignore")
            mlp.fit(data["train"], data["train_labels"])
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(_cancer_graph(mlp.coefs_, mlp.intercepts_), path)
    return str(path)


def cancer_accuracy(path) -> float:
    """Test accuracy of a breast-cancer model file (exercise 4)."""
    import onnxruntime as ort

    data = cancer_data()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits = session.run(None, {CANCER_INPUT: data["test"].astype(np.float32)})[0]
    return contract.accuracy(logits, data["test_labels"])


def _run_learner_quantizer(quantize, src: str, dst: Path) -> None:
    from labsupport.topics.quantization import quiet

    try:
        with quiet():
            quantize(src, str(dst), cancer_data()["calibration"].copy())
    except Incorrect:
        raise
    except Exception as error:
        text = str(error)
        if "double" in text or "data type" in text.lower():
            raise Incorrect(f"the quantizer refused your calibration batches ({text[:120]}): the rows are float64, feed float32") from None
        if "input" in text.lower() or isinstance(error, KeyError):
            raise Incorrect(f"the quantizer refused your feeds ({text[:120]}): this model's input is named {CANCER_INPUT!r}") from None
        raise Incorrect(f"your function raised {type(error).__name__}: {text[:200]}") from None
    if not dst.is_file():
        raise Incorrect("your function wrote nothing at dst: give dst to quantize_static as its output path")


def _check_cancer_structure(model) -> None:
    ops = {node.op_type for node in model.graph.node}
    if ops & {"DynamicQuantizeLinear", "MatMulInteger"}:
        raise Incorrect("the file holds DynamicQuantizeLinear/MatMulInteger: that is quantize_dynamic; this exercise is the static recipe")
    if ops & QOPERATOR_OPS:
        raise Incorrect(f"the file holds QOperator ops ({', '.join(sorted(ops & QOPERATOR_OPS))}): use quant_format=QuantFormat.QDQ")
    if not {"QuantizeLinear", "DequantizeLinear"} <= ops:
        raise Incorrect(f"the file has no QuantizeLinear/DequantizeLinear pairs (ops: {', '.join(sorted(ops))}): use quantize_static")
    _check_eight_bits(model)
    matmul_weights = {node.input[1] for node in model.graph.node if node.op_type == "MatMul"}
    dequantized = {node.output[0]: node.input[0] for node in model.graph.node if node.op_type == "DequantizeLinear"}
    integer_weights = {dequantized[name] for name in matmul_weights if name in dequantized}
    if len(integer_weights) < len(matmul_weights):
        raise Incorrect(f"{len(integer_weights)} of the {len(matmul_weights)} MatMul weights are 8-bit integers: quantize every MatMul")
    weights = [(distance, scale) for distance, scale in _quantized_weights(model) if np.size(scale) > 1]
    if len(weights) < len(matmul_weights):
        raise Incorrect("a MatMul weight has one scale for the whole tensor: pass per_channel=True (a scale per output channel)")
    if max(distance for distance, _ in weights) > 64:
        raise Incorrect("the weights use the full 8 bits (up to 127): pass reduce_range=True, the notebook's portable 7-bit weights")


def _check_cancer_calibration(model) -> None:
    """The input's quantization range must be the calibration rows' MinMax range (asymmetric, or symmetric around 0)."""
    from onnx import numpy_helper

    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    quantize = next((n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == CANCER_INPUT), None)
    if quantize is None or quantize.input[1] not in constants:
        raise Incorrect(f"the model's input {CANCER_INPUT!r} is not quantized with a fixed scale: calibrate with quantize_static")
    width = float(constants[quantize.input[1]]) * 255  # the float range the 256 levels of the input cover
    rows = cancer_data()["calibration"].astype(np.float32)
    low, high = min(0.0, float(rows.min())), max(0.0, float(rows.max()))
    expected = (high - low, 2 * max(-low, high) * 255 / 254)  # MinMax, asymmetric (the default) or ActivationSymmetric
    if not any(abs(width - range_width) <= 0.03 * range_width for range_width in expected):
        raise Incorrect(
            f"the input's quantization range spans {width:.3g}, but the calibration rows you are given span {low:.2f}..{high:.2f} "
            f"({high - low:.3g}): the reader did not feed them all, unchanged (zeros, random or a few rows calibrate other ranges); "
            "feed every row of calibration_rows as float32 and keep the recipe's MinMax calibration"
        )


def _check_cancer_quantizer(quantize) -> str:
    import onnx

    if isinstance(quantize, str) or not callable(quantize):
        raise Incorrect(f"answer with your function quantize_cancer(src, dst, calibration_rows), got {type(quantize).__name__}")
    src = cancer_model()
    with tempfile.TemporaryDirectory() as folder:
        dst = Path(folder) / "cancer_int8.onnx"
        _run_learner_quantizer(quantize, src, dst)
        _check_cancer_structure(onnx.load(str(dst)))
        _check_cancer_calibration(onnx.load(str(dst)))
        ratio = dst.stat().st_size / Path(src).stat().st_size
        quantized, reference = cancer_accuracy(dst), cancer_accuracy(src)
    if ratio > CANCER_SIZE_RATIO:
        raise Incorrect(f"the file is {ratio:.2f} of the FP32 size, above the target {CANCER_SIZE_RATIO}")
    if quantized < reference - CANCER_ACCURACY_DROP:
        raise Incorrect(
            f"test accuracy {quantized:.1%} against FP32 {reference:.1%}: more than {CANCER_ACCURACY_DROP:.0%} lost; "
            "calibrate on the calibration rows you are given, not on made-up or rescaled data"
        )
    return f"static INT8 of the breast-cancer MLP: {ratio:.2f} of the FP32 size, test accuracy {quantized:.1%} (FP32 {reference:.1%})"


q4 = Exercise(
    4,
    "the static recipe on a model you have not seen",
    _check_cancer_quantizer,
    hint=(
        "Read the input name from onnx.load(src).graph.input[0] (it is not 'pixels'); the rows are float64, the model takes "
        "float32; 60 rows split into equal batches with np.split (6 batches of 10, say). Then quantize_static as in the "
        "recipe: QDQ, per_channel=True, reduce_range=True."
    ),
    solution_code="""
        import numpy as np
        import onnx
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

        def quantize_cancer(src, dst, calibration_rows):
            input_name = onnx.load(src).graph.input[0].name

            class Reader(CalibrationDataReader):
                def __init__(self):
                    self.batches = iter(np.split(calibration_rows.astype(np.float32), 6))

                def get_next(self):
                    batch = next(self.batches, None)
                    return None if batch is None else {input_name: batch}

            quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=True)

        answer = quantize_cancer
    """,
)

EXERCISES = [q1, q2, q3, q4]
