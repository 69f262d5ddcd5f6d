"""Notebook 05's exercises: reference solutions pass, typical wrong answers fail, ____ is 'not attempted'."""

import json
import statistics
import warnings
from pathlib import Path

import onnxruntime as ort
import pytest

from labsupport.exercises import nb05


def test_q1_rejects_the_requested_provider_and_the_first_available_one():
    requested = nb05.q1.evaluate(lambda path, providers: providers[0])
    assert requested.status == "incorrect" and "requested" in requested.message
    first_available = nb05.q1.evaluate(lambda path, providers: ort.get_available_providers()[0])
    if ort.get_available_providers()[0] != "CPUExecutionProvider":
        assert first_available.status == "incorrect"
    as_list = nb05.q1.evaluate(lambda path, providers: ort.InferenceSession(path, providers=providers).get_providers())
    assert as_list.status == "incorrect" and "string" in as_list.message
    assert nb05.q1.evaluate("CPUExecutionProvider").status == "incorrect"


@pytest.mark.parametrize(
    "wrong",
    [lambda path, providers: "CPUExecutionProvider", lambda path, providers: providers[-1]],
    ids=["always the CPU", "the last requested"],
)
def test_q1_rejects_answers_that_never_ask_a_session(wrong):
    assert nb05.q1.evaluate(wrong).status == "incorrect"


def test_q1_rejects_a_constant_cpu_answer_even_where_only_the_cpu_is_available(monkeypatch):
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])  # a build without Azure's
    outcome = nb05.q1.evaluate(lambda path, providers: "CPUExecutionProvider")
    assert outcome.status == "incorrect" and (
        "never opened a session" in outcome.message or "without calling get_providers()" in outcome.message
    )
    assert nb05.q1.evaluate(nb05.q1.reference_answer()).status == "correct"


def test_q1_rejects_the_first_wish_and_says_that_it_is_not_available_here():
    outcome = nb05.q1.evaluate(lambda path, providers: providers[0] if isinstance(providers[0], str) else providers[0][0])
    assert outcome.status == "incorrect" and "not available here" in outcome.message, outcome.message


def _longest_single_call(path):
    events = [e for e in json.loads(Path(path).read_text(encoding="utf-8")) if e["cat"] == "Node"]
    return max(events, key=lambda e: e["dur"])["args"]["op_name"]


def _most_calls(path):
    from collections import Counter

    return Counter(e["args"]["op_name"] for e in json.loads(Path(path).read_text(encoding="utf-8")) if e["cat"] == "Node").most_common(1)[
        0
    ][0]


def _any_event(path):
    return max(json.loads(Path(path).read_text(encoding="utf-8")), key=lambda e: e["dur"])["name"]


def _node_name(path):
    events = [e for e in json.loads(Path(path).read_text(encoding="utf-8")) if e["cat"] == "Node"]
    return max(events, key=lambda e: e["dur"])["name"]


def _first_kernel(path):
    return next(e for e in json.loads(Path(path).read_text(encoding="utf-8")) if e["cat"] == "Node")["args"]["op_name"]


def _last_kernel(path):
    return [e for e in json.loads(Path(path).read_text(encoding="utf-8")) if e["cat"] == "Node"][-1]["args"]["op_name"]


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        (_longest_single_call, "largest median per run"),
        (_most_calls, "count"),
        (_any_event, "session event"),
        (_node_name, "operator type"),
        (_first_kernel, "execution order"),
        (_last_kernel, "execution order"),
    ],
)
def test_q2_rejects_typical_mistakes(wrong, says):
    outcome = nb05.q2.evaluate(wrong)
    assert outcome.status == "incorrect" and says in outcome.message


def test_q2_rejects_non_functions_and_constant_answers():
    assert nb05.q2.evaluate("Conv").status == "incorrect"
    assert nb05.q2.evaluate(lambda path: "Conv").status == "incorrect"  # right for one profile only


def test_q3_rejects_options_without_the_fallback_switch_or_one_thread():
    plain = ort.SessionOptions()
    plain.intra_op_num_threads = 1
    outcome = nb05.q3.evaluate(plain)
    assert outcome.status == "incorrect" and "session.disable_cpu_ep_fallback" in outcome.message

    explicit_off = ort.SessionOptions()
    explicit_off.intra_op_num_threads = 1
    explicit_off.add_session_config_entry("session.disable_cpu_ep_fallback", "0")
    assert nb05.q3.evaluate(explicit_off).status == "incorrect"

    many_threads = ort.SessionOptions()
    many_threads.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    outcome = nb05.q3.evaluate(many_threads)
    assert outcome.status == "incorrect" and "intra_op_num_threads" in outcome.message

    assert nb05.q3.evaluate({"session.disable_cpu_ep_fallback": "1"}).status == "incorrect"


