"""Exercises of notebook 09 (deploying to the browser, Node.js and phones)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np

from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import answer_path, blame_answer, onnx_session

_LOGIT_TOLERANCE = 1e-4  # what a conversion keeps: notebook 09 compares its .ort logits at this tolerance
_ANDROID_PACKAGE = {"NnapiExecutionProvider", "XnnpackExecutionProvider"}  # what onnxruntime-android adds to the CPU
_NOT_ON_ANDROID = {
    "CoreMLExecutionProvider": "CoreML exists only on Apple devices (iOS, macOS)",
    "CUDAExecutionProvider": "phones have no CUDA GPU",
    "TensorrtExecutionProvider": "TensorRT needs an NVIDIA GPU, which phones do not have",
    "DmlExecutionProvider": "DirectML is Windows-only",
    "JsExecutionProvider": "the JS/WebGPU providers belong to onnxruntime-web in a browser",
    "WebGpuExecutionProvider": "the WebGPU provider belongs to a browser (onnxruntime-web)",
    "QNNExecutionProvider": "QNN ships in its own package (onnxruntime-android-qnn, for Snapdragon phones), not in onnxruntime-android",
}


_NNAPI_FLAGS = {"NNAPI_FLAG_USE_FP16", "NNAPI_FLAG_USE_NCHW", "NNAPI_FLAG_CPU_DISABLED", "NNAPI_FLAG_CPU_ONLY"}
_OPTION_KEYS = {  # the option keys each provider of this app takes
    "NnapiExecutionProvider": {"flags"},
    "XnnpackExecutionProvider": {"intra_op_num_threads"},
    "CPUExecutionProvider": set(),
}
_OTHER_PROVIDERS_KEYS = {  # keys of other providers, to name the mix-up
    "CoreML": {"ModelFormat", "MLComputeUnits", "RequireStaticInputShapes", "EnableOnSubgraphs", "ModelCacheDirectory"},
    "XNNPACK": {"intra_op_num_threads"},
    "QNN": {"backend_path", "backend_type", "htp_performance_mode"},
}
_APP_SETS_NNAPI_FLAGS = (
    "the app sets NNAPI's flags with addNnapi(EnumSet.of(NNAPIFlags.USE_FP16)) (Kotlin/Java); Python's providers= ignores NNAPI options"
)


def _provider_name(entry: object) -> str:
    """One entry of ``providers=[...]``: a name, or a (name, options dict) tuple as ONNX Runtime's Python API takes it."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], dict):
        _check_options(*entry)
        return entry[0]
    raise Incorrect(
        f"each entry must be a provider name or a (name, options dict) tuple, as InferenceSession's providers= takes them; got {entry!r}"
    )


def _check_options(name: str, options: dict) -> None:
    """Refuse option keys that belong to another provider (or to none), and NNAPI's CPU_ONLY flag."""
    allowed = _OPTION_KEYS.get(name)
    if allowed is None:
        return  # a provider this app cannot use: _provider_names says why
    nnapi_note = f"; {_APP_SETS_NNAPI_FLAGS}" if name == "NnapiExecutionProvider" else ""
    for key in options:
        if key not in allowed:
            owner = next((provider for provider, keys in _OTHER_PROVIDERS_KEYS.items() if key in keys), None)
            whose = f"{key!r} is an option of {owner}, not of {name}" if owner else f"{name} has no option {key!r}"
            takes = f"it takes {sorted(allowed)}" if allowed else "it takes no options in providers= (threads are SessionOptions')"
            raise Incorrect(f"{whose}: {takes}{nnapi_note}")
    if name == "NnapiExecutionProvider":
        _check_nnapi_flags(str(options.get("flags", "")))


def _check_nnapi_flags(flags: str) -> None:
    names = {flag.strip() for flag in flags.replace("|", ",").split(",") if flag.strip()}
    unknown = sorted(names - _NNAPI_FLAGS)
    if unknown:
        raise Incorrect(f"{unknown} are not NNAPI flags (those are {sorted(_NNAPI_FLAGS)}); {_APP_SETS_NNAPI_FLAGS}")
    if "NNAPI_FLAG_CPU_ONLY" in names:
        raise Incorrect(
            "NNAPI_FLAG_CPU_ONLY makes NNAPI run only its CPU reference implementation, the opposite of using the "
            f"phone's accelerator; {_APP_SETS_NNAPI_FLAGS}"
        )


