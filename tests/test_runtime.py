"""labsupport.runtime: provider priority lists, the providers a session really got, session options."""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from labsupport import runtime
from labsupport.models import ensure_digits_cnn


def _unavailable() -> str:
    missing = [name for name in ort.get_all_providers() if name not in ort.get_available_providers()]
    if not missing:
        pytest.skip("every provider of this onnxruntime build is available here")
    return runtime.CUDA if runtime.CUDA in missing else missing[0]


@pytest.fixture(scope="module")
def relu_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_cpu_session_runs_and_reports_no_fallback():
    session, choice = runtime.make_session(ensure_digits_cnn(), [runtime.CPU])
    assert choice.requested == (runtime.CPU,) and choice.primary == runtime.CPU
    assert not choice.fell_back and choice.unavailable == ()
    assert "FELL BACK" not in str(choice)
    (logits,) = session.run(None, {"image": np.zeros((3, 1, 8, 8), np.float32)})
    assert logits.shape == (3, 10)


def test_unavailable_first_choice_is_reported_as_fallback_with_orts_warning():
    missing = _unavailable()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # make_session must not let ORT's warning escape
        _, choice = runtime.make_session(ensure_digits_cnn(), [missing, runtime.CPU])
    assert choice.fell_back and choice.unavailable == (missing,)
    assert choice.used[0] == runtime.CPU and missing not in choice.used
    assert any(missing in text for text in choice.warnings)
    assert f"FELL BACK : asked for {missing} first, runs on {runtime.CPU}" in str(choice)


def test_make_session_accepts_bytes_protos_and_provider_options(relu_model):
    for source in (relu_model, relu_model.SerializeToString()):
        session, choice = runtime.make_session(source, [(runtime.CPU, {})])
        assert choice.requested == (runtime.CPU,)
        out = session.run(["y"], {"x": np.array([[-1, 0, 2]], np.float32)})[0]
        np.testing.assert_array_equal(out, [[0, 0, 2]])


@pytest.mark.parametrize(
    ("providers", "error"),
    [([], ValueError), (runtime.CPU, ValueError), ([("CPUExecutionProvider",)], TypeError), ([42], TypeError)],
)
def test_make_session_rejects_bad_provider_lists(relu_model, providers, error):
    with pytest.raises(error, match="provider"):
        runtime.make_session(relu_model, providers)


def test_make_session_rejects_missing_files_and_other_objects(tmp_path):
    with pytest.raises(FileNotFoundError, match="no ONNX model"):
        runtime.make_session(tmp_path / "missing.onnx")
    with pytest.raises(TypeError, match="expected a path"):
        runtime.make_session(12345)


def test_assert_providers_passes_and_catches_a_silent_fallback():
    missing = _unavailable()
    session, _ = runtime.make_session(ensure_digits_cnn(), [missing, runtime.CPU])
    assert runtime.assert_providers(session, runtime.CPU)[0] == runtime.CPU
    with pytest.raises(runtime.ProviderMismatch, match=f"expected the session to run on {missing}.*but it uses CPUExecutionProvider"):
        runtime.assert_providers(session, [missing, runtime.CPU])
    with pytest.raises(runtime.ProviderMismatch, match=f"not available in this build/machine: {missing}$"):
        runtime.assert_providers(session, [missing, runtime.CPU])
    assert issubclass(runtime.ProviderMismatch, AssertionError)


def test_assert_providers_requires_the_first_provider_to_be_primary(monkeypatch):
    session, _ = runtime.make_session(ensure_digits_cnn())
    monkeypatch.setattr(session, "get_providers", lambda: ["AzureExecutionProvider", runtime.CPU])
    with pytest.raises(runtime.ProviderMismatch, match="first: CPUExecutionProvider"):
        runtime.assert_providers(session, runtime.CPU)