def _first_available_wish(path, providers):
    """Opens a session (so a file that is not a model fails) but answers from the wish list."""
    ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [entry[0] if isinstance(entry, tuple) else entry for entry in providers]
    return next(name for name in names if name in ort.get_available_providers())


def _naive_filter(path, providers):
    ort.InferenceSession(path, providers=providers)
    return next((p for p in providers if p in ort.get_available_providers()), "CPUExecutionProvider")


@pytest.mark.parametrize("wrong", [_first_available_wish, _naive_filter], ids=["first available wish", "filter without pairs"])
def test_q1_rejects_answers_that_filter_the_wish_list_instead_of_asking_the_session(wrong):
    outcome = nb05.q1.evaluate(wrong)
    assert outcome.status == "incorrect" and ("without calling get_providers()" in outcome.message or "primary provider" in outcome.message)


def _names_only(path, providers):
    """Asks a session, but drops the (name, options) pairs of the list first."""
    return ort.InferenceSession(path, providers=[entry for entry in providers if isinstance(entry, str)]).get_providers()[0]


@pytest.mark.skipif("AzureExecutionProvider" not in ort.get_available_providers(), reason="needs a second available provider")
def test_q1_rejects_an_answer_that_drops_name_and_options_pairs():
    outcome = nb05.q1.evaluate(_names_only)
    assert outcome.status == "incorrect" and "('AzureExecutionProvider', {})" in outcome.message, outcome.message


def test_q1_accepts_the_course_helper():
    from labsupport.onnxutil.sessions import open_with_choice

    assert nb05.q1.evaluate(lambda path, providers: open_with_choice(path, providers)[1].primary).status == "correct"


def _first_run_only(path):
    seen, totals = set(), {}
    for event in json.loads(Path(path).read_text(encoding="utf-8")):
        if event["cat"] == "Node" and event["name"] not in seen:
            seen.add(event["name"])
            totals[event["args"]["op_name"]] = totals.get(event["args"]["op_name"], 0) + event["dur"]
    return max(totals, key=totals.get)


def _least_total(path):
    totals = {}
    for event in json.loads(Path(path).read_text(encoding="utf-8")):
        if event["cat"] == "Node":
            totals[event["args"]["op_name"]] = totals.get(event["args"]["op_name"], 0) + event["dur"]
    return min(totals, key=totals.get)


@pytest.mark.parametrize(("wrong", "says"), [(_first_run_only, "first run"), (_least_total, "smallest median per run")])
def test_q2_rejects_the_first_run_alone_and_the_least_total(wrong, says):
    outcome = nb05.q2.evaluate(wrong)
    assert outcome.status == "incorrect" and says in outcome.message


def test_q2_accepts_the_reference_answer():
    assert nb05.q2.evaluate(nb05.q2.reference_answer()).status == "correct"


def test_q3_rejects_a_parallel_executor_and_restores_the_log_level():
    parallel = ort.SessionOptions()
    parallel.intra_op_num_threads = 1
    parallel.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    parallel.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    outcome = nb05.q3.evaluate(parallel)
    assert outcome.status == "incorrect" and "ORT_PARALLEL" in outcome.message

    right = ort.SessionOptions()
    right.intra_op_num_threads = 1
    right.log_severity_level = 2
    right.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    assert nb05.q3.evaluate(right).status == "correct" and right.log_severity_level == 2


def _kernels(path):
    return [e for e in json.loads(Path(path).read_text(encoding="utf-8")) if e["cat"] == "Node"]


def _last_run_only(path):
    """The dict-overwrite bug: keyed by node name, each node keeps only its last duration."""
    per_node = {e["name"]: (e["args"]["op_name"], e["dur"]) for e in _kernels(path)}
    totals = {}
    for op, dur in per_node.values():
        totals[op] = totals.get(op, 0) + dur
    return max(totals, key=totals.get)


def _skip_first_run(path):
    seen, totals = set(), {}
    for event in _kernels(path):
        if event["name"] in seen:
            totals[event["args"]["op_name"]] = totals.get(event["args"]["op_name"], 0) + event["dur"]
        seen.add(event["name"])
    return max(totals, key=totals.get)