def _provider_names(providers) -> list[str]:
    import onnxruntime as ort

    if isinstance(providers, str) or not isinstance(providers, (list, tuple)):
        raise Incorrect(f"expected a list of provider names such as ['...ExecutionProvider', ...], got {type(providers).__name__}")
    names = [_provider_name(entry) for entry in providers]
    known = set(ort.get_all_providers())
    for name in names:
        if name not in known:
            raise Incorrect(f"{name!r} is not an ONNX Runtime provider name (see onnxruntime.get_all_providers())")
        if name in _NOT_ON_ANDROID:
            raise Incorrect(f"{name} cannot run in this app: {_NOT_ON_ANDROID[name]}")
    if len(set(names)) != len(names):
        raise Incorrect("each provider should appear once (ONNX Runtime ignores a repeated one, options and all)")
    return names


def _check_android_providers(providers) -> str:
    names = _provider_names(providers)
    if not names or names[-1] != "CPUExecutionProvider":
        raise Incorrect("end the list with CPUExecutionProvider: it runs every operator the others do not take")
    extra = set(names) - _ANDROID_PACKAGE - {"CPUExecutionProvider"}
    if extra:
        raise Incorrect(f"{sorted(extra)} are not in the onnxruntime-android package (it has NNAPI, XNNPACK and the CPU)")
    if "NnapiExecutionProvider" not in names:
        raise Incorrect("the phone has an NNAPI driver and the checker says NNAPI takes all 23 nodes of this payload: use it")
    if names[0] != "NnapiExecutionProvider":
        raise Incorrect(
            f"{names[0]} before NNAPI would claim every node it can run before NNAPI is asked: "
            "ONNX Runtime offers the nodes to the providers in list order"
        )
    verdict = f"{' -> '.join(names)}: NNAPI gets first pick of the nodes, and the CPU runs whatever is left"
    nnapi_options = any(isinstance(entry, tuple) and entry[0] == "NnapiExecutionProvider" and entry[1] for entry in providers)
    return f"{verdict} ({_APP_SETS_NNAPI_FLAGS})" if nnapi_options else verdict


