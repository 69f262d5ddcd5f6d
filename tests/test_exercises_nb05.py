"""Notebook 05's exercises: reference solutions pass, typical wrong answers fail, ____ is 'not attempted'."""

import json

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


def _longest_single_call(path):
    events = [e for e in json.load(open(path)) if e["cat"] == "Node"]
    return max(events, key=lambda e: e["dur"])["args"]["op_name"]


def _most_calls(path):
    from collections import Counter

    return Counter(e["args"]["op_name"] for e in json.load(open(path)) if e["cat"] == "Node").most_common(1)[0][0]


def _any_event(path):
    return max(json.load(open(path)), key=lambda e: e["dur"])["name"]


def _node_name(path):
    events = [e for e in json.load(open(path)) if e["cat"] == "Node"]
    return max(events, key=lambda e: e["dur"])["name"]


@pytest.mark.parametrize(
    ("wrong", "says"),
    [(_longest_single_call, "largest total"), (_most_calls, "count"), (_any_event, "session event"), (_node_name, "operator type")],
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