def _max_call_times_count(path):
    calls = {}
    for event in _kernels(path):
        calls.setdefault(event["args"]["op_name"], []).append(event["dur"])
    return max(calls, key=lambda op: max(calls[op]) * len(calls[op]))


def _hottest_node(path):
    per_node = {}
    for event in _kernels(path):
        op, total = per_node.get(event["name"], (event["args"]["op_name"], 0))
        per_node[event["name"]] = (op, total + event["dur"])
    return max(per_node.values(), key=lambda pair: pair[1])[0]


def _median_call(path):
    import statistics

    calls = {}
    for event in _kernels(path):
        calls.setdefault(event["args"]["op_name"], []).append(event["dur"])
    return max(calls, key=lambda op: statistics.median(calls[op]))


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        (_last_run_only, "the last run alone"),
        (_skip_first_run, "every run but the first"),
        (_max_call_times_count, "largest median per run"),
        (_hottest_node, "largest median per run"),
        (_median_call, "the median single call"),
    ],
)
def test_q2_rejects_shortcuts_and_names_what_they_computed(wrong, says):
    outcome = nb05.q2.evaluate(wrong)
    assert outcome.status == "incorrect" and says in outcome.message
    assert "longest single call, but" not in outcome.message


def _call_and_ignore(path, providers):
    """Asks a session, then ignores it: answers the first wish that get_available_providers() lists."""
    ort.InferenceSession(path, providers=providers).get_providers()
    names = [entry[0] if isinstance(entry, tuple) else entry for entry in providers]
    return next(name for name in names if name in ort.get_available_providers())


def test_q1_rejects_a_session_asked_and_ignored_where_a_listed_provider_does_not_start():
    outcome = nb05.q1.evaluate(_call_and_ignore)
    assert outcome.status == "incorrect" and "get_available_providers() lists" in outcome.message
    assert "ask the session" in outcome.message


def test_q1_never_asked_message_does_not_claim_a_filter():
    def assignment_info(path, providers):
        options = ort.SessionOptions()
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        session = ort.InferenceSession(path, sess_options=options, providers=providers)
        return session.get_provider_graph_assignment_info()[0].ep_name

    outcome = nb05.q1.evaluate(assignment_info)
    assert outcome.status == "incorrect" and "filter" not in outcome.message


def test_q3_message_keeps_the_reason_without_orts_location_or_fallback_banner(capsys):
    shared_pools = ort.SessionOptions()
    shared_pools.intra_op_num_threads = 1
    shared_pools.use_per_session_threads = False
    shared_pools.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    outcome = nb05.q3.evaluate(shared_pools)
    assert outcome.status == "incorrect" and "not because the CPU fallback is disabled" in outcome.message
    assert "onnxruntime_src" not in outcome.message and ".cc:" not in outcome.message
    assert "EP Error" not in capsys.readouterr().out


def _name(entry):
    return entry[0] if isinstance(entry, tuple) else entry


def _first_wish_or_cpu(path, providers):
    """The misconception that a failed first wish falls back to the CPU (ORT goes on to the next wish)."""
    session = ort.InferenceSession(path, providers=providers)
    first = _name(providers[0])
    return first if first in session.get_providers() else "CPUExecutionProvider"


def _first_wish_only(path, providers):
    return ort.InferenceSession(path, providers=providers[:1]).get_providers()[0]


def _filter_with_imported_name(path, providers):
    """The wish filter through a name imported from onnxruntime (not the ort. attribute), plus an ignored session."""
    from onnxruntime import get_available_providers

    ort.InferenceSession(path, providers=providers).get_providers()
    return next(_name(entry) for entry in providers if _name(entry) in get_available_providers())


_imported_get_available_providers = ort.get_available_providers


def _filter_with_module_level_import(path, providers):
    ort.InferenceSession(path, providers=providers).get_providers()
    return next(_name(entry) for entry in providers if _name(entry) in _imported_get_available_providers())


@pytest.mark.skipif("AzureExecutionProvider" not in ort.get_available_providers(), reason="needs a second available provider")
@pytest.mark.parametrize(("wrong", "says"), [(_first_wish_or_cpu, "next one"), (_first_wish_only, "next one")])
def test_q1_rejects_answers_that_skip_from_a_failed_wish_to_the_cpu(wrong, says):
    outcome = nb05.q1.evaluate(wrong)
    assert outcome.status == "incorrect" and says in outcome.message and "AzureExecutionProvider" in outcome.message


