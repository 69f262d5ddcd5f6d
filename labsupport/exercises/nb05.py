"""Exercises of notebook 05 (ONNX Runtime and execution providers)."""

from __future__ import annotations

import inspect
import json
import random
import statistics
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import onnxruntime as ort

from labsupport.exercises import Exercise, Incorrect, NotAttempted
from labsupport.exercises.checks import error_summary
from labsupport.onnxutil.sessions import CPU, DISABLE_CPU_FALLBACK, open_session

AZURE = "AzureExecutionProvider"


def _unavailable_provider() -> str:
    """A provider this ORT knows but cannot use here (CUDA on a CPU-only machine, typically)."""
    available = set(ort.get_available_providers())
    preferred = ["CUDAExecutionProvider", "TensorrtExecutionProvider", "CoreMLExecutionProvider", "DmlExecutionProvider"]
    for name in preferred + list(ort.get_all_providers()):
        if name not in available:
            return name
    raise RuntimeError("every provider of this onnxruntime build is available; exercise 1 cannot be checked here")


def _other_available_provider() -> str | None:
    """An available provider that is not the CPU's, if any: AzureExecutionProvider (in every PyPI build) first."""
    others = [name for name in ort.get_available_providers() if name != CPU]
    return AZURE if AZURE in others else next(iter(others), None)


def _priority_lists() -> list[list]:
    """Lists whose real primary provider is neither the first requested one, nor the last one, nor always the CPU.

    With a second available provider, its wish sits in the middle behind a missing one: the session falls back
    to the *next* wish, not to the CPU. Some entries are ``(name, options)`` pairs, as real lists with options are.
    """
    missing, other = _unavailable_provider(), _other_available_provider()
    lists: list[list] = [[missing, CPU], [CPU, other or missing]]
    if other:
        lists += [[other, CPU], [(other, {}), (CPU, {})], [missing, other, CPU], [(missing, {}), (other, {}), (CPU, {})]]
    lists.append([(missing, {}), CPU])
    return lists


def _provider_name(entry) -> str:
    return entry[0] if isinstance(entry, tuple) else entry


def _check_used_provider(used_provider) -> str:
    with warnings.catch_warnings():  # ORT warns about the unavailable provider: that is the lesson, not news
        warnings.simplefilter("ignore", UserWarning)
        return _check_used_provider_quietly(used_provider)


def _check_used_provider_quietly(used_provider) -> str:
    if not callable(used_provider):
        raise Incorrect(f"expected a function (model_path, providers) -> provider name, got {type(used_provider).__name__}")
    from labsupport.models.digits_cnn import ensure_digits_cnn

    model = str(ensure_digits_cnn())
    truths = []
    for providers in _priority_lists():
        truth = open_session(model, providers=providers).get_providers()[0]
        with _count_provider_queries() as queries:
            got = used_provider(model, list(providers))
        _require_name(got)
        if got != truth:
            why = _why_not(got, truth, providers)
            raise Incorrect(
                f"for the priority list {providers} the session's primary provider is {truth}, you returned {got}"
                + (f": {why}; the list is only a wish, ask the session" if why else "")
            )
        if not queries:
            raise Incorrect(
                f"for {providers} you returned {got} without calling get_providers() on a session: "
                "open a session with the list and ask it (session.get_providers()); the list is only a wish"
            )
        truths.append(f"{_provider_name(providers[0])} first -> {truth}")
    truths.append(_check_listed_but_not_started(used_provider, model))
    _require_a_session(used_provider)
    return "you asked the session, not the list: " + "; ".join(truths)


def _why_not(got: str, truth: str, providers: list) -> str:
    """The misconception behind a wrong primary provider, or '' when none is recognised."""
    if got not in ort.get_all_providers():
        return f"{got!r} is not the name of an execution provider (ort.get_all_providers() lists them), return it as get_providers() does"
    if got not in ort.get_available_providers():
        return "it was requested, but it is not available here, so the session cannot run on it"
    if got == CPU and truth != _provider_name(providers[0]):
        return f"when a wish cannot be met the session goes on to the next one ({truth} here), not straight to the CPU"
    return ""


def _require_name(got) -> None:
    if not isinstance(got, str):
        raise Incorrect(f"return the provider's name as a string (like 'CPUExecutionProvider'), got {type(got).__name__}")


