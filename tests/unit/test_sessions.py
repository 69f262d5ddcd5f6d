"""labsupport.onnxutil.sessions: provider priority lists, the providers a session really got, session options."""

import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from labsupport.course.compare import ParityError
from labsupport.models.conv_bn_relu import conv_bn_relu_model
from labsupport.onnxutil import sessions

CNN = conv_bn_relu_model(blocks=1, channels=4, size=8)  # a small hand-built image model: no training, no artifact


def _unavailable() -> str:
    missing = [name for name in ort.get_all_providers() if name not in ort.get_available_providers()]
    if not missing:
        pytest.skip("every provider of this onnxruntime build is available here")
    return sessions.CUDA if sessions.CUDA in missing else missing[0]


@pytest.fixture(scope="module")
def relu_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_cpu_session_runs_and_reports_no_fallback():
    session, choice = sessions.open_with_choice(CNN, [sessions.CPU])
    assert choice.requested == (sessions.CPU,) and choice.primary == sessions.CPU
    assert not choice.fell_back and choice.unavailable == ()
    assert "FELL BACK" not in str(choice)
    (logits,) = session.run(None, {"x": np.zeros((3, 3, 8, 8), np.float32)})
    assert logits.shape == (3, 10)


def test_unavailable_first_choice_is_reported_as_fallback_with_orts_warning():
    missing = _unavailable()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # open_with_choice must not let ORT's warning escape
        _, choice = sessions.open_with_choice(CNN, [missing, sessions.CPU])
    assert choice.fell_back and choice.unavailable == (missing,)
    assert choice.used[0] == sessions.CPU and missing not in choice.used
    assert any(missing in text for text in choice.warnings)
    assert f"FELL BACK : asked for {missing} first, runs on {sessions.CPU}" in str(choice)


def test_open_with_choice_accepts_bytes_protos_and_provider_options(relu_model):
    for source in (relu_model, relu_model.SerializeToString()):
        session, choice = sessions.open_with_choice(source, [(sessions.CPU, {})])
        assert choice.requested == (sessions.CPU,)
        out = session.run(["y"], {"x": np.array([[-1, 0, 2]], np.float32)})[0]
        np.testing.assert_array_equal(out, [[0, 0, 2]])


@pytest.mark.parametrize(
    ("providers", "error"),
    [([], ValueError), (sessions.CPU, ValueError), ([("CPUExecutionProvider",)], TypeError), ([42], TypeError)],
)
def test_open_with_choice_rejects_bad_provider_lists(relu_model, providers, error):
    with pytest.raises(error, match="provider"):
        sessions.open_with_choice(relu_model, providers)


def test_open_with_choice_rejects_missing_files_and_other_objects(tmp_path):
    with pytest.raises(FileNotFoundError, match="no ONNX model"):
        sessions.open_with_choice(tmp_path / "missing.onnx")
    with pytest.raises(TypeError, match="expected a path"):
        sessions.open_with_choice(12345)


def test_assert_providers_passes_and_catches_a_silent_fallback():
    missing = _unavailable()
    session, _ = sessions.open_with_choice(CNN, [missing, sessions.CPU])
    assert sessions.assert_providers(session, sessions.CPU)[0] == sessions.CPU
    with pytest.raises(sessions.ProviderMismatch, match=f"expected the session to run on {missing}.*but it uses CPUExecutionProvider"):
        sessions.assert_providers(session, [missing, sessions.CPU])
    with pytest.raises(sessions.ProviderMismatch, match=f"not offered here .*: {missing}$"):
        sessions.assert_providers(session, [missing, sessions.CPU])
    assert issubclass(sessions.ProviderMismatch, AssertionError)


def test_assert_providers_requires_the_first_provider_to_be_primary(monkeypatch):
    session, _ = sessions.open_with_choice(CNN)
    monkeypatch.setattr(session, "get_providers", lambda: ["AzureExecutionProvider", sessions.CPU])
    with pytest.raises(sessions.ProviderMismatch, match="first: CPUExecutionProvider"):
        sessions.assert_providers(session, sessions.CPU)


def test_assert_providers_rejects_bad_arguments():
    session, _ = sessions.open_with_choice(CNN)
    with pytest.raises(TypeError, match="InferenceSession"):
        sessions.assert_providers("not a session", sessions.CPU)
    with pytest.raises(ValueError, match="provider name"):
        sessions.assert_providers(session, [])