@pytest.mark.parametrize(
    "wrong",
    [_filter_with_imported_name, _filter_with_module_level_import, _call_and_ignore],
    ids=["from-import in the function", "from-import at module level", "ort attribute"],
)
def test_q1_rejects_the_wish_filter_through_any_binding_of_get_available_providers(wrong):
    outcome = nb05.q1.evaluate(wrong)
    assert outcome.status == "incorrect" and "get_available_providers() lists" in outcome.message
    assert ort.get_available_providers is _imported_get_available_providers  # every binding restored


def test_q1_leaves_get_available_providers_as_it_found_it():
    before = ort.get_available_providers()
    assert nb05.q1.evaluate(_filter_with_module_level_import).status == "incorrect"
    assert nb05.q1.evaluate(nb05.q1.reference_answer()).status == "correct"
    assert ort.get_available_providers() == before and ort.get_available_providers is _imported_get_available_providers


def test_q1_patches_nothing_inside_onnxruntime_capi():
    """The staged GPU build rebinds public names only: ORT's private modules keep their own functions."""
    import sys

    capi_functions = {
        (name, key): value
        for name, module in list(sys.modules.items())
        if name.startswith("onnxruntime.capi")
        for key, value in list(vars(module).items())
        if callable(value)
    }
    seen_changed = []

    def reference_that_inspects(path, providers):
        seen_changed.extend((name, key) for (name, key), value in capi_functions.items() if vars(sys.modules[name]).get(key) is not value)
        return ort.InferenceSession(path, providers=providers).get_providers()[0]

    assert nb05.q1.evaluate(reference_that_inspects).status == "correct"
    assert seen_changed == []


def _digits_cnn():
    from labsupport.models.digits_cnn import ensure_digits_cnn

    return ensure_digits_cnn()


def test_q3_rejects_options_that_choose_providers_themselves():
    added = nb05.q3.reference_answer()
    added.add_provider("CPUExecutionProvider", {})
    policy = nb05.q3.reference_answer()
    policy.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.PREFER_CPU)
    for answer in (added, policy):
        outcome = nb05.q3.evaluate(answer)
        assert outcome.status == "incorrect" and "choose providers themselves" in outcome.message, outcome.message
        with pytest.raises(Exception, match="fallback"):  # ORT refuses every session opened from them
            ort.InferenceSession(str(_digits_cnn()), sess_options=answer)


def _providers_ort_did_not_warn_about(path, providers):
    """The misconception "ORT warns about any provider it cannot start": it does not (a listed GPU provider, a plugin by name)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ort.InferenceSession(path, providers=providers)
    names = [entry[0] if isinstance(entry, tuple) else entry for entry in providers]
    warned = {name for name in names if any(f"'{name}'" in str(warning.message) for warning in caught)}
    return next(name for name in names if name not in warned)


def test_q1_rejects_trusting_the_warnings_of_ort_without_asking_the_session():
    outcome = nb05.q1.evaluate(_providers_ort_did_not_warn_about)
    assert outcome.status == "incorrect" and "without calling get_providers()" in outcome.message, outcome.message


def test_q3_accepts_the_reference_because_ort_refuses_the_fallback():
    assert "fallback to CPU EP has been explicitly disabled" in str(_fallback_refusal())
    assert nb05.q3.evaluate(nb05.q3.reference_answer()).status == "correct"


def _fallback_refusal():
    options = nb05.q3.reference_answer()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(str(_digits_cnn()), sess_options=options)
    except Exception as error:
        return error
    raise AssertionError("the reference options let a session run with the CPU fallback disabled")


def test_q2_count_message_only_for_the_op_that_runs_most_often():
    def start_times(path):
        from collections import Counter

        totals = Counter()
        for event in json.loads(Path(path).read_text(encoding="utf-8")):
            if event["cat"] == "Node":
                totals[event["args"]["op_name"]] += event["ts"]
        return totals.most_common(1)[0][0]

    outcome = nb05.q2.evaluate(start_times)
    assert outcome.status == "incorrect" and "'ts'" in outcome.message and "'dur'" in outcome.message


def _defensive(path, providers):
    """Right for every model, but turns ORT's refusal of a broken file into a provider name."""
    try:
        return ort.InferenceSession(path, providers=providers).get_providers()[0]
    except Exception:
        return "CPUExecutionProvider"