def _check_listed_but_not_started(used_provider, model: str) -> str:
    """The silent fallback of a GPU build without its libraries: the provider is listed, the session runs on the CPU."""
    missing = _unavailable_provider()
    providers = [missing, CPU]
    with _listed_as_available(missing, used_provider):
        try:
            truth = open_session(model, providers=providers).get_providers()[0]
        except Exception:  # this build refuses a listed provider it lacks: the case cannot be staged here
            return f"{missing} listed but not started: not checked on this build"
        got = used_provider(model, list(providers))
    _require_name(got)
    if got != truth:
        raise Incorrect(
            f"when get_available_providers() lists {missing} (as a GPU build does on a machine without its "
            f"libraries) the session for {providers} still runs on {truth}, you returned {got}: the package's "
            "list is not the session's; ask the session (session.get_providers())"
        )
    return f"{missing} listed but not started -> {truth}"


@contextmanager
def _listed_as_available(name: str, used_provider):
    """While the block runs, the learner's get_available_providers() also lists ``name``, as onnxruntime-gpu lists CUDA.

    Only public bindings are rebound: ``onnxruntime.get_available_providers`` and the names in the learner's globals
    bound to it (``from onnxruntime import ...``). Nothing inside ``onnxruntime.capi`` is touched, so ORT's own
    InferenceSession still reads the real list: it warns that ``name`` is not available (the checker ignores that
    warning) and goes on to the next wish, as a GPU build without its libraries does (quietly, there).
    """
    original = ort.get_available_providers

    def listed() -> list[str]:
        return [name, *original()]

    bindings = [vars(ort), getattr(inspect.unwrap(used_provider), "__globals__", {})]
    replaced = [(namespace, key) for namespace in bindings for key, value in list(namespace.items()) if value is original]
    for namespace, key in replaced:
        namespace[key] = listed
    try:
        yield
    finally:
        for namespace, key in replaced:
            namespace[key] = original


@contextmanager
def _count_provider_queries():
    """Count the calls of InferenceSession.get_providers while the learner's function runs."""
    calls = []
    original = ort.InferenceSession.get_providers

    def counted(session):
        calls.append(session)
        return original(session)

    ort.InferenceSession.get_providers = counted
    try:
        yield calls
    finally:
        ort.InferenceSession.get_providers = original


def _require_a_session(used_provider) -> None:
    """A function that opens a session on the model fails on a file that is not one: ORT's error must reach the caller."""
    with tempfile.TemporaryDirectory() as folder:
        not_a_model = Path(folder) / "not_a_model.onnx"
        not_a_model.write_bytes(b"these bytes are not an ONNX model")
        try:
            got = used_provider(str(not_a_model), [CPU])
        except NotAttempted:
            raise
        except Exception:  # ORT refusing the file is the expected outcome
            return
    raise Incorrect(
        f"for a file ORT cannot load (these bytes are not an ONNX model) your function returned {got!r} without "
        "failing: no session can exist there, so no provider runs anything. Either your code caught the session's "
        "error (let the session's error propagate: no try/except around InferenceSession) or it answered without "
        "opening a session on model_path"
    )


Kernel = tuple[str, str, int]  # (node, op type, microseconds)


def _fake_trace(path: Path, runs: list[list[Kernel]]) -> Path:
    """A profile laid out as ORT 1.31 writes it: per run, its kernel events, then SequentialExecutor::Execute and model_run."""
    events: list[dict] = [
        {"cat": "Session", "name": "model_loading_uri", "dur": 90_000, "ts": 0, "ph": "X", "args": {}},
        {"cat": "Session", "name": "session_initialization", "dur": 50_000, "ts": 100, "ph": "X", "args": {}},
    ]
    clock = 60_000
    for kernels in runs:
        run_start = clock
        for node, op, dur in kernels:
            clock += 2
            args = {"op_name": op, "provider": "CPUExecutionProvider"}
            events.append({"cat": "Node", "name": f"{node}_kernel_time", "dur": dur, "ts": clock, "ph": "X", "args": args})
            clock += dur
        length = clock - run_start + 4
        events.append(
            {"cat": "Session", "name": "SequentialExecutor::Execute", "dur": length - 2, "ts": run_start + 1, "ph": "X", "args": {}}
        )
        events.append({"cat": "Session", "name": "model_run", "dur": length, "ts": run_start, "ph": "X", "args": {}})
        clock += 100
    path.write_text(json.dumps(events), encoding="utf-8")
    return path