def test_session_options_sets_the_named_knobs():
    options = sessions.session_options(
        threads=1,
        inter_op_threads=2,
        execution_mode="parallel",
        optimization="basic",
        mem_pattern=False,
        cpu_arena=False,
        disable_cpu_fallback=True,
    )
    assert options.intra_op_num_threads == 1 and options.inter_op_num_threads == 2
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert not options.enable_mem_pattern and not options.enable_cpu_mem_arena
    assert options.get_session_config_entry(sessions.DISABLE_CPU_FALLBACK) == "1"


def test_session_options_config_spinning_and_saving_the_optimized_model(tmp_path):
    options = sessions.session_options(spinning=False, config={"session.x64quantprecision": "1"})
    assert options.get_session_config_entry(sessions.ALLOW_SPINNING) == "0"
    assert options.get_session_config_entry("session.x64quantprecision") == "1"
    assert options.log_severity_level == 3 and options.intra_op_num_threads == 0
    saving = sessions.session_options(optimized_path=tmp_path / "model.ort", ort_format=True)
    assert saving.optimized_model_filepath == str(tmp_path / "model.ort")
    assert saving.get_session_config_entry("session.save_model_format") == "ORT"


def test_optimization_levels_are_orts_in_the_order_it_applies_them():
    assert list(sessions.OPTIMIZATION_LEVELS) == ["disable", "basic", "extended", "layout", "all"]
    levels = [int(sessions.session_options(optimization=name).graph_optimization_level) for name in sessions.OPTIMIZATION_LEVELS]
    assert levels == sorted(levels) and len(set(levels)) == 5


def test_open_session_takes_knobs_by_name_and_runs(relu_model):
    session = sessions.open_session(relu_model, threads=1, optimization="disable")
    options = session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert session.get_providers() == [sessions.CPU]
    np.testing.assert_array_equal(session.run(None, {"x": np.array([[-3, 1, 0]], np.float32)})[0], [[0, 1, 0]])
    prepared = sessions.open_session(relu_model.SerializeToString(), options=sessions.session_options(threads=2))
    assert prepared.get_session_options().intra_op_num_threads == 2


def test_open_session_rejects_options_together_with_knobs(relu_model):
    with pytest.raises(TypeError, match=r"either options or session knobs, not both \(got options and \['threads'\]\)"):
        sessions.open_session(relu_model, options=sessions.session_options(), threads=1)
    with pytest.raises(TypeError, match="threds"):
        sessions.open_session(relu_model, threds=1)


def test_model_source_gives_what_inference_session_takes(relu_model, tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model, path)
    assert sessions.model_source(path) == str(path)
    assert sessions.model_source(relu_model) == relu_model.SerializeToString()
    assert sessions.model_source(b"raw bytes") == b"raw bytes"
    with pytest.raises(FileNotFoundError, match=r"no ONNX model at .*missing.onnx \(expected a .onnx or .ort file"):
        sessions.model_source(tmp_path / "missing.onnx")
    with pytest.raises(TypeError, match="got list"):
        sessions.model_source([path])


def test_disabled_cpu_fallback_makes_an_unavailable_provider_fail_loudly():
    missing = _unavailable()
    options = sessions.session_options(disable_cpu_fallback=True, log_severity=4)
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        sessions.open_with_choice(CNN, [missing], options=options)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"threads": -1}, "threads"),
        ({"inter_op_threads": 1.5}, "inter_op_threads"),
        ({"execution_mode": "async"}, "execution_mode"),
        ({"optimization": "max"}, "optimization"),
        ({"log_severity": 9}, "log_severity"),
    ],
)
def test_session_options_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sessions.session_options(**kwargs)


def test_describe_io_shows_symbolic_dims_and_types():
    session, _ = sessions.open_with_choice(CNN)
    rows = sessions.describe_io(session)
    assert rows == [
        {"kind": "input", "name": "x", "shape": "(N, 3, 8, 8)", "type": "tensor(float)"},
        {"kind": "output", "name": "logits", "shape": "(N, 10)", "type": "tensor(float)"},
    ]
    with pytest.raises(TypeError, match="InferenceSession"):
        sessions.describe_io(object())


