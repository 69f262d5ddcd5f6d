"""labsupport.bench.runtime: the candidates agree numerically, the sweep and the command line produce their tables."""

import json

import numpy as np
import pytest
import torch

from labsupport.bench import runtime as runtime_bench
from labsupport.bench.__main__ import main as bench_main
from labsupport.course.data import load_digits
from labsupport.onnxutil import timing
from labsupport.onnxutil.sessions import ALLOW_SPINNING


def test_batch_of_digits_uses_real_test_images_and_repeats_past_the_split():
    test = load_digits().test.images
    small = runtime_bench.batch_of_digits(3)
    assert small.shape == (3, 1, 8, 8) and small.dtype == np.float32
    np.testing.assert_array_equal(small, test[:3])
    big = runtime_bench.batch_of_digits(len(test) + 5)
    assert big.shape[0] == len(test) + 5 and big.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(big[len(test) :], test[:5])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            runtime_bench.batch_of_digits(bad)


def test_ort_and_pytorch_candidates_compute_the_same_logits():
    fns = runtime_bench.candidates(4)
    assert list(fns) == [runtime_bench.ORT, runtime_bench.PYTORCH]
    (ort_logits,) = fns[runtime_bench.ORT]()
    torch_logits = fns[runtime_bench.PYTORCH]().numpy()
    assert ort_logits.shape == (4, 10)
    np.testing.assert_allclose(ort_logits, torch_logits, atol=1e-4, rtol=1e-3)


def test_candidates_reject_unknown_frameworks():
    with pytest.raises(ValueError, match="frameworks must be chosen"):
        runtime_bench.candidates(1, ["onnxruntime", "jax"])
    with pytest.raises(ValueError, match="frameworks must be chosen"):
        runtime_bench.candidates(1, [])


def test_sweep_times_every_framework_at_every_batch_size():
    before = torch.get_num_threads()
    table = runtime_bench.sweep((1, 8), warmup=0, repeat=2)
    assert torch.get_num_threads() == before, "the thread budget must be restored"
    assert table.baseline == runtime_bench.PYTORCH and table.clock == "cpu"  # one thread each: compared on CPU time
    twin = "pytorch" + runtime_bench.AGAIN
    assert sorted((t.name, t.batch_size) for t in table.timings) == [
        ("onnxruntime", 1),
        ("onnxruntime", 8),
        ("pytorch", 1),
        ("pytorch", 8),
        (twin, 1),
        (twin, 8),
    ]
    assert table.ratio(runtime_bench.PYTORCH, 8) == pytest.approx(1.0)
    assert all(t.runs == 2 for t in table.timings) and table.load is not None
    assert runtime_bench.sweep_noise(table) == max(0.1, *(abs(table.ratio(twin, b, statistic="min") - 1) for b in (1, 8)))
    assert runtime_bench.sweep((1,), [runtime_bench.ORT], threads=None, warmup=0, repeat=1).clock == "wall"
    with pytest.raises(ValueError, match="batch_sizes"):
        runtime_bench.sweep(())