def _run(nodes: list[tuple[str, str]], durations: list[int], seed: int) -> list[Kernel]:
    """One run's kernels in a fixed shuffled order (the seeds put an op that is no typical answer first and last)."""
    kernels = [(node, op, dur) for (node, op), dur in zip(nodes, durations, strict=True)]
    random.Random(seed).shuffle(kernels)
    return kernels


# The answer is the op type with the largest median per run: add up each op's kernel time within a run, then take its
# median over the runs (five runs; D has seven). In A, Conv (two nodes of 30 us) leads every warm run; the cold first run
# (Transpose 300 us) and a run the OS interrupted in MatMul (400 us) decide every sum, and MatMul's single node has the
# longest median call. In B the last run is interrupted in Softmax and Gemm has one fast run, so the last run alone and
# the fastest run per op pick Softmax. _shortcuts lists what each typical wrong computation answers; the tests prove that
# each one misses in some trace. In every trace the run of median length leads with the answer.
_NODES_A = [
    ("conv_1", "Conv"),
    ("relu_1", "Relu"),
    ("conv_2", "Conv"),
    ("relu_2", "Relu"),
    ("relu_3", "Relu"),
    ("matmul", "MatMul"),
    ("add", "Add"),
    ("transpose", "Transpose"),
    ("reshape", "Reshape"),
]
_TRACE_A = [
    _run(_NODES_A, [40, 9, 40, 8, 7, 50, 4, 300, 1], seed=12),  # cold
    _run(_NODES_A, [30, 9, 30, 8, 7, 50, 4, 5, 1], seed=5),
    _run(_NODES_A, [30, 9, 30, 8, 7, 400, 4, 5, 1], seed=0),  # interrupted in MatMul
    _run(_NODES_A, [31, 9, 30, 8, 7, 52, 4, 5, 1], seed=3),
    _run(_NODES_A, [30, 9, 29, 8, 7, 50, 4, 5, 1], seed=24),
]
_NODES_B = [("gemm", "Gemm"), ("relu", "Relu"), ("relu_b", "Relu"), ("relu_c", "Relu"), ("softmax", "Softmax")]
_TRACE_B = [
    _run(_NODES_B, [300, 10, 10, 10, 60], seed=37),  # cold
    _run(_NODES_B, [100, 10, 10, 10, 60], seed=37),
    _run(_NODES_B, [110, 10, 10, 10, 60], seed=37),
    _run(_NODES_B, [30, 10, 10, 10, 61], seed=37),  # Gemm's fast run
    _run(_NODES_B, [100, 10, 10, 10, 500], seed=37),  # interrupted in Softmax
]

# C tells apart what A and B confuse: a cold first run in Conv decides the total over all runs, a run interrupted in Add
# the total of the other runs and the slowest run; MatMul leads every run but its fast one, Mul leads the fastest runs.
_NODES_C = [
    ("matmul", "MatMul"),
    ("conv_1", "Conv"),
    ("conv_2", "Conv"),
    ("add", "Add"),
    ("mul_1", "Mul"),
    ("mul_2", "Mul"),
    ("mul_3", "Mul"),
]
_TRACE_C = [
    _run(_NODES_C, [60, 435, 435, 10, 15, 15, 15], seed=1),  # cold in Conv
    _run(_NODES_C, [60, 10, 10, 10, 15, 15, 15], seed=1),
    _run(_NODES_C, [60, 10, 10, 900, 15, 15, 15], seed=1),  # interrupted in Add
    _run(_NODES_C, [25, 10, 10, 10, 15, 15, 15], seed=1),  # MatMul's fast run
    _run(_NODES_C, [60, 10, 10, 10, 15, 15, 15], seed=1),
]

# D tells the slowest run apart from sums and single calls: Relu's two nodes share one interrupted run (the slowest run),
# Sigmoid's single node is slow in two runs (the longest call, the largest total, the largest mean call).
_NODES_D = [("gemm", "Gemm"), ("relu_1", "Relu"), ("relu_2", "Relu"), ("sigmoid", "Sigmoid")]
_TRACE_D = [
    _run(_NODES_D, [50, 5, 5, 5], seed=2),
    _run(_NODES_D, [50, 5, 5, 200], seed=2),
    _run(_NODES_D, [50, 150, 150, 5], seed=2),  # interrupted in both Relu nodes
    _run(_NODES_D, [50, 5, 5, 5], seed=2),
    _run(_NODES_D, [50, 5, 5, 200], seed=2),
    _run(_NODES_D, [50, 5, 5, 5], seed=2),
    _run(_NODES_D, [50, 5, 5, 5], seed=2),
]


