"""Exercises of notebook 05 (ONNX Runtime and execution providers)."""

from __future__ import annotations

import inspect
import json
import random
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import onnxruntime as ort
from onnxruntime.capi import _pybind_state
from onnxruntime.capi import onnxruntime_inference_collection as _inference_collection
from onnxruntime.capi import onnxruntime_pybind11_state as _pybind11_state

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
    """The silent fallback of a GPU build without its libraries: the provider is listed, the session runs on the CPU.

    ``ort.get_available_providers()`` is made to list the unavailable provider while the learner's function
    runs (onnxruntime-gpu lists CUDA whether or not its libraries load); the session itself is real.
    """
    missing = _unavailable_provider()
    providers = [missing, CPU]
    truth = open_session(model, providers=providers).get_providers()[0]
    with _listed_as_available(missing, used_provider):
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
    """While the block runs, get_available_providers() also lists ``name`` (sessions still use the real list, quietly).

    Every binding of the function is replaced: ``ort.``'s, the ``onnxruntime.capi`` modules' and the names the
    learner's function sees in its globals (``from onnxruntime import get_available_providers``).
    """
    original = ort.get_available_providers

    def listed() -> list[str]:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        from_onnxruntime = caller == "onnxruntime" or caller.startswith("onnxruntime.")
        return original() if from_onnxruntime else [name, *original()]

    normalize = _inference_collection.check_and_normalize_provider_args

    def normalize_quietly(*args, **kwargs):
        # a package that lists the provider does not warn that it is missing: neither may the imitation
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=f"Specified provider '{name}' is not in available provider names")
            return normalize(*args, **kwargs)

    bindings = [vars(module) for module in (ort, _pybind_state, _pybind11_state)]
    bindings.append(getattr(inspect.unwrap(used_provider), "__globals__", {}))
    replaced = [(namespace, key) for namespace in bindings for key, value in list(namespace.items()) if value is original]
    for namespace, key in replaced:
        namespace[key] = listed
    _inference_collection.check_and_normalize_provider_args = normalize_quietly
    try:
        yield
    finally:
        _inference_collection.check_and_normalize_provider_args = normalize
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
    """A function that really opens a session fails on a file that is not an ONNX model: ORT's error must reach the caller."""
    with tempfile.TemporaryDirectory() as folder:
        not_a_model = Path(folder) / "not_a_model.onnx"
        not_a_model.write_bytes(b"these bytes are not an ONNX model")
        with _session_failures() as failures:
            try:
                got = used_provider(str(not_a_model), [CPU])
            except NotAttempted:
                raise
            except Exception:  # ORT refusing the file is the expected outcome
                return
    if failures:
        raise Incorrect(
            f"your function returned {got!r} for a file ORT cannot load: its InferenceSession raised {failures[0]} and your "
            "code went on. No session exists there, so no provider runs anything: let the session's error propagate "
            "(no try/except around InferenceSession)"
        )
    raise Incorrect(
        f"for a file that is not an ONNX model your function returned {got!r} without failing: "
        "it never opened a session on the model; create one and ask it"
    )


@contextmanager
def _session_failures():
    """Collect the errors of every InferenceSession that fails to open while the block runs (what a try/except hides)."""
    failures: list[str] = []  # the exception types
    original = ort.InferenceSession._create_inference_session

    def recorded(session, *args, **kwargs):
        try:
            return original(session, *args, **kwargs)
        except Exception as error:
            failures.append(type(error).__name__)
            raise

    ort.InferenceSession._create_inference_session = recorded
    try:
        yield failures
    finally:
        ort.InferenceSession._create_inference_session = original


def _fake_trace(path: Path, kernels: list[tuple[str, str, int]]) -> Path:
    events: list[dict] = [
        {"cat": "Session", "name": "model_loading_uri", "dur": 90_000, "ts": 0, "ph": "X", "args": {}},
        {"cat": "Session", "name": "session_initialization", "dur": 50_000, "ts": 1, "ph": "X", "args": {}},
    ]
    for index, (node, op, dur) in enumerate(kernels):
        events.append(
            {
                "cat": "Node",
                "name": f"{node}_kernel_time",
                "dur": dur,
                "ts": 10 + index,
                "ph": "X",
                "args": {"op_name": op, "provider": "CPUExecutionProvider"},
            }
        )
        events.append({"cat": "Session", "name": "SequentialExecutor::Execute", "dur": dur + 5, "ts": 10 + index, "ph": "X", "args": {}})
    path.write_text(json.dumps(events), encoding="utf-8")
    return path


def _shuffled(kernels: list[tuple[str, str, int]], seed: int) -> list[tuple[str, str, int]]:
    """One run's kernels in a fixed shuffled order (the seeds below put an op that is no typical answer first and last)."""
    order = list(kernels)
    random.Random(seed).shuffle(order)
    return order


# (node, op type, microseconds) per run. Over all runs Conv has the largest *total*. Every shortcut picks
# another op: the first run alone (a cold run) and the longest single call times the number of calls pick
# Transpose; the last run alone (a dict keyed by node keeps only each node's last duration), every run but
# the first, the largest per-node total and the mean or median call pick MatMul; Relu has the most calls,
# Reshape the smallest total. The first and the last kernel event are Add (A), Relu and Softmax (B).
# Session events are far longer than any kernel.
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


def _run(nodes: list[tuple[str, str]], durations: list[int]) -> list[tuple[str, str, int]]:
    return [(node, op, dur) for (node, op), dur in zip(nodes, durations, strict=True)]