def test_q1_rejects_a_name_returned_for_a_file_ort_cannot_load_and_says_so():
    outcome = nb05.q1.evaluate(_defensive)
    assert outcome.status == "incorrect", outcome.message
    assert "a file ORT cannot load" in outcome.message and "let the session's error propagate" in outcome.message
    assert "never opened a session" not in outcome.message


def _device_name(path, providers):
    ort.InferenceSession(path, providers=providers).get_providers()
    return ort.get_device()  # "CPU": a device, not a provider


def _last_of_the_session(path, providers):
    return ort.InferenceSession(path, providers=providers).get_providers()[-1]


def _reversed_wishes(path, providers):
    return ort.InferenceSession(path, providers=list(reversed(providers))).get_providers()[0]


def test_q1_says_that_a_device_name_is_no_provider_name():
    outcome = nb05.q1.evaluate(_device_name)
    assert outcome.status == "incorrect" and "not the name of an execution provider" in outcome.message, outcome.message
    assert "not available here" not in outcome.message


@pytest.mark.skipif("AzureExecutionProvider" not in ort.get_available_providers(), reason="needs a second available provider")
@pytest.mark.parametrize("wrong", [_last_of_the_session, _reversed_wishes], ids=["last provider the session got", "wishes reversed"])
def test_q1_rejects_the_wrong_end_of_a_list(wrong):
    outcome = nb05.q1.evaluate(wrong)
    assert outcome.status == "incorrect" and "the session's primary provider is" in outcome.message, outcome.message


def _runs(path):
    """The kernel events of each run: a model_run event spans its run."""
    events = json.loads(Path(path).read_text(encoding="utf-8"))
    runs = [e for e in events if e["name"] == "model_run"]
    return [[k for k in _kernels(path) if r["ts"] <= k["ts"] <= r["ts"] + r["dur"]] for r in runs]


def _op_times(run):
    totals = {}
    for event in run:
        totals[event["args"]["op_name"]] = totals.get(event["args"]["op_name"], 0) + event["dur"]
    return totals


def _per_run_statistic(statistic):
    def answer(path):
        runs = [_op_times(run) for run in _runs(path)]
        return max(runs[0], key=lambda op: statistic([run[op] for run in runs]))

    return answer


def _total_first_run_included(path):
    """The total over all runs: the statistic that a cold first run or an interrupted one decides."""
    return max(_op_times(_kernels(path)).items(), key=lambda item: item[1])[0]


def _hottest_of_the_median_run(path):
    """Another robust reading: the run of median length, and its hottest op."""
    runs = sorted(_runs(path), key=lambda run: sum(e["dur"] for e in run))
    middle = _op_times(runs[len(runs) // 2])
    return max(middle, key=middle.get)


def _median_split_by_repeated_nodes(path):
    """The median per run, with the runs split where a node name comes back (no model_run events used)."""
    import numpy as np

    runs, seen = [], set()
    for event in _kernels(path):
        if not runs or event["name"] in seen:
            runs.append({})
            seen = set()
        seen.add(event["name"])
        runs[-1][event["args"]["op_name"]] = runs[-1].get(event["args"]["op_name"], 0) + event["dur"]
    return max(runs[0], key=lambda op: np.median([run[op] for run in runs]))


def test_q2_rejects_the_total_that_the_cold_and_interrupted_runs_decide():
    outcome = nb05.q2.evaluate(_total_first_run_included)
    assert outcome.status == "incorrect" and "the total (or the mean) over all runs" in outcome.message, outcome.message
    assert "median over the runs" in outcome.message


@pytest.mark.parametrize(
    "right",
    [
        nb05.q2.reference_answer,
        lambda: _per_run_statistic(statistics.median),
        lambda: _hottest_of_the_median_run,
        lambda: _median_split_by_repeated_nodes,
    ],
    ids=["reference", "median per run", "hottest op of the median run", "runs split by repeated node names"],
)
def test_q2_accepts_robust_answers(right):
    outcome = nb05.q2.evaluate(right())
    assert outcome.status == "correct", outcome.message


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        (_per_run_statistic(max), "each op's slowest run"),
        (_per_run_statistic(min), "each op's fastest run"),
        (_per_run_statistic(lambda times: sum(times[1:])), "every run but the first"),
        (_per_run_statistic(lambda times: times[-1]), "the last run alone"),
    ],
    ids=["slowest run", "fastest run", "cold run left out", "last run"],
)
def test_q2_rejects_other_per_run_statistics(wrong, says):
    outcome = nb05.q2.evaluate(wrong)
    assert outcome.status == "incorrect" and says in outcome.message, outcome.message