def _op_totals(kernels: list[Kernel]) -> dict[str, int]:
    """Kernel time per op type."""
    totals: dict[str, int] = {}
    for _, op, dur in kernels:
        totals[op] = totals.get(op, 0) + dur
    return totals


def _largest(values: dict[str, float]) -> str:
    return max(values, key=values.get)


def _per_run(runs: list[list[Kernel]], key=lambda node, op: op) -> dict[str, list[int]]:
    """{op type (or what ``key`` gives): its kernel time in each run}."""
    times: dict[str, list[int]] = {}
    for number, kernels in enumerate(runs):
        for node, op, dur in kernels:
            times.setdefault(key(node, op), [0] * len(runs))[number] += dur
    return times


def _slowest_by_median_run(runs: list[list[Kernel]]) -> str:
    """The truth of exercise 2: the op type with the largest median (over the runs) of its kernel time per run."""
    return _largest({op: statistics.median(times) for op, times in _per_run(runs).items()})


def _shortcuts(runs: list[list[Kernel]]) -> dict[str, str]:
    """What each typical wrong computation answers for one trace: {description of the computation: op type}."""
    kernels = [kernel for run in runs for kernel in run]
    calls: dict[str, list[int]] = {}
    for _, op, dur in kernels:
        calls.setdefault(op, []).append(dur)
    per_run, per_node = _per_run(runs), _per_run(runs, key=lambda node, op: (node, op))
    answers = {
        "the total (or the mean) over all runs": _largest(_op_totals(kernels)),
        "the total of every run but the first": _largest(_op_totals([k for run in runs[1:] for k in run])),
        "the first run alone": _largest(_op_totals(runs[0])),
        "the last run alone": _largest(_op_totals(runs[-1])),
        "the longest single call": _largest({op: max(durs) for op, durs in calls.items()}),
        "the mean call": _largest({op: sum(d) / len(d) for op, d in calls.items()}),
        "the median single call (not the op's time per run)": _largest({op: statistics.median(d) for op, d in calls.items()}),
        "each op's slowest run": _largest({op: max(times) for op, times in per_run.items()}),
        "each op's fastest run": _largest({op: min(times) for op, times in per_run.items()}),
        "the node with the largest median (not the op type's, which adds up its nodes)": _largest(
            {key: statistics.median(times) for key, times in per_node.items()}
        )[1],
    }
    return answers


_MEDIAN_PER_RUN = (
    "a cold first run and a run the OS interrupted weigh fully in a sum or an extreme: per run, add up each op type's 'dur' "
    "(a model_run event spans each run), then take each op type's median over the runs"
)


def _check_slowest(slowest_op) -> str:
    if not callable(slowest_op):
        raise Incorrect(f"expected a function profile_path -> operator type, got {type(slowest_op).__name__}")
    traces = (_TRACE_A, _TRACE_B, _TRACE_C, _TRACE_D)
    with tempfile.TemporaryDirectory() as folder:
        answers = [slowest_op(str(_fake_trace(Path(folder) / f"profile_{n}.json", runs))) for n, runs in enumerate(traces)]
    wrong = [(got, runs) for got, runs in zip(answers, traces, strict=True) if got != _slowest_by_median_run(runs)]
    if wrong:
        _diagnose_slowest(*wrong[0], [_shortcuts(runs) for runs in traces], answers)
    return "you took each operator type's median time per run: cold and interrupted runs did not decide it"


