"""Notebook 05's exercises: reference solutions pass, typical wrong answers fail, ____ is 'not attempted'."""

import json
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
    monkeypatch.setattr(nb05, "_other_available_provider", lambda: None)
    outcome = nb05.q1.evaluate(lambda path, providers: "CPUExecutionProvider")
    assert outcome.status == "incorrect" and "never opened a session" in outcome.message
    assert nb05.q1.evaluate(nb05.q1.reference_answer()).status == "correct"


def test_q1_case_lists_put_a_provider_first_that_the_session_does_not_use():
    lists = nb05._priority_lists()
    missing = nb05._unavailable_provider()
    assert lists[0] == [missing, "CPUExecutionProvider"] and lists[1][0] == "CPUExecutionProvider"
    if "AzureExecutionProvider" in ort.get_available_providers():  # every PyPI build: a non-CPU primary provider
        assert ["AzureExecutionProvider", "CPUExecutionProvider"] in lists


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
        (_longest_single_call, "largest total"),
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