_TRACE_A = [
    *_shuffled(_run(_NODES_A, [60, 9, 60, 8, 7, 30, 4, 150, 1]), seed=12),
    *_shuffled(_run(_NODES_A, [20, 9, 20, 8, 7, 70, 4, 5, 1]), seed=5),
    *_shuffled(_run(_NODES_A, [20, 9, 20, 8, 7, 80, 4, 5, 1]), seed=0),
]
_NODES_B = [("gemm", "Gemm"), ("relu", "Relu"), ("relu_b", "Relu"), ("relu_c", "Relu"), ("softmax", "Softmax")]
_TRACE_B = [*_shuffled(_run(_NODES_B, [300, 30, 30, 30, 40]), seed=37), *_shuffled(_run(_NODES_B, [100, 30, 30, 30, 150]), seed=37)]


def _shortcuts(kernels: list[tuple[str, str, int]]) -> dict[str, str]:
    """What each typical wrong computation answers for one trace: {description of the computation: op type}."""
    calls: dict[str, list[int]] = {}
    per_node: dict[str, tuple[str, int]] = {}
    last_per_node: dict[str, tuple[str, int]] = {}
    runs: list[list[tuple[str, str, int]]] = []
    for node, op, dur in kernels:
        calls.setdefault(op, []).append(dur)
        per_node[node] = (op, per_node.get(node, (op, 0))[1] + dur)
        last_per_node[node] = (op, dur)
        if not runs or any(node == seen for seen, _, _ in runs[-1]):
            runs.append([])
        runs[-1].append((node, op, dur))
    sums = {"the first run alone": _op_totals(runs[0]), "every run but the first": _op_totals([k for run in runs[1:] for k in run])}
    sums["the last duration of each node (a dict keyed by node name)"] = _op_totals([(n, op, d) for n, (op, d) in last_per_node.items()])
    sums["the longest single call times the number of calls"] = {op: max(d) * len(d) for op, d in calls.items()}
    sums["the longest single call"] = {op: max(d) for op, d in calls.items()}
    sums["the mean call"] = {op: sum(d) / len(d) for op, d in calls.items()}
    sums["the node with the largest total"] = {op: d for op, d in per_node.values()}
    return {what: max(values, key=values.get) for what, values in sums.items()}


def _op_totals(kernels: list[tuple[str, str, int]]) -> dict[str, int]:
    """Kernel time per op type."""
    totals: dict[str, int] = {}
    for _, op, dur in kernels:
        totals[op] = totals.get(op, 0) + dur
    return totals


def _most_called(kernels: list[tuple[str, str, int]]) -> str:
    counts = _op_totals([(node, op, 1) for node, op, _ in kernels])
    return max(counts, key=counts.get)


def _check_slowest(slowest_op) -> str:
    if not callable(slowest_op):
        raise Incorrect(f"expected a function profile_path -> operator type, got {type(slowest_op).__name__}")
    with tempfile.TemporaryDirectory() as folder:
        for name, kernels, truth in (("a", _TRACE_A, "Conv"), ("b", _TRACE_B, "Gemm")):
            path = _fake_trace(Path(folder) / f"profile_{name}.json", kernels)
            got = slowest_op(str(path))
            if got in ("model_loading_uri", "session_initialization", "SequentialExecutor::Execute"):
                raise Incorrect(f"{got!r} is a session event, not an operator: keep only events with cat == 'Node'")
            if isinstance(got, str) and got.endswith("_kernel_time"):
                raise Incorrect(f"{got!r} is one node's event name; return the operator type (args['op_name'])")
            if got == truth:
                continue
            totals = _op_totals(kernels)
            shortcuts = [what for what, op in _shortcuts(kernels).items() if op == got]
            if shortcuts:
                raise Incorrect(
                    f"{got!r} is what {' or '.join(shortcuts)} gives, but the profile holds every run and {truth} "
                    "has the largest total: add up every kernel event's 'dur' per op type, first run included"
                )
            if got == min(totals, key=totals.get):
                raise Incorrect(f"{got!r} has the smallest total kernel time; the slowest operator has the largest")
            if got == _most_called(kernels):
                raise Incorrect(
                    f"{got!r} has the most kernel events, and counting events or adding up their start times ('ts') "
                    "favours the op that runs most often: sum the durations ('dur') per op type"
                )
            if got in (kernels[0][1], kernels[-1][1]):
                raise Incorrect(
                    f"{got!r} is the op of the first or last kernel event; events come in execution order: "
                    "sum the durations ('dur') per op type"
                )
            raise Incorrect(f"in a test profile the operator type with the largest total time is {truth}, you returned {got!r}")
    return "you summed kernel time per operator type, as labsupport.onnxutil.profiling.Profile.hottest_op() does"


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
    "is the provider that gets first pick of the nodes. The list you passed in is only a wish.",
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
    hint="json.load the file; keep events with cat == 'Node' whose name ends in '_kernel_time'; add up "
    "event['dur'] per event['args']['op_name']; return the op type with the largest sum.",
    solution_code="""
        import json
        from collections import Counter

        def answer(profile_path):
            with open(profile_path) as f:
                events = json.load(f)
            totals = Counter()
            for event in events:
                if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                    totals[event["args"]["op_name"]] += event["dur"]
            return totals.most_common(1)[0][0]
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

EXERCISES = [q1, q2, q3]