def _diagnose_slowest(got, runs: list[list[Kernel]], shortcuts: list[dict[str, str]], answers: list) -> None:
    """Raise Incorrect naming the wrong computation that gives ``got`` on ``runs`` (and the learner's other answers)."""
    kernels, truth = [kernel for run in runs for kernel in run], _slowest_by_median_run(runs)
    if got in ("model_loading_uri", "session_initialization", "SequentialExecutor::Execute", "model_run"):
        raise Incorrect(f"{got!r} is a session event, not an operator: keep only events with cat == 'Node'")
    if isinstance(got, str) and got.endswith("_kernel_time"):
        raise Incorrect(f"{got!r} is one node's event name; return the operator type (args['op_name'])")
    explaining = [what for what in shortcuts[0] if all(trace[what] == answer for trace, answer in zip(shortcuts, answers, strict=True))]
    if explaining:
        raise Incorrect(
            f"{got!r} is what {' or '.join(explaining[:3])} gives, but {truth} has the largest median per run: {_MEDIAN_PER_RUN}"
        )
    medians = {op: statistics.median(times) for op, times in _per_run(runs).items()}
    if got == min(medians, key=medians.get):
        raise Incorrect(f"{got!r} has the smallest median per run; the slowest operator has the largest")
    if got == _most_called(kernels):
        raise Incorrect(
            f"{got!r} has the most kernel events, and counting events or adding up their start times ('ts') "
            "favours the op that runs most often: add up the durations ('dur')"
        )
    if got in (kernels[0][1], kernels[-1][1]):
        raise Incorrect(
            f"{got!r} is the op of the first or last kernel event; events come in execution order: add up the durations ('dur')"
        )
    raise Incorrect(f"in a test profile the operator type with the largest median per run is {truth}, you returned {got!r}")


def _most_called(kernels: list[Kernel]) -> str:
    return _largest(_op_totals([(node, op, 1) for node, op, _ in kernels]))


def _check_no_fallback(options) -> str:
    if not isinstance(options, ort.SessionOptions):
        raise Incorrect(f"expected an onnxruntime.SessionOptions, got {type(options).__name__}")
    value = options.get_session_config_entry(DISABLE_CPU_FALLBACK) if _has_entry(options) else None
    if value != "1":
        raise Incorrect(f"the session config entry {DISABLE_CPU_FALLBACK!r} must be '1' (got {value!r})")
    if options.intra_op_num_threads != 1:
        raise Incorrect(f"intra_op_num_threads must be 1, got {options.intra_op_num_threads}")
    if options.execution_mode == ort.ExecutionMode.ORT_PARALLEL and options.inter_op_num_threads != 1:
        raise Incorrect(
            "ORT_PARALLEL adds an inter-op thread pool (one thread per core unless inter_op_num_threads is 1): "
            "the session is not single-threaded; keep the default ORT_SEQUENTIAL"
        )
    if options.has_providers():
        raise Incorrect(
            "these options choose providers themselves (add_provider, add_provider_for_devices or a selection policy): "
            "with the CPU fallback disabled ORT refuses sessions opened from them; set only the thread count and the "
            "config entry"
        )
    from labsupport.models.digits_cnn import ensure_digits_cnn

    severity, options.log_severity_level = options.log_severity_level, 4  # the error below is the message: no red log line
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            # enable_fallback=0: no retry on the CPU by ORT's Python wrapper, so no "EP Error" banner on stdout
            ort.InferenceSession(str(ensure_digits_cnn()), sess_options=options, providers=[_unavailable_provider()], enable_fallback=0)
    except Exception as error:  # the failure is the point
        if _FALLBACK_REFUSAL not in str(error):
            reason = error_summary(error)
            raise Incorrect(f"the session failed, but not because the CPU fallback is disabled: {reason}") from error
        return "a session with an unavailable provider now fails loudly instead of running on the CPU"
    finally:
        options.log_severity_level = severity
    raise Incorrect("a session with these options and an unavailable provider still ran: the CPU fallback is not disabled")


# ORT 1.31's error when a node is left for the CPU EP and session.disable_cpu_ep_fallback is "1"
_FALLBACK_REFUSAL = "fallback to CPU EP has been explicitly disabled"


def _has_entry(options: ort.SessionOptions) -> bool:
    try:
        options.get_session_config_entry(DISABLE_CPU_FALLBACK)
    except Exception:  # ORT raises when the key was never set
        return False
    return True


q1 = Exercise(
    1,
    "which provider does the session really put first?",
    _check_used_provider,
    hint="Create ort.InferenceSession(model_path, providers=providers) and ask it: session.get_providers()[0] "
    "is the provider that gets first pick of the nodes. The list you passed in is only a wish. The checker's lists start "
    "with a provider unavailable here, end with one the session does not put first, start with an available provider "
    "that is not the CPU's (the AzureExecutionProvider of the PyPI builds) or put that one behind an unavailable one; "
    "some entries are (name, options) pairs. It also makes get_available_providers() list a provider that cannot start "
    "(as a GPU build does without its libraries), and gives your function a file that is not a model: ORT's error must "
    "reach the caller.",
    solution_code="""
        import onnxruntime as ort

        def answer(model_path, providers):
            session = ort.InferenceSession(model_path, providers=providers)
            return session.get_providers()[0]
    """,
)