def test_assert_providers_rejects_bad_arguments():
    session, _ = runtime.make_session(ensure_digits_cnn())
    with pytest.raises(TypeError, match="InferenceSession"):
        runtime.assert_providers("not a session", runtime.CPU)
    with pytest.raises(ValueError, match="provider name"):
        runtime.assert_providers(session, [])


def test_session_options_sets_the_named_knobs():
    options = runtime.session_options(
        intra_op_threads=1, inter_op_threads=2, execution_mode="parallel", optimization="basic",
        mem_pattern=False, cpu_arena=False, disable_cpu_fallback=True,
    )
    assert options.intra_op_num_threads == 1 and options.inter_op_num_threads == 2
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert not options.enable_mem_pattern and not options.enable_cpu_mem_arena
    assert options.get_session_config_entry(runtime.DISABLE_CPU_FALLBACK) == "1"


def test_disabled_cpu_fallback_makes_an_unavailable_provider_fail_loudly():
    missing = _unavailable()
    options = runtime.session_options(disable_cpu_fallback=True, log_severity=4)
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        runtime.make_session(ensure_digits_cnn(), [missing], options=options)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"intra_op_threads": -1}, "intra_op_threads"),
        ({"inter_op_threads": 1.5}, "inter_op_threads"),
        ({"execution_mode": "async"}, "execution_mode"),
        ({"optimization": "max"}, "optimization"),
        ({"log_severity": 9}, "log_severity"),
    ],
)
def test_session_options_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        runtime.session_options(**kwargs)


def test_describe_io_shows_symbolic_dims_and_types():
    session, _ = runtime.make_session(ensure_digits_cnn())
    rows = runtime.describe_io(session)
    assert rows == [
        {"kind": "input", "name": "image", "shape": "(batch, 1, 8, 8)", "type": "tensor(float)"},
        {"kind": "output", "name": "logits", "shape": "(batch, 10)", "type": "tensor(float)"},
    ]
    with pytest.raises(TypeError, match="InferenceSession"):
        runtime.describe_io(object())


def test_provider_table_covers_the_course_providers():
    rows = {row["provider"]: row for row in runtime.provider_table()}
    for name in ("CPU", "CUDA", "Tensorrt", "CoreML", "Dml", "OpenVINO", "ROCM", "Nnapi", "Azure"):
        assert f"{name}ExecutionProvider" in rows
    assert rows[runtime.CPU]["available here"] is True
    assert rows[runtime.CUDA]["package"].startswith("onnxruntime-gpu")
    assert all(row["available here"] == (name in ort.get_available_providers()) for name, row in rows.items())


def test_gpu_providers_available_is_the_gpu_subset_of_available():
    gpus = runtime.gpu_providers_available()
    assert set(gpus) <= set(runtime.available_providers()) and set(gpus) <= set(runtime.GPU_PROVIDERS)
    assert runtime.CPU not in gpus


def test_run_concurrently_shares_one_session_and_keeps_the_request_order():
    session, _ = runtime.make_session(ensure_digits_cnn(), options=runtime.session_options(intra_op_threads=1))
    rng = np.random.default_rng(0)
    requests = [{"image": rng.standard_normal((size, 1, 8, 8)).astype(np.float32)} for size in (1, 5, 2, 7, 3, 4)]
    answers = runtime.run_concurrently(session, requests, threads=3)
    assert [answer[0].shape for answer in answers] == [(size, 10) for size in (1, 5, 2, 7, 3, 4)]
    for answer, feeds in zip(answers, requests, strict=True):
        np.testing.assert_array_equal(answer[0], session.run(None, feeds)[0])
    assert runtime.run_concurrently(session, requests[:2], threads=1, output_names=["logits"])[1][0].shape == (5, 10)


def test_run_concurrently_rejects_bad_arguments():
    session, _ = runtime.make_session(ensure_digits_cnn())
    for threads in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="threads"):
            runtime.run_concurrently(session, [], threads=threads)
    with pytest.raises(TypeError, match="InferenceSession"):
        runtime.run_concurrently("not a session", [], threads=2)
