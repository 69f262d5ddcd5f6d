"""The runtime benchmark of notebook 05: the digits CNN under ONNX Runtime, eager PyTorch and TensorFlow.

Introduced in notebook 05, which plots ``sweep()``; ``python -m labsupport.bench runtime`` (and
``make bench``) runs ``main()`` headless: it measures in one run ORT vs PyTorch latency at batch
1 and 64 and ORT with one intra-op thread vs ORT's default (one thread per physical core, idle
threads spinning) and vs the default thread count without spinning, prints the ratios and writes
``artifacts/bench_runtime.json``. Every candidate is a zero-argument callable that runs one batch.

With one thread per framework the frameworks are compared on CPU time, the cost of a call even on a busy machine
(``labsupport.onnxutil.timing``); the thread and provider comparisons are about latency with several threads, so they
use the wall clock, and say "machine busy" instead of a verdict when other programs used the CPUs meanwhile.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn, load_digits_cnn
from labsupport.onnxutil import timing
from labsupport.onnxutil.sessions import open_session

ORT, PYTORCH, TENSORFLOW = "onnxruntime", "pytorch", "tensorflow"
# ORT's default: SessionOptions() untouched (one intra-op thread per physical core, idle threads spinning)
ORT_ONE_THREAD, ORT_DEFAULT_THREADS = "onnxruntime, 1 thread", "onnxruntime, default"
ORT_NO_SPINNING = "onnxruntime, default threads, no spinning"
BATCH_SIZES = (1, 4, 16, 64, 256)
AGAIN = " (A/A: the same again)"  # suffix of a baseline's twin: its ratio to the baseline is the timing noise
NOISE_FLOOR = 0.10  # ratios within 1 +- 10% (or the A/A deviation, if larger) are no measurable difference
# the sweep compares the cheapest calls: eager PyTorch's CPU time per call scatters (it allocates and frees large
# tensors, so page faults and system time vary: 1.3-2.3 ms of an 8 ms call at batch 256), and the cheapest is the least
# disturbed; ORT's scatters far less
SWEEP_STATISTIC = "min"
ARTIFACT = "bench_runtime.json"


def batch_of_digits(batch_size: int) -> np.ndarray:
    """``batch_size`` real test digits, (N, 1, 8, 8) float32 (the test split repeated if N > 540)."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    images = load_digits().test.images
    reps = -(-batch_size // len(images))
    return np.ascontiguousarray(np.concatenate([images] * reps)[:batch_size])


def tensorflow_available() -> bool:
    """True when TensorFlow and the course's Keras digits model (``labsupport.models.digits_keras``) can be loaded."""
    return importlib.util.find_spec("tensorflow") is not None and importlib.util.find_spec("labsupport.models.digits_keras") is not None


@lru_cache(maxsize=1)
def _keras_model():
    # Latency does not depend on the weights' values, so the untrained twin of notebook 03's model
    # (same layers, same shapes) is timed: no training in a benchmark.
    from labsupport.models import digits_keras

    return digits_keras.build_digits_keras()


def candidates(
    batch_size: int,
    frameworks: Sequence[str] = (ORT, PYTORCH),
    *,
    session=None,
    torch_model=None,
) -> dict[str, Callable[[], object]]:
    """``{framework: fn}`` where ``fn()`` runs the digits CNN on one batch of ``batch_size`` digits.

    ``frameworks`` picks among "onnxruntime", "pytorch" (eager, ``inference_mode``) and "tensorflow"
    (the Keras twin of notebook 03 under ``tf.function``, channels-last input); a ready ``session`` or
    ``torch_model`` can be passed to avoid building them again for every batch size.
    """
    unknown = [name for name in frameworks if name not in (ORT, PYTORCH, TENSORFLOW)]
    if unknown or not frameworks:
        raise ValueError(f"frameworks must be chosen from {[ORT, PYTORCH, TENSORFLOW]}, got {list(frameworks)}")
    images = batch_of_digits(batch_size)
    fns: dict[str, Callable[[], object]] = {}
    if ORT in frameworks:
        ort_sess = session or open_session(ensure_digits_cnn(), spinning=False)
        input_name = ort_sess.get_inputs()[0].name
        fns[ORT] = lambda: ort_sess.run(None, {input_name: images})
    if PYTORCH in frameworks:
        model = torch_model or load_digits_cnn()
        tensor = torch.from_numpy(images)

        def run_torch():
            with torch.inference_mode():
                return model(tensor)

        fns[PYTORCH] = run_torch
    if TENSORFLOW in frameworks:
        if not tensorflow_available():
            raise RuntimeError("TensorFlow or labsupport.models.digits_keras is not available: leave 'tensorflow' out of frameworks")
        import tensorflow as tf

        from labsupport.models.digits_keras import to_nhwc

        keras_model = _keras_model()
        compiled = tf.function(lambda x: keras_model(x, training=False))  # graph mode, as TF serves models
        channels_last = tf.constant(to_nhwc(images))
        fns[TENSORFLOW] = lambda: compiled(channels_last)
    return fns


@contextmanager
def thread_budget(threads: int | None) -> Iterator[None]:
    """Give PyTorch (and TensorFlow, if it has not started yet) ``threads`` threads in the block; None: leave defaults."""
    if threads is None:
        yield
        return
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a whole number >= 1 or None (each framework's default), got {threads!r}")
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        try:  # only possible before TensorFlow has run anything in this process
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def sweep(
    batch_sizes: Sequence[int] = BATCH_SIZES,
    frameworks: Sequence[str] = (ORT, PYTORCH),
    *,
    threads: int | None = 1,
    warmup: int = 2,
    repeat: int = 10,
) -> timing.BenchTable:
    """Time per call of each framework at each batch size, measured interleaved with an A/A twin of the baseline
    (pytorch if present, whose deviation ``sweep_noise`` reads).

    ``threads`` gives every framework the same number of intra-op threads (default 1: a per-core
    comparison on CPU time, which other programs sharing the cores cannot inflate). ``None`` keeps each
    framework's own default, compared on the wall clock. With TensorFlow among them the candidates are timed one at
    a time (blocks with a pause between), not interleaved: TensorFlow's worker threads keep spinning for a moment
    after a call, and that CPU time would be counted to the candidate timed next.
    """
    if not batch_sizes:
        raise ValueError("batch_sizes must name at least one batch size")
    if TENSORFLOW in frameworks and tensorflow_available():
        importlib.import_module("labsupport.models.digits_keras")  # quiets, then imports TensorFlow: thread_budget can size its pools
    with thread_budget(threads):
        # spinning off: ORT's idle workers busy-waiting after each run would steal the cores from the framework timed next
        session = open_session(ensure_digits_cnn(), threads=threads or 0, spinning=False) if ORT in frameworks else None
        torch_model = load_digits_cnn() if PYTORCH in frameworks else None
        baseline = PYTORCH if PYTORCH in frameworks else frameworks[0]
        tables = []
        for size in batch_sizes:
            fns = candidates(size, frameworks, session=session, torch_model=torch_model)
            fns[baseline + AGAIN] = fns[baseline]
            clock = "cpu" if threads == 1 else "wall"
            blocks = 2 if TENSORFLOW in frameworks else 0
            tables.append(
                timing.compare_candidates(
                    fns, baseline=baseline, batch_size=size, warmup=warmup, repeat=repeat, blocks=blocks, settle_s=0.05, clock=clock
                )
            )
    return timing.merge(tables)


def framework_verdict(table: timing.BenchTable, name: str, batch_size: int, noise: float) -> str:
    """``name`` against the baseline of a ``sweep`` at ``batch_size`` in words (the cheapest calls, ``SWEEP_STATISTIC``),
    or why there is no verdict: an A/A twin more than 2x apart, a CPU time
    that fell as the batch grew (disturbed samples), or TensorFlow on a busy machine (its worker threads spin while
    they wait for work, and a busy machine makes them wait longer, which its CPU time counts)."""
    sizes = sorted({t.batch_size for t in table.timings})

    def grows_with_batch(candidate: str) -> bool:
        costs = [table.get(candidate, size).statistic(table.clock, SWEEP_STATISTIC) for size in sizes]
        return all(later >= earlier * (1 - noise) for earlier, later in itertools.pairwise(costs))

    if noise >= 1:
        return f"not rankable (eager PyTorch's A/A twin differed by {noise:.0%}: no ratio is readable) against"
    if TENSORFLOW in (name, table.baseline) and table.busy:
        return "not rankable (machine busy: TensorFlow's CPU time counts its worker threads' waiting) against"
    if not (grows_with_batch(name) and grows_with_batch(table.baseline)):
        return "not rankable (a time per call fell as the batch grew: disturbed samples) against"
    return timing.speed_verdict(table.ratio(name, batch_size, statistic=SWEEP_STATISTIC), noise=noise)


def sweep_noise(table: timing.BenchTable) -> float:
    """The largest deviation of the baseline's A/A twin from 1 over the batch sizes of a ``sweep``, at least ``NOISE_FLOOR``."""
    twin = table.baseline + AGAIN
    deviations = [abs(table.ratio(t.name, t.batch_size, statistic=SWEEP_STATISTIC) - 1) for t in table.timings if t.name == twin]
    return max([NOISE_FLOOR, *deviations])


def thread_table(batch_sizes: Sequence[int] = (1, 64), *, warmup: int = 3, repeat: int = 30) -> timing.BenchTable:
    """ORT with one intra-op thread and without spinning vs ORT's true default, at each batch size (baseline: default).

    The default is ``SessionOptions()`` untouched: one intra-op thread per physical core whose idle
    threads spin. Spinning threads would slow a candidate timed right after, so each session is
    timed on its own (``timing.compare_candidates(..., blocks=3)``), not interleaved, on the wall clock.
    """
    model = ensure_digits_cnn()
    sessions = {
        ORT_DEFAULT_THREADS: open_session(model),
        ORT_ONE_THREAD: open_session(model, threads=1, spinning=False),
        ORT_NO_SPINNING: open_session(model, spinning=False),
    }
    tables = []
    for size in batch_sizes:
        fns = {name: candidates(size, (ORT,), session=session)[ORT] for name, session in sessions.items()}
        tables.append(
            timing.compare_candidates(
                fns, baseline=ORT_DEFAULT_THREADS, batch_size=size, warmup=warmup, repeat=repeat, blocks=3, clock="wall"
            )
        )
    return timing.merge(tables)


CPU_EP, CPU_EP_AGAIN, OPENVINO_EP = "CPU EP", "CPU EP" + AGAIN, "OpenVINO EP (f32 hint)"


def provider_models() -> dict[str, tuple[Path, Callable[[int], np.ndarray]]]:
    """The models the provider comparison times: the CNN and the wide MLP, FP32 and notebook 06's static INT8."""
    from labsupport.course.paths import artifact
    from labsupport.models.wide_mlp import ensure_digits_mlp
    from labsupport.topics import quantization

    mlp = ensure_digits_mlp()
    mlp_int8 = artifact("bench_digits_mlp_int8.onnx")
    if not mlp_int8.exists():
        prepared = quantization.preprocess(mlp, artifact("bench_digits_mlp_prep.onnx"))
        quantization.make_static_int8(prepared, mlp_int8)
    images = batch_of_digits

    def flat(size: int) -> np.ndarray:
        return images(size).reshape(size, -1)

    return {
        "CNN FP32": (ensure_digits_cnn(), images),
        "CNN INT8": (quantization.ensure_digits_cnn_int8(), images),
        "wide MLP FP32": (mlp, flat),
        "wide MLP INT8": (mlp_int8, flat),
    }


def provider_table(batch_sizes: Sequence[int] = (1, 64), *, repeat: int = 30) -> tuple[list[dict[str, object]], str]:
    """OpenVINO EP (its CPU device, f32 hint) vs CPU EP, each with its default threads, per model and batch, with an A/A row.

    Returns the rows (model, batch, candidate, median ms, ratio to the CPU EP on the wall clock, same predictions, and
    ``busy``: other programs used the CPUs while that model and batch were timed, so its ratio is not reliable) and a
    note: empty when OpenVINO ran, else why it could not (``plugins.register_openvino().reason``).
    """
    from labsupport.onnxutil import plugins

    status = plugins.register_openvino()
    rows = []
    for model_name, (path, inputs) in provider_models().items():
        sessions = {CPU_EP: open_session(path), CPU_EP_AGAIN: open_session(path)}
        if status.usable:
            sessions[OPENVINO_EP] = plugins.session_on_devices(path, status.devices, plugins.F32_HINT)
        for size in batch_sizes:
            feeds = {sessions[CPU_EP].get_inputs()[0].name: inputs(size)}
            reference = sessions[CPU_EP].run(None, feeds)[0].argmax(axis=1)
            fns = {name: (lambda session=session, feeds=feeds: session.run(None, feeds)) for name, session in sessions.items()}
            table = timing.compare_candidates(fns, baseline=CPU_EP, batch_size=size, warmup=3, repeat=repeat, blocks=3, clock="wall")
            for name, session in sessions.items():
                rows.append(
                    {
                        "model": model_name,
                        "batch": size,
                        "candidate": name,
                        "median ms": round(table.get(name, size).median_ms, 4),
                        "vs CPU EP": round(table.ratio(name, size), 2),
                        "same predictions": bool((session.run(None, feeds)[0].argmax(axis=1) == reference).all()),
                        "busy": table.busy,
                    }
                )
    return rows, "" if status.usable else f"OpenVINO EP not compared: {status.reason}"


def summary(frameworks_table: timing.BenchTable, threads: timing.BenchTable) -> dict[str, float]:
    """The headline ratios: ORT/PyTorch time per call per batch size (on the sweep's clock), and ORT 1-thread (and
    no-spinning)/default latency."""
    ratios: dict[str, float] = {}
    what = "CPU time" if frameworks_table.clock == "cpu" else "latency"
    for entry in frameworks_table.timings:
        if entry.name != frameworks_table.baseline and not entry.name.endswith(AGAIN):
            ratios[f"{entry.name}/{frameworks_table.baseline} {what} @ batch {entry.batch_size}"] = frameworks_table.ratio(
                entry.name, entry.batch_size, statistic=SWEEP_STATISTIC
            )
    for entry in threads.timings:
        label = {ORT_ONE_THREAD: "ort 1 thread/default", ORT_NO_SPINNING: "ort no spinning/default"}.get(entry.name)
        if label:
            ratios[f"{label} latency @ batch {entry.batch_size}"] = threads.ratio(entry.name, entry.batch_size)
    return ratios


def _print_providers(rows: list[dict[str, object]], note: str) -> None:
    if rows:
        import pandas as pd

        print(pd.DataFrame(rows).to_string(index=False))
    if note:
        print(note)
    print()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the runtime suite: ``python -m labsupport.bench runtime [--repeat N] [--tensorflow]``."""
    parser = argparse.ArgumentParser(prog="python -m labsupport.bench runtime", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per candidate and batch size (default 30)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 64], help="batch sizes (default: 1 64)")
    parser.add_argument(
        "--threads", type=int, default=1, help="threads per framework in the framework comparison (default 1; 0 = each framework's default)"
    )
    parser.add_argument("--tensorflow", action="store_true", help="also time the Keras model (slow to import)")
    parser.add_argument("--providers", action=argparse.BooleanOptionalAction, default=True, help="OpenVINO EP vs CPU EP (default on)")
    parser.add_argument("--output", default=ARTIFACT, help=f"file name under artifacts/ (default {ARTIFACT})")
    args = parser.parse_args(None if argv is None else list(argv))
    if args.repeat < 1 or any(size < 1 for size in args.batch) or args.threads < 0:
        parser.error("--repeat and --batch must be >= 1, --threads >= 0")
    threads = args.threads or None
    frameworks = [ORT, PYTORCH]
    if args.tensorflow:
        if not tensorflow_available():
            print("TensorFlow leg skipped: tensorflow or labsupport.models.digits_keras is not available")
        else:
            frameworks.append(TENSORFLOW)

    import onnxruntime

    from labsupport.course.paths import artifact, relative

    budget = f"{threads} thread(s) each" if threads else "each framework's default threads"
    print(f"digits CNN, CPU; onnxruntime {onnxruntime.__version__}, torch {torch.__version__}, {os.cpu_count()} CPU cores")
    print(f"frameworks compared with {budget}; {args.repeat} timed calls per candidate, interleaved")
    table = sweep(args.batch, frameworks, threads=threads, warmup=3, repeat=args.repeat)
    thread_effect = thread_table(args.batch, repeat=args.repeat)
    print(table)
    print(f"  ({table.clock} clock; A/A noise ±{sweep_noise(table):.0%}; {table.conditions()})")
    print()
    print(thread_effect)
    print(f"  (wall clock; {thread_effect.conditions()})")
    ratios = summary(table, thread_effect)
    print()
    provider_rows, provider_note = provider_table(args.batch, repeat=args.repeat) if args.providers else ([], "")
    _print_providers(provider_rows, provider_note)
    noise = sweep_noise(table)
    for label, ratio in ratios.items():
        if "latency" in label and thread_effect.busy:
            verdict = "machine busy: ratio not reliable"
        else:
            verdict = timing.speed_verdict(ratio, noise=noise if "CPU time" in label else NOISE_FLOOR).removesuffix(" than")
        print(f"{label:<52} {ratio:6.2f}  ({verdict})")
    path = table.to_json(
        artifact(args.output),
        threads=thread_effect.rows(),
        threads_load=str(thread_effect.load),
        ratios=ratios,
        providers=provider_rows,
        providers_note=provider_note,
        repeat=args.repeat,
        framework_threads=threads or "default",
    )
    print(f"\nwrote {relative(path)}")
    return 0