q2 = Exercise(
    2,
    "find the slowest operator in a profile",
    _check_slowest,
    hint="json.load the file. Each event with name 'model_run' spans one run, from its 'ts' to 'ts' + 'dur'; the kernels are "
    "the events with cat == 'Node' whose name ends in '_kernel_time'. For each run, add up event['dur'] per "
    "event['args']['op_name']; then take each op type's median over the runs (statistics.median) and return the largest.",
    solution_code="""
        import json
        import statistics

        def answer(profile_path):
            with open(profile_path) as f:
                events = json.load(f)
            runs = [e for e in events if e["name"] == "model_run"]
            times = {}  # op type -> its kernel time in each run
            for event in events:
                if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                    run = next(i for i, r in enumerate(runs) if r["ts"] <= event["ts"] <= r["ts"] + r["dur"])
                    per_run = times.setdefault(event["args"]["op_name"], [0] * len(runs))
                    per_run[run] += event["dur"]
            return max(times, key=lambda op: statistics.median(times[op]))
    """,
)

q3 = Exercise(
    3,
    "session options: one thread, no silent CPU fallback",
    _check_no_fallback,
    hint="options = ort.SessionOptions(); set options.intra_op_num_threads and call "
    "options.add_session_config_entry('session.disable_cpu_ep_fallback', '1').",
    solution_code="""
        import onnxruntime as ort

        answer = ort.SessionOptions()
        answer.intra_op_num_threads = 1
        answer.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    """,
)