def test_thread_budget_sets_and_restores_torch_threads():
    before = torch.get_num_threads()
    with runtime_bench.thread_budget(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with runtime_bench.thread_budget(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"), runtime_bench.thread_budget(0):
        pass


def _recording_sessions(monkeypatch) -> list:
    made = []
    original = runtime_bench.open_session
    monkeypatch.setattr(runtime_bench, "open_session", lambda *args, **kwargs: made.append(original(*args, **kwargs)) or made[-1])
    return made


def test_the_sweeps_ort_session_does_not_spin(monkeypatch):
    made = _recording_sessions(monkeypatch)
    runtime_bench.sweep((1,), [runtime_bench.ORT], threads=1, warmup=0, repeat=1)
    assert [(s.get_session_options().intra_op_num_threads, _entry(s, ALLOW_SPINNING)) for s in made] == [(1, "0")]


def test_thread_table_compares_with_orts_true_default(monkeypatch):
    made = _recording_sessions(monkeypatch)
    runtime_bench.thread_table((1,), warmup=0, repeat=1)
    settings = sorted((s.get_session_options().intra_op_num_threads, _entry(s, ALLOW_SPINNING)) for s in made)
    assert settings == [(0, "0"), (0, "unset"), (1, "0")]  # unset = ORT's default, spinning on (1 thread: no pool to spin)


def _entry(session, key):
    try:
        return session.get_session_options().get_session_config_entry(key)
    except Exception:  # ORT raises for an entry that was never set
        return "unset"


def test_thread_table_and_summary_ratios():
    threads = runtime_bench.thread_table((1,), warmup=0, repeat=2)
    assert threads.baseline == runtime_bench.ORT_DEFAULT_THREADS and threads.clock == "wall"  # threads: a latency question
    assert {t.name for t in threads.timings} == {
        runtime_bench.ORT_ONE_THREAD,
        runtime_bench.ORT_DEFAULT_THREADS,
        runtime_bench.ORT_NO_SPINNING,
    }
    frameworks = timing.BenchTable(
        [
            timing.Timing.from_samples("pytorch", 1, [0.009], [0.004]),
            timing.Timing.from_samples("pytorch" + runtime_bench.AGAIN, 1, [0.004], [0.004]),
            timing.Timing.from_samples("onnxruntime", 1, [0.001], [0.001]),
        ],
        "pytorch",
    )
    ratios = runtime_bench.summary(frameworks, threads)
    assert ratios["onnxruntime/pytorch CPU time @ batch 1"] == pytest.approx(0.25)  # from CPU time, not the 0.009 s wall
    assert not any(runtime_bench.AGAIN in label for label in ratios)
    assert ratios["ort 1 thread/default latency @ batch 1"] == pytest.approx(threads.ratio(runtime_bench.ORT_ONE_THREAD, 1))
    assert ratios["ort no spinning/default latency @ batch 1"] == pytest.approx(threads.ratio(runtime_bench.ORT_NO_SPINNING, 1))


def test_command_line_prints_ratios_and_writes_json(tmp_path, monkeypatch, capsys):
    import labsupport.course.paths

    monkeypatch.setattr(labsupport.course.paths, "artifact", lambda name: tmp_path / name)
    status = bench_main(["runtime", "--repeat", "2", "--batch", "1", "4", "--output", "timing.json", "--no-providers"])
    out = capsys.readouterr().out
    assert status == 0
    assert "=== benchmark suite: runtime" in out and "1 thread(s) each" in out
    assert "onnxruntime/pytorch CPU time @ batch 1" in out and "ort 1 thread/default latency @ batch 4" in out
    assert "(cpu clock; A/A noise ±" in out and "(wall clock; other programs used" in out
    payload = json.loads((tmp_path / "timing.json").read_text())
    assert payload["baseline"] == "pytorch" and payload["repeat"] == 2 and payload["framework_threads"] == 1
    assert set(payload["ratios"]) == {
        "onnxruntime/pytorch CPU time @ batch 1",
        "onnxruntime/pytorch CPU time @ batch 4",
        "ort 1 thread/default latency @ batch 1",
        "ort 1 thread/default latency @ batch 4",
        "ort no spinning/default latency @ batch 1",
        "ort no spinning/default latency @ batch 4",
    }
    medians = {(t["name"], t["batch_size"]): t["cpu_min_ms"] for t in payload["timings"]}  # the sweep compares the cheapest calls
    for batch in (1, 4):
        ratio = medians["onnxruntime", batch] / medians["pytorch", batch]
        assert payload["ratios"][f"onnxruntime/pytorch CPU time @ batch {batch}"] == pytest.approx(ratio)
    assert len(payload["threads"]) == 6 and len(payload["timings"]) == 6 and payload["clock"] == "cpu"


def test_command_line_rejects_bad_arguments():
    for argv in (["--repeat", "0"], ["--batch", "0"], ["--threads", "-1"], ["--bogus"]):
        with pytest.raises(SystemExit) as exit_info:
            runtime_bench.main(argv)
        assert exit_info.value.code == 2


@pytest.mark.slow
def test_tensorflow_candidate_returns_logits():
    if not runtime_bench.tensorflow_available():
        pytest.skip("TensorFlow or labsupport.models.digits_keras is not available")
    from labsupport.models import digits_keras

    fns = runtime_bench.candidates(3, [runtime_bench.TENSORFLOW])
    got = np.asarray(fns[runtime_bench.TENSORFLOW]())
    expected = digits_keras.predict_logits(runtime_bench._keras_model(), runtime_bench.batch_of_digits(3))
    assert got.shape == (3, 10)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-4)  # same model, NCHW -> NHWC done right


@pytest.mark.slow
def test_provider_table_times_every_model_with_an_aa_row_and_says_why_openvino_is_missing():
    from labsupport.onnxutil import plugins

    rows, note = runtime_bench.provider_table((1,), repeat=2)
    models = {"CNN FP32", "CNN INT8", "wide MLP FP32", "wide MLP INT8"}
    assert {row["model"] for row in rows} == models
    candidates = {row["candidate"] for row in rows}
    assert {runtime_bench.CPU_EP, runtime_bench.CPU_EP_AGAIN} <= candidates
    assert all(row["same predictions"] for row in rows if row["candidate"] == runtime_bench.CPU_EP_AGAIN)
    assert all(row["vs CPU EP"] == 1.0 for row in rows if row["candidate"] == runtime_bench.CPU_EP)
    assert all(isinstance(row["busy"], bool) for row in rows)  # wall-clock ratios of default-thread sessions carry the load guard
    usable = plugins.register_openvino().usable
    assert (runtime_bench.OPENVINO_EP in candidates) == usable and (note == "") == usable
    if not usable:
        assert note.startswith("OpenVINO EP not compared: ")
