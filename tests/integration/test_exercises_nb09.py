"""Notebook 09's exercises: each reference solution passes, typical wrong answers fail, ____ is not attempted."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from labsupport.exercises import CORRECT, INCORRECT
from labsupport.exercises.nb09 import EXERCISES, q1, q2, q3, q4
from labsupport.models.contract import IR_VERSION
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import mobile


def test_four_exercises_numbered_in_order():
    assert [q.number for q in EXERCISES] == [1, 2, 3, 4]


NNAPI, XNNPACK, CPU = "NnapiExecutionProvider", "XnnpackExecutionProvider", "CPUExecutionProvider"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ([CPU, NNAPI], "end the list with CPUExecutionProvider"),
        (["CoreMLExecutionProvider", CPU], "only on Apple devices"),
        (["CUDAExecutionProvider", CPU], "no CUDA"),
        ([CPU], "NNAPI takes all 23 nodes"),
        (["NNAPI", "CPU"], "not an ONNX Runtime provider name"),
        ("NnapiExecutionProvider,CPUExecutionProvider", "expected a list"),
        ([NNAPI, "OpenVINOExecutionProvider", CPU], "not in the onnxruntime-android package"),
        # the review's wrong answers: XNNPACK first takes the nodes before NNAPI is asked
        ([XNNPACK, NNAPI, CPU], "before NNAPI would claim every node"),
        # no NNAPI on a phone that has it, for a payload the checker approved for NNAPI
        ([XNNPACK, CPU], "NNAPI takes all 23 nodes"),
        # QNN is not in onnxruntime-android (a separate AAR)
        (["QNNExecutionProvider", CPU], "onnxruntime-android-qnn"),
        ([NNAPI, "QNNExecutionProvider", CPU], "onnxruntime-android-qnn"),
        # the ARM Compute Library runs on Arm, but not from this package: say so, not "not Android"
        ([NNAPI, "ACLExecutionProvider", CPU], "not in the onnxruntime-android package"),
        ([NNAPI, NNAPI, CPU], "appear once"),
    ],
)
def test_q1_rejects_wrong_provider_lists(answer, reason):
    outcome = q1.evaluate(answer)
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        # invented wrong answers: a list where ONNX Runtime wants a (name, options) tuple, options that are not a dict,
        # and one provider twice with different options (ORT keeps the first and ignores the second)
        ([[NNAPI, {"flags": "NNAPI_FLAG_USE_FP16"}], CPU], "(name, options dict) tuple"),
        ([(NNAPI, "NNAPI_FLAG_USE_FP16"), CPU], "(name, options dict) tuple"),
        ([(NNAPI, {}), (NNAPI, {"flags": "NNAPI_FLAG_USE_FP16"}), CPU], "appear once"),
        ([(NNAPI,), CPU], "(name, options dict) tuple"),
    ],
)
def test_q1_rejects_malformed_provider_entries(answer, reason):
    outcome = q1.evaluate(answer)
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


@pytest.mark.parametrize(
    "answer",
    [
        [NNAPI, XNNPACK, CPU],
        [NNAPI, CPU],
        (NNAPI, XNNPACK, CPU),
        # the review's right answers that crashed the checker: (name, options) tuples, as providers= takes them
        [(NNAPI, {"flags": "NNAPI_FLAG_USE_FP16"}), CPU],
        [NNAPI, (XNNPACK, {"intra_op_num_threads": "2"}), CPU],
    ],
)
def test_q1_accepts_nnapi_first_and_cpu_last(answer):
    outcome = q1.evaluate(answer)
    assert outcome.status == CORRECT, outcome.message


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        # the review's wrong answers: NNAPI's CPU reference implementation instead of the accelerator, a CoreML key
        # given to NNAPI, options on the CPU entry, and a flag NNAPI does not have
        ([(NNAPI, {"flags": "NNAPI_FLAG_CPU_ONLY"}), CPU], "NNAPI_FLAG_CPU_ONLY"),
        ([(NNAPI, {"ModelFormat": "MLProgram"}), CPU], "an option of CoreML, not of NnapiExecutionProvider"),
        ([NNAPI, (CPU, {"intra_op_num_threads": "2"})], "takes no options in providers="),
        ([(NNAPI, {"flags": "NNAPI_FLAG_USE_GPU"}), CPU], "not NNAPI flags"),
    ],
)
def test_q1_rejects_options_of_the_wrong_provider_or_against_the_task(answer, reason):
    outcome = q1.evaluate(answer)
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message
    if answer[0][0] == NNAPI:
        assert "addNnapi(EnumSet.of(NNAPIFlags" in outcome.message


def test_q1_says_where_the_app_sets_nnapi_flags():
    outcome = q1.evaluate([(NNAPI, {"flags": "NNAPI_FLAG_USE_FP16"}), CPU])
    assert outcome.status == CORRECT and "providers= ignores NNAPI options" in outcome.message, outcome.message


def test_q1_accepted_tuples_are_what_an_inference_session_takes():
    import onnxruntime as ort

    session = ort.InferenceSession(str(ensure_digits_cnn()), providers=[(NNAPI, {"flags": "NNAPI_FLAG_USE_FP16"}), (CPU, {})])
    assert session.get_providers() == [CPU]  # this PyPI build has no NNAPI: it warns and falls back


def test_q2_rejects_onnx_files_missing_files_and_other_models(tmp_path):
    model = ensure_digits_cnn()
    outcome = q2.evaluate(model)
    assert outcome.status == INCORRECT and "not an ORT-format model" in outcome.message
    renamed = tmp_path / "digits_cnn.ort"
    shutil.copy(model, renamed)  # an .onnx file renamed to .ort is still protobuf
    assert q2.evaluate(renamed).status == INCORRECT
    outcome = q2.evaluate(tmp_path / "nothing.ort")
    assert outcome.status == INCORRECT and "does not exist" in outcome.message
    assert q2.evaluate(42).status == INCORRECT


def _batch1(source: Path, folder: Path) -> Path:
    """``source`` with its batch fixed to 1, as notebook 09 does with onnxruntime.tools.make_dynamic_shape_fixed."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_dim_param_fixed

    model = onnx.load(source)
    make_dim_param_fixed(model.graph, "batch", 1)
    fix_output_shapes(model)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{source.stem}_batch1.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("style", ["Runtime", "Fixed"])