def _unseen_models(folder: Path) -> list[Path]:
    """Two small models the notebook never opens, written to ``folder``: an int64 and a float input, and two outputs.

    "mixer": Cast(tokens) * scale, then MatMul (tokens int64 and scale float32, both ``["rows", 3]``, output ``scores``);
    "meter": ReduceSum and ReduceMax over ``signal`` float32 ``["rows", 5]`` (outputs ``total`` and ``peak``).
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def save(name, nodes, inputs, outputs, initializers=()):
        graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
        onnx.checker.check_model(model)
        path = folder / f"{name}.onnx"
        onnx.save_model(model, path)
        return path

    value = helper.make_tensor_value_info
    mixer = save(
        "mixer",
        [
            helper.make_node("Cast", ["tokens"], ["counts"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["counts", "scale"], ["weighted"]),
            helper.make_node("MatMul", ["weighted", "mix"], ["scores"]),
        ],
        [value("tokens", TensorProto.INT64, ["rows", 3]), value("scale", TensorProto.FLOAT, ["rows", 3])],
        [value("scores", TensorProto.FLOAT, ["rows", 2])],
        [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5, "mix")],
    )
    meter = save(
        "meter",
        [
            helper.make_node("ReduceSum", ["signal", "axis"], ["total"], keepdims=0),
            helper.make_node("ReduceMax", ["signal", "axis"], ["peak"], keepdims=0),
        ],
        [value("signal", TensorProto.FLOAT, ["rows", 5])],
        [value("total", TensorProto.FLOAT, ["rows"]), value("peak", TensorProto.FLOAT, ["rows"])],
        [numpy_helper.from_array(np.array([1], dtype=np.int64), "axis")],
    )
    return [mixer, meter]


REPORT_KEYS = ("session", "provider", "threads", "spinning", "outputs")
ONES_ROWS = 2


def _expected_outputs(path: Path) -> dict:
    """{output name: array} of one run on ONES_ROWS rows of ones, each input in its own element type."""
    import numpy as np

    session = open_session(path)
    dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
    feeds = {i.name: np.ones([d if isinstance(d, int) else ONES_ROWS for d in i.shape], dtypes[i.type]) for i in session.get_inputs()}
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def _check_session_report(report, path: Path, providers: list, threads: int) -> None:
    import numpy as np

    if not isinstance(report, dict) or set(report) != set(REPORT_KEYS):
        found = sorted(report) if isinstance(report, dict) else type(report).__name__
        raise Incorrect(f"expected a dict with the keys {list(REPORT_KEYS)}, got {found}")
    session = report["session"]
    if not isinstance(session, ort.InferenceSession):
        raise Incorrect(f"report['session'] should be the InferenceSession you opened, got {type(session).__name__}")
    held = session.get_session_options()  # the session's own copy of its options
    if held.intra_op_num_threads != threads:
        raise Incorrect(
            f"asked for {threads} intra-op thread(s), the session holds intra_op_num_threads={held.intra_op_num_threads}"
            + (" (0: ORT's default, one thread per physical core)" if held.intra_op_num_threads == 0 else "")
            + ": set SessionOptions.intra_op_num_threads and pass the options to InferenceSession"
        )
    try:
        spinning = held.get_session_config_entry("session.intra_op.allow_spinning")
    except Exception:  # ORT raises when the entry was never set: spinning is on by default
        spinning = "1"
    if spinning != "0":
        raise Incorrect(
            "the session's idle threads still spin (on by default): add_session_config_entry('session.intra_op.allow_spinning', '0')"
        )
    primary = session.get_providers()[0]
    if report["provider"] != primary:
        raise Incorrect(
            f"report['provider'] is {report['provider']!r}, but the session runs on {primary!r} first "
            f"(asked: {[_provider_name(p) for p in providers]}): report what session.get_providers() says, not the wish"
        )
    if report["threads"] != held.intra_op_num_threads or report["spinning"] is not False:
        raise Incorrect(
            f"report['threads'] and report['spinning'] should be read back from the session (session.get_session_options()): "
            f"{held.intra_op_num_threads} and False, got {report['threads']!r} and {report['spinning']!r}"
        )
    outputs, expected = report["outputs"], _expected_outputs(path)
    if not isinstance(outputs, dict) or sorted(outputs) != sorted(expected):
        found = sorted(outputs) if isinstance(outputs, dict) else type(outputs).__name__
        raise Incorrect(f"report['outputs'] should map every output name {sorted(expected)} to its array, got {found}")
    for name, want in expected.items():
        got = np.asarray(outputs[name])
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-6, atol=1e-6):
            raise Incorrect(
                f"output {name!r} of {path.name}: got shape {got.shape}, expected {want.shape} with values {want.tolist()}: "
                f"feed {ONES_ROWS} rows of ones, each input in its own type, a symbolic dimension set to {ONES_ROWS}"
            )


def _check_open_and_prove(open_and_prove) -> str:
    if not callable(open_and_prove):
        raise Incorrect(f"expected a function (model_path, providers, threads) -> dict, got {type(open_and_prove).__name__}")
    from labsupport.exercises.checks import blame_answer

    missing = _unavailable_provider()
    with tempfile.TemporaryDirectory() as folder:
        mixer, meter = _unseen_models(Path(folder))
        cases = [(mixer, [missing, CPU], 2), (meter, [CPU], 1), (mixer, [(missing, {}), (CPU, {})], 3)]
        for path, providers, threads in cases:
            with warnings.catch_warnings():  # ORT warns about the unavailable provider: that is the lesson, not news
                warnings.simplefilter("ignore", UserWarning)
                with blame_answer(f"your function failed on {path.name} with providers={providers}, threads={threads}"):
                    report = open_and_prove(str(path), providers, threads)
            _check_session_report(report, path, providers, threads)
    return (
        "two models never shown, three priority lists: the provider, thread count and spinning read back from each "
        "session, and its outputs built from get_inputs() match"
    )


q4 = Exercise(
    4,
    "open any model with given options, and prove what it runs with",
    _check_open_and_prove,
    hint=(
        "SessionOptions: intra_op_num_threads and the config entry that stops spinning; InferenceSession(path, options, "
        "providers=...). Read back with session.get_providers() and session.get_session_options(). Build the feeds "
        "from session.get_inputs(): each input's .shape (a str is a symbolic dimension) and .type ('tensor(int64)', ...)."
    ),
    solution_code="""
        import numpy as np
        import onnxruntime as ort

        DTYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(double)": np.float64}


        def answer(model_path, providers, threads):
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(model_path, options, providers=providers)
            feeds = {
                i.name: np.ones([d if isinstance(d, int) else 2 for d in i.shape], DTYPES[i.type])
                for i in session.get_inputs()
            }
            outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
            held = session.get_session_options()
            return {
                "session": session,
                "provider": session.get_providers()[0],
                "threads": held.intra_op_num_threads,
                "spinning": held.get_session_config_entry("session.intra_op.allow_spinning") != "0",
                "outputs": outputs,
            }
    """,
)

EXERCISES = [q1, q2, q3, q4]