def test_provider_table_covers_the_course_providers():
    rows = {row["provider"]: row for row in sessions.provider_table()}
    for name in ("CPU", "CUDA", "Tensorrt", "CoreML", "Dml", "OpenVINO", "ROCM", "Nnapi", "Azure"):
        assert f"{name}ExecutionProvider" in rows
    assert rows[sessions.CPU]["available here"] is True
    assert rows[sessions.CUDA]["package"].startswith("onnxruntime-gpu")
    assert all(row["available here"] == (name in ort.get_available_providers()) for name, row in rows.items())


def test_gpu_providers_available_is_the_gpu_subset_of_available():
    gpus = sessions.gpu_providers_available()
    assert set(gpus) <= set(sessions.available_providers()) and set(gpus) <= set(sessions.GPU_PROVIDERS)
    assert sessions.CPU not in gpus


def test_run_concurrently_shares_one_session_and_keeps_the_request_order():
    session, _ = sessions.open_with_choice(CNN, options=sessions.session_options(threads=1))
    rng = np.random.default_rng(0)
    requests = [{"x": rng.standard_normal((size, 3, 8, 8)).astype(np.float32)} for size in (1, 5, 2, 7, 3, 4)]
    answers = sessions.run_concurrently(session, requests, threads=3)
    assert [answer[0].shape for answer in answers] == [(size, 10) for size in (1, 5, 2, 7, 3, 4)]
    for answer, feeds in zip(answers, requests, strict=True):
        np.testing.assert_array_equal(answer[0], session.run(None, feeds)[0])
    assert sessions.run_concurrently(session, requests[:2], threads=1, output_names=["logits"])[1][0].shape == (5, 10)


def test_run_concurrently_rejects_bad_arguments():
    session, _ = sessions.open_with_choice(CNN)
    for threads in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="threads"):
            sessions.run_concurrently(session, [], threads=threads)
    with pytest.raises(TypeError, match="InferenceSession"):
        sessions.run_concurrently("not a session", [], threads=2)


def test_check_saved_model_reloads_the_file_and_compares_each_output(relu_model, tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model, path)
    x = np.array([[-1, 0, 2], [3, -4, 5]], np.float32)
    check = sessions.check_saved_model(path, {"x": x}, {"y": np.maximum(x, 0)})
    assert [report.passed for report in check.reports] == [True] and check.size == path.stat().st_size
    assert [row["name"] for row in check.io] == ["x", "y"]
    lines = str(check).splitlines()
    assert lines[0].endswith(f"relu.onnx: {path.stat().st_size} B") and lines[1].split() == ["input", "x", "(N,", "3)", "tensor(float)"]
    assert lines[-1].startswith("y: 6 values within tolerance, argmax agreement 100.00% -> OK")
    with pytest.raises(ParityError, match="y: 6 values"):
        sessions.check_saved_model(path, {"x": x}, {"y": x})
    with pytest.raises(ValueError, match=r"some of the model's outputs \['y'\] to arrays; got \['z'\]"):
        sessions.check_saved_model(path, {"x": x}, {"z": x})


def test_assert_providers_names_a_provider_that_is_built_in_but_did_not_start(monkeypatch):
    session, _ = sessions.open_with_choice(CNN)
    monkeypatch.setattr(sessions, "available_providers", lambda: ["CUDAExecutionProvider", sessions.CPU])
    with pytest.raises(sessions.ProviderMismatch, match=r"listed by get_available_providers\(\) but not started .*CUDAExecutionProvider$"):
        sessions.assert_providers(session, ["CUDAExecutionProvider", sessions.CPU])


def _saved_model(tmp_path) -> str:
    path = tmp_path / "conv_bn_relu.onnx"
    onnx.save(conv_bn_relu_model(), path)
    return str(path)


def test_default_pool_threads_follows_ort_intra_op_num_threads(tmp_path):
    model = _saved_model(tmp_path)
    counts = [sessions.default_pool_threads(model, env={"ORT_INTRA_OP_NUM_THREADS": n}) for n in ("1", "3")]
    assert counts == [0, 2]  # the calling thread is the pool's first


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning needs os.sched_setaffinity (Linux)")
def test_default_pool_ignores_the_affinity_mask(tmp_path):
    model = _saved_model(tmp_path)
    assert sessions.default_pool_threads(model, cpus={min(os.sched_getaffinity(0))}) == sessions.default_pool_threads(model)


def test_pinning_without_sched_setaffinity_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    with pytest.raises(ValueError, match="sched_setaffinity"):
        sessions.default_pool_threads(_saved_model(tmp_path), cpus={0})