def test_q2_accepts_the_batch1_ort_files_the_notebook_builds(tmp_path, style):
    # the review's right answer that crashed the checker: 64 images in one run of a batch-1 model
    converted = mobile.convert_to_ort(_batch1(ensure_digits_cnn(), tmp_path / "batch1"), tmp_path / style, optimization_style=style)
    outcome = q2.evaluate(converted.ort_path)
    assert outcome.status == CORRECT, outcome.message


def _fixed_batch(source: Path, folder: Path, size: int) -> Path:
    """``source`` with its batch fixed to ``size``, as ``_batch1`` does for 1."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_dim_param_fixed

    model = onnx.load(source)
    make_dim_param_fixed(model.graph, "batch", size)
    fix_output_shapes(model)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{source.stem}_batch{size}.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("size", [100, 7])
def test_q2_accepts_the_cnn_with_any_fixed_batch(tmp_path, size):
    # the review's right answer that was refused: batch 100, more than the 64 test images the checker runs
    converted = mobile.convert_to_ort(_fixed_batch(ensure_digits_cnn(), tmp_path / "fixed", size), tmp_path / "out")
    outcome = q2.evaluate(converted.ort_path)
    assert outcome.status == CORRECT, outcome.message


def test_q2_accepts_an_upper_case_suffix(tmp_path):
    # the review's right answer refused as "not an ORT-format model": the same file named .ORT
    converted = mobile.convert_to_ort(ensure_digits_cnn(), tmp_path / "out")
    upper = converted.ort_path.with_suffix(".ORT")
    converted.ort_path.rename(upper)
    outcome = q2.evaluate(upper)
    assert outcome.status == CORRECT, outcome.message


def test_q2_accepts_the_reference_solution():
    outcome = q2.evaluate(q2.reference_answer())
    assert outcome.status == CORRECT, outcome.message


def test_q2_rejects_the_int8_model_converted(tmp_path):
    # invented: the quantized CNN of notebook 06 agrees on every class but is not the model the task names
    from labsupport.topics.quantization import ensure_digits_cnn_int8

    converted = mobile.convert_to_ort(ensure_digits_cnn_int8(), tmp_path / "int8")
    outcome = q2.evaluate(converted.ort_path)
    assert outcome.status == INCORRECT and "another model" in outcome.message, outcome.message


def test_q2_rejects_the_cnn_with_a_softmax_added(tmp_path):
    # invented: probabilities instead of logits, same argmax on every image
    import onnx
    from onnx import helper

    model = onnx.load(ensure_digits_cnn())
    output = model.graph.output[0]
    for node in model.graph.node:
        node.output[:] = ["raw_logits" if name == output.name else name for name in node.output]
    model.graph.node.append(helper.make_node("Softmax", ["raw_logits"], [output.name], axis=1))
    source = tmp_path / "digits_cnn_softmax.onnx"
    onnx.save(model, source)
    converted = mobile.convert_to_ort(source, tmp_path / "softmax")
    outcome = q2.evaluate(converted.ort_path)
    assert outcome.status == INCORRECT and "another model" in outcome.message, outcome.message


def test_q2_rejects_a_truncated_ort_file(tmp_path):
    # invented: a copy cut short (an interrupted download); the header still says ORTM
    converted = mobile.convert_to_ort(ensure_digits_cnn(), tmp_path / "whole")
    cut = tmp_path / "cut.ort"
    cut.write_bytes(converted.ort_path.read_bytes()[:4096])
    outcome = q2.evaluate(cut)
    assert outcome.status == INCORRECT and "cannot load" in outcome.message, outcome.message


def test_q2_rejects_a_different_model(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    # same interface, but it always answers class 0: an .ort file of the wrong model
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["image"], ["flat"]),
            helper.make_node("MatMul", ["flat", "w"], ["logits"]),
        ],
        "constant",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [helper.make_tensor("w", TensorProto.FLOAT, [64, 10], [1.0 if j == 0 else 0.0 for _ in range(64) for j in range(10)])],
    )
    wrong = tmp_path / "wrong.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION), wrong)
    converted = mobile.convert_to_ort(wrong, tmp_path / "out")
    outcome = q2.evaluate(converted.ort_path)
    assert outcome.status == INCORRECT and "agrees with the course CNN on only" in outcome.message


def _reader_without_comment_skipping(path):
    result = {}
    for line in Path(path).read_text().splitlines():
        domain, _, ops = [*line.split(";"), "", ""][:3]
        result.setdefault(domain, set()).update(ops.split(","))
    return result


def _reader_overwriting_domains(path):
    result = {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("#"):
            continue
        domain, _, ops = line.split(";")
        result[domain] = set(ops.split(","))
    return result


def _reader_without_splitting_ops(path):
    result = {}
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            domain, _, ops = line.split(";")
            result.setdefault(domain, set()).add(ops)
    return result


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (_reader_without_comment_skipping, "comments"),
        (_reader_overwriting_domains, "missing"),
        (_reader_without_splitting_ops, "comma-separated"),
        (lambda path: Path(path).read_text(), "must return a dict"),
        ("ai.onnx;13;Gemm", "expected a function"),
    ],
)
def test_q3_rejects_wrong_readers(answer, reason):
    outcome = q3.evaluate(answer)
    assert outcome.status == INCORRECT and reason in outcome.message


def test_q3_solution_reads_the_real_config(tmp_path):
    source = tmp_path / "digits_cnn.onnx"
    shutil.copy(ensure_digits_cnn(), source)
    converted = mobile.convert_to_ort(source, tmp_path / "out")
    operators = q3.reference_answer()(converted.config_path)
    assert {"Gemm", "MaxPool"} <= operators["ai.onnx"]


def _payload_maker(*, fix_batch=True, input_name=None, width=None, convert=True, style="Runtime"):
    """A make_payload like the reference, with one mistake a learner makes switched on; it calls the functions behind
    the two command-line tools in this process (the reference runs the commands: test_all_exercises.py)."""
    import contextlib
    import io

    import onnx
    from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_input_shape_fixed

    def make_payload(onnx_path, output_dir):
        model = onnx.load(onnx_path)
        feed = model.graph.input[0]
        name, features = input_name or feed.name, width or feed.type.tensor_type.shape.dim[1].dim_value
        source = Path(onnx_path)
        if fix_batch:
            source = Path(output_dir) / (Path(onnx_path).stem + "_batch1.onnx")
            make_input_shape_fixed(model.graph, name, [1, features])
            fix_output_shapes(model)
            onnx.save(model, source)
        if not convert:
            return source
        with contextlib.redirect_stdout(io.StringIO()):
            convert_onnx_models_to_ort(source, output_dir=Path(output_dir), optimization_styles=[OptimizationStyle[style]])
        return Path(output_dir) / (source.stem + (".with_runtime_opt.ort" if style == "Runtime" else ".ort"))

    return make_payload


@pytest.mark.parametrize(
    ("mistake", "reason"),
    [
        ({"fix_batch": False}, "has shape \\['?None'?, 4\\]|has shape \\[None, 4\\]|fix its batch dimension to 1"),
        ({"convert": False}, "not an ORT-format model"),
        ({"input_name": "X"}, "make_payload raised \\w+ on the wine model \\(input 'features', 13 features\\)"),
        ({"width": 4}, "make_payload raised \\w+ on the wine model \\(input 'features', 13 features\\)"),
        ({"style": "Fixed"}, "not a Runtime-style file: an NNAPI app ships the Runtime style"),
    ],
)
def test_q4_names_each_mistake(mistake, reason):
    outcome = q4.evaluate(_payload_maker(**mistake))
    assert outcome.status == INCORRECT, mistake
    assert re.search(reason, outcome.message), (mistake, outcome.message)


def test_q4_accepts_a_payload_made_like_the_reference():
    assert q4.evaluate(_payload_maker()).status == CORRECT