def _whole_batches(images: np.ndarray, size: int) -> np.ndarray:
    """``images`` repeated (and cut) to fill whole batches of ``size``: every image at least once."""
    count = -(-len(images) // size) * size
    return np.resize(images, (count, *images.shape[1:]))


def _course_cnn_logits(session, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The images run and the answer's logits for them, in batches of the size its input fixes (one run when the batch is free)."""
    batch = session.get_inputs()[0].shape[0]
    size = batch if isinstance(batch, int) and batch > 0 else len(images)
    filled = _whole_batches(images, size)
    name = session.get_inputs()[0].name
    with blame_answer("the .ort model cannot classify the test images"):
        return filled, np.concatenate([session.run(None, {name: chunk})[0] for chunk in np.split(filled, len(filled) // size)])


def _check_ort_file(path) -> str:
    from labsupport.course.data import load_digits
    from labsupport.models.digits_cnn import ensure_digits_cnn
    from labsupport.topics.edge import python_reference
    from labsupport.topics.mobile import is_ort_format

    path = answer_path(path, "the path (str or Path) of the .ort file the converter wrote")
    if path.suffix.lower() != ".ort" or not is_ort_format(path):
        raise Incorrect(f"{path.name} is not an ORT-format model (expected a .ort file whose header says ORTM)")
    session = onnx_session(path, "the path of the .ort file the converter wrote")
    test_images = load_digits().test.images[:64]
    images, got = _course_cnn_logits(session, test_images)
    want = python_reference(ensure_digits_cnn(), images)["logits"]
    if got.shape != want.shape:
        raise Incorrect(f"the .ort model gives outputs of shape {got.shape}; the course CNN gives {want.shape}")
    agreement = float(np.mean(got.argmax(axis=1) == want.argmax(axis=1)))
    if agreement < 0.95:
        raise Incorrect(
            f"this .ort model agrees with the course CNN on only {agreement:.0%} of {len(test_images)} test images: convert digits_cnn.onnx"
        )
    excess = float(np.max(np.abs(got - want) / (_LOGIT_TOLERANCE * (1 + np.abs(want)))))
    if excess > 1:
        raise Incorrect(
            f"its logits differ from the course CNN's by {excess:.0f}x the tolerance atol=rtol={_LOGIT_TOLERANCE:g}, although a conversion "
            "keeps them: this is another model (the INT8 one, or one with a Softmax added?); convert ensure_digits_cnn()"
        )
    return f"{path.name} is an ORT-format model whose logits match the course CNN's on {len(test_images)} test images"


_SAMPLE_CONFIG = """\
# Generated from model/s:
# - /somewhere/model_a.ort
# - /somewhere/model_b.ort
ai.onnx;12;MaxPool
ai.onnx;13;Gemm,Softmax
ai.onnx;19;Reshape
com.microsoft;1;FusedConv,QLinearAdd
"""
_SAMPLE_EXPECTED = {
    "ai.onnx": {"MaxPool", "Gemm", "Softmax", "Reshape"},
    "com.microsoft": {"FusedConv", "QLinearAdd"},
}


def _check_config_reader(read) -> str:
    if not callable(read):
        raise Incorrect(f"expected a function path -> {{domain: set of operator names}}, got {type(read).__name__}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sample.required_operators.config"
        path.write_text(_SAMPLE_CONFIG, encoding="utf-8")
        got = read(path)
    if not isinstance(got, dict):
        raise Incorrect(f"the function must return a dict {{domain: set of operator names}}, got {type(got).__name__}")
    got = {str(domain): value for domain, value in got.items()}
    if any(domain.startswith("#") for domain in got):
        raise Incorrect("lines starting with # are comments: skip them")
    for domain, ops in got.items():
        if isinstance(ops, str) or not isinstance(ops, (set, frozenset, list, tuple)):
            raise Incorrect(f"the value for {domain!r} must be a set of operator names, got {type(ops).__name__}")
    found = {domain: set(ops) for domain, ops in got.items()}
    if set(found) != set(_SAMPLE_EXPECTED):
        raise Incorrect(f"expected the domains {sorted(_SAMPLE_EXPECTED)}, got {sorted(found)}")
    for domain, ops in _SAMPLE_EXPECTED.items():
        if found[domain] != ops:
            missing, extra = sorted(ops - found[domain]), sorted(found[domain] - ops)
            raise Incorrect(
                f"domain {domain!r}: missing {missing}, unexpected {extra} "
                "(one domain may appear on several lines, one per opset, and a line lists several comma-separated ops)"
            )
    return "the reader merges every opset line of a domain and skips the comments"


RUNTIME_STYLE_SUFFIX = ".with_runtime_opt.ort"  # the name convert_onnx_models_to_ort gives a Runtime-style file
_TABULAR = {"iris": ("load_iris", "X"), "wine": ("load_wine", "features")}  # data set and input name of exercise 4's models


@functools.cache
def _tabular_onnx(name: str) -> tuple[str, np.ndarray]:
    """A skl2onnx classifier of ``name`` (a dynamic batch, its own input name) saved to a scratch file, and 6 of its rows."""
    import sklearn.datasets
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LogisticRegression

    loader, input_name = _TABULAR[name]
    features, labels = getattr(sklearn.datasets, loader)(return_X_y=True)
    features = features.astype(np.float32)
    model = LogisticRegression(max_iter=5000).fit(features, labels)
    initial_types = [(input_name, FloatTensorType([None, features.shape[1]]))]
    proto = to_onnx(model, initial_types=initial_types, options={"zipmap": False}, target_opset={"": 18, "ai.onnx.ml": 3})
    path = Path(tempfile.mkdtemp(prefix="nb09_q4_")) / f"{name}.onnx"
    path.write_bytes(proto.SerializeToString())
    return str(path), features[::25][:6]


def _check_mobile_payload(make_payload) -> str:
    import onnxruntime

    from labsupport.topics.mobile import is_ort_format

    if not callable(make_payload):
        raise Incorrect("expected a function make_payload(onnx_path, output_dir) -> path of the .ort file")
    for name in _TABULAR:
        source, rows = _tabular_onnx(name)
        output_dir = Path(tempfile.mkdtemp(prefix=f"nb09_q4_{name}_"))
        try:
            made = make_payload(source, output_dir)
        except Exception as error:
            raise Incorrect(
                f"make_payload raised {type(error).__name__} on the {name} model (input {_TABULAR[name][1]!r}, "
                f"{rows.shape[1]} features): read the input's name and width from the model, do not write them in"
            ) from None
        path = answer_path(made, "the path (str or Path) of the .ort file your function wrote")
        if not path.resolve().is_relative_to(output_dir.resolve()):
            raise Incorrect(f"the {name} payload {path} is not inside output_dir: write the files where you are told")
        if not is_ort_format(path):
            raise Incorrect(
                f"the {name} payload {path.name} is not an ORT-format model: convert the batch-1 .onnx with convert_onnx_models_to_ort"
            )
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = session.get_inputs()[0]
        if feed.shape != [1, rows.shape[1]]:
            raise Incorrect(
                f"the {name} payload's input {feed.name!r} has shape {feed.shape}; fix its batch dimension to 1 "
                f"([1, {rows.shape[1]}]) before converting, with the input name and width read from the model"
            )
        if not path.name.endswith(RUNTIME_STYLE_SUFFIX):
            raise Incorrect(
                f"the {name} payload {path.name} is not a Runtime-style file: an NNAPI app ships the Runtime style "
                f"(--optimization_style Runtime, written as *{RUNTIME_STYLE_SUFFIX}), whose ONNX operators NNAPI can claim, "
                "as section 4's table says (for these small models both styles happen to write the same operators)"
            )
        reference = onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])
        for row in rows:
            want = reference.run(None, {reference.get_inputs()[0].name: row[None]})
            got = session.run(None, {feed.name: row[None]})
            if not np.array_equal(got[0], want[0]) or not np.allclose(got[1], want[1], rtol=1e-5, atol=1e-6):
                raise Incorrect(f"the {name} payload answers {got[0].tolist()} for a row where the .onnx model answers {want[0].tolist()}")
    return "both payloads are .ort files with a batch of 1 that answer like their .onnx models, row by row"


q1 = Exercise(
    1,
    "providers for an Android app",
    _check_android_providers,
    hint=(
        "A list of names from onnxruntime.get_all_providers(), most preferred first. ONNX Runtime offers the "
        "nodes to the providers in that order. Which provider did the checker approve for this payload, "
        "which providers does onnxruntime-android have, and what must come last?"
    ),
    solution_code="""
        answer = ["NnapiExecutionProvider", "XnnpackExecutionProvider", "CPUExecutionProvider"]
    """,
)

q2 = Exercise(
    2,
    "convert to the .ort format",
    _check_ort_file,
    hint=(
        "labsupport.topics.mobile.convert_to_ort(ensure_digits_cnn(), artifact('exercise09'), 'Fixed') runs "
        "`python -m onnxruntime.tools.convert_onnx_models_to_ort`; its .ort_path is the answer."
    ),
    solution_code="""
        from labsupport.course.paths import artifact
        from labsupport.models.digits_cnn import ensure_digits_cnn
        from labsupport.topics.mobile import convert_to_ort

        answer = convert_to_ort(ensure_digits_cnn(), artifact("exercise09"), optimization_style="Fixed").ort_path
    """,
)

q3 = Exercise(
    3,
    "read the operator configuration",
    _check_config_reader,
    hint=(
        "Each line that is not a comment reads domain;opset;Op1,Op2,... A domain can appear on several "
        "lines (one per opset). Collect into a dict of sets with setdefault(domain, set()).update(...)."
    ),
    solution_code="""
        from pathlib import Path

        def answer(path):
            operators = {}
            for line in Path(path).read_text().splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                domain, _opset, ops = line.split(";")
                operators.setdefault(domain, set()).update(op.strip() for op in ops.split(","))
            return operators
    """,
)

q4 = Exercise(
    4,
    "a phone payload for a model the notebook has not shown",
    _check_mobile_payload,
    hint=(
        "Read the input's name and width from onnx.load(onnx_path).graph.input[0]; run "
        "`python -m onnxruntime.tools.make_dynamic_shape_fixed --input_name NAME --input_shape 1,WIDTH IN.onnx OUT.onnx`, "
        "then the converter on OUT.onnx with --output_dir output_dir in the style section 4 gives an NNAPI app; return the .ort path it wrote."
    ),
    solution_code="""
        import subprocess
        import sys
        from pathlib import Path

        import onnx


        def answer(onnx_path, output_dir):
            feed = onnx.load(onnx_path).graph.input[0]
            width = feed.type.tensor_type.shape.dim[1].dim_value
            batch1 = Path(output_dir) / (Path(onnx_path).stem + "_batch1.onnx")
            fix = ["-m", "onnxruntime.tools.make_dynamic_shape_fixed", "--input_name", feed.name, "--input_shape", f"1,{width}"]
            subprocess.run([sys.executable, *fix, str(onnx_path), str(batch1)], check=True, capture_output=True)
            convert = ["-m", "onnxruntime.tools.convert_onnx_models_to_ort", str(batch1), "--output_dir", str(output_dir)]
            subprocess.run([sys.executable, *convert, "--optimization_style", "Runtime"], check=True, capture_output=True)
            return batch1.with_name(batch1.stem + ".with_runtime_opt.ort")
    """,
)

EXERCISES = [q1, q2, q3, q4]