def _mean_call(path):
    calls = {}
    for event in _kernels(path):
        calls.setdefault(event["args"]["op_name"], []).append(event["dur"])
    return max(calls, key=lambda op: statistics.mean(calls[op]))


def _node_with_the_largest_median(path):
    """The median per run taken per node, not per op type (which adds up its nodes)."""
    runs = _runs(path)
    per_node = {}
    for number, run in enumerate(runs):
        for event in run:
            times = per_node.setdefault((event["name"], event["args"]["op_name"]), [0] * len(runs))
            times[number] += event["dur"]
    return max(per_node, key=lambda node: statistics.median(per_node[node]))[1]


@pytest.mark.parametrize(
    ("wrong", "says"),
    [(_mean_call, "the mean call"), (_node_with_the_largest_median, "the node with the largest median")],
    ids=["mean call", "node, not op type"],
)
def test_q2_rejects_the_remaining_shortcuts_by_name(wrong, says):
    outcome = nb05.q2.evaluate(wrong)
    assert outcome.status == "incorrect" and says in outcome.message, outcome.message


def _options(value="1", key="session.disable_cpu_ep_fallback", intra=1, inter=0):
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = intra, inter
    options.add_session_config_entry(key, value)
    return options


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        (_options("true"), "must be '1' (got 'true')"),  # measured: with 'true' a session still falls back to the CPU
        (_options(key="session.disable_cpu_fallback"), "must be '1' (got None)"),  # a key ORT does not know
        (_options(intra=2, inter=1), "intra_op_num_threads must be 1"),  # the other pool set to 1
    ],
    ids=["'true' for '1'", "misspelt key", "inter instead of intra"],
)
def test_q3_rejects_a_switch_ort_does_not_read_and_the_wrong_pool(wrong, says):
    outcome = nb05.q3.evaluate(wrong)
    assert outcome.status == "incorrect" and says in outcome.message, outcome.message


def _q4_variant(*, threads=True, spinning_off=True, provider="session", feed_rows=2, feed_float=False, listed=False):
    """The reference answer of exercise 4 with one mistake switched on."""
    import numpy as np

    def open_and_prove(model_path, providers, wanted_threads):
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = wanted_threads
        if spinning_off:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(model_path, options, providers=providers)
        dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
        feeds = {
            i.name: np.ones([d if isinstance(d, int) else feed_rows for d in i.shape], np.float32 if feed_float else dtypes[i.type])
            for i in session.get_inputs()
        }
        results = session.run(None, feeds)
        first = providers[0]
        return {
            "session": session,
            "provider": session.get_providers()[0] if provider == "session" else (first[0] if isinstance(first, tuple) else first),
            "threads": wanted_threads,
            "spinning": False,
            "outputs": results if listed else dict(zip([o.name for o in session.get_outputs()], results, strict=True)),
        }

    return open_and_prove


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        (_q4_variant(threads=False), "(0: ORT's default"),
        (_q4_variant(spinning_off=False), "still spin"),
        (_q4_variant(provider="wish"), "not the wish"),
        (_q4_variant(feed_rows=1), "symbolic dimension"),
        (_q4_variant(feed_float=True), "your function failed on mixer.onnx"),
        (_q4_variant(listed=True), "should map every output name"),
        (lambda path, providers, threads: ort.InferenceSession(path, providers=providers), "expected a dict"),
        (nb05.q3.reference_answer(), "expected a function"),
    ],
    ids=[
        "default-threads",
        "spinning-on",
        "reports-the-wish",
        "one-row",
        "all-float-feeds",
        "outputs-as-list",
        "returns-session",
        "not-a-function",
    ],
)
def test_q4_wrong_answers_fail(wrong, says):
    outcome = nb05.q4.evaluate(wrong)
    assert outcome.status == "incorrect" and says in outcome.message, outcome.message


def test_q4_reads_the_threads_from_the_session_not_the_report():
    echoing = _q4_variant(threads=False)  # reports the thread count it was asked for, but never set it
    outcome = nb05.q4.evaluate(echoing)
    assert outcome.status == "incorrect" and "the session holds intra_op_num_threads=0" in outcome.message, outcome.message
    assert nb05.q4.evaluate(nb05.q4.reference_answer()).status == "correct"
