"""Exercises of notebook 08: reference solutions pass, typical wrong answers fail, ____ is not attempted."""

from __future__ import annotations

import threading

from labsupport.course.data import load_digits
from labsupport.exercises import nb08
from labsupport.exercises.nb08 import q1, q2, q3


def test_q1_rejects_typical_wrong_bodies():
    images = load_digits().test.images
    cases = {
        "flattened": ({"inputs": images[:5].reshape(5, 64).tolist()}, "would answer 422.*shape \\[5, 64\\]"),
        "numpy inside": ({"inputs": images[:5]}, "JSON-serializable"),
        "one image": ({"inputs": images[0].tolist()}, "batch of 5.*one example"),
        "wrong field": ({"images": images[:5].tolist()}, "missing field 'inputs'"),
        "train images": ({"inputs": load_digits().train.images[:5].tolist()}, "does not hold the first 5 test images"),
    }
    for name, (body, reason) in cases.items():
        outcome = q1.evaluate(body)
        assert outcome.status == "incorrect", name
        assert __import__("re").search(reason, outcome.message), (name, outcome.message)


def test_q2_rejects_blocking_and_wrong_answers():
    async def blocking(session, feeds):
        return session.run(None, feeds)

    def not_async(session, feeds):
        return session.run(None, feeds)

    async def drops_result(session, feeds):
        import asyncio

        await asyncio.to_thread(session.run, None, feeds)
        return None

    outcome = q2.evaluate(blocking)
    assert outcome.status == "incorrect" and "event loop was blocked" in outcome.message
    assert q2.evaluate(q2.reference_answer()).status == "correct"
    assert q2.evaluate(not_async).status == "incorrect"
    assert "must return what session.run" in q2.evaluate(drops_result).message


def test_q2_catches_a_thread_whose_result_blocks_the_loop(monkeypatch):
    import concurrent.futures

    async def waits_on_the_loop(session, feeds):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(session.run, None, feeds).result()  # the model runs in a thread, but the loop waits for it

    monkeypatch.setattr(nb08, "LONGEST_RUN", 0.2)  # how long the stand-in model waits for heartbeats that cannot come
    outcome = q2.evaluate(waits_on_the_loop)
    assert outcome.status == "incorrect" and "event loop was blocked" in outcome.message


def test_q3_rejects_typical_wrong_rates():
    from labsupport.topics.loadgen import parse_metrics

    def only_500(text):
        samples = parse_metrics(text)
        total = sum(v for (n, lab), v in samples.items() if n == "onnx_service_requests_total" and dict(lab)["path"] == "/predict")
        bad = sum(
            v
            for (n, lab), v in samples.items()
            if n == "onnx_service_requests_total" and dict(lab)["path"] == "/predict" and dict(lab)["status"] == "500"
        )
        return bad / total if total else 0.0

    def every_path(text):
        samples = parse_metrics(text)
        total = sum(v for (n, lab), v in samples.items() if n == "onnx_service_requests_total")
        bad = sum(v for (n, lab), v in samples.items() if n == "onnx_service_requests_total" and int(dict(lab)["status"]) >= 400)
        return bad / total if total else 0.0

    def divides_by_zero(text):
        samples = parse_metrics(text)
        total = sum(v for (n, lab), v in samples.items() if n == "onnx_service_requests_total" and dict(lab)["path"] == "/predict")
        bad = sum(
            v
            for (n, lab), v in samples.items()
            if n == "onnx_service_requests_total" and dict(lab)["path"] == "/predict" and int(dict(lab)["status"]) >= 400
        )
        return bad / total

    for wrong in (only_500, every_path, divides_by_zero, 0.1):
        assert q3.evaluate(wrong).status == "incorrect", wrong
    assert 'path="/predict"' in q3.evaluate(every_path).message


def test_q1_rejects_the_body_as_json_text_with_a_true_reason():
    import json

    outcome = q1.evaluate(json.dumps({"inputs": load_digits().test.images[:5].tolist()}))
    assert outcome.status == "incorrect" and "already encoded as JSON text" in outcome.message
    assert "would answer" not in outcome.message  # the service would accept that text: the reason must not say otherwise


def test_q2_rejects_an_answer_that_runs_only_part_of_the_feeds():
    import asyncio

    async def first_row_only(session, feeds):
        return await asyncio.to_thread(session.run, None, {"image": feeds["image"][:1]})

    outcome = q2.evaluate(first_row_only)
    assert outcome.status == "incorrect" and "2 rows" in outcome.message


def test_q3_rejects_answers_that_also_count_the_latency_histogram():
    import re

    from labsupport.topics.loadgen import parse_metrics

    def path_filter_only(text):  # forgets that the latency histogram also carries path="/predict"
        total = errors = 0.0
        for (_name, labels), value in parse_metrics(text).items():
            labels = dict(labels)
            if labels.get("path") == "/predict":
                total += value
                errors += value if int(labels.get("status", 0)) >= 400 else 0
        return errors / total if total else 0.0

    def every_predict_line(text):
        lines = [line for line in text.splitlines() if 'path="/predict"' in line]
        total = sum(float(line.rsplit(" ", 1)[1]) for line in lines)
        errors = sum(float(line.rsplit(" ", 1)[1]) for line in lines if re.search(r'status="[45]\d\d"', line))
        return errors / total if total else 0.0

    for wrong in (path_filter_only, every_predict_line):
        outcome = q3.evaluate(wrong)
        assert outcome.status == "incorrect", wrong.__name__
        assert "latency histogram" in outcome.message
    assert q3.evaluate(q3.reference_answer()).status == "correct"


def test_q2_rejects_a_blocking_run_followed_by_a_threaded_one():
    import asyncio

    async def blocks_then_threads(session, feeds):
        session.run(None, feeds)  # a whole inference on the event loop
        return await asyncio.to_thread(session.run, None, feeds)

    outcome = q2.evaluate(blocks_then_threads)
    assert outcome.status == "incorrect" and "event loop was blocked" in outcome.message


def test_q2_rejects_a_sleep_that_blocks_the_loop_after_the_run():
    import asyncio

    async def sleeps_after(session, feeds):
        outputs = await asyncio.to_thread(session.run, None, feeds)
        threading.Event().wait(0.5)  # a blocking wait that is not time.sleep: the heartbeat's stall shows it
        return outputs

    outcome = q2.evaluate(sleeps_after)
    assert outcome.status == "incorrect" and "blocked for" in outcome.message


def test_q2_rejects_reordered_or_transposed_feeds_and_unknown_output_names():
    import asyncio

    async def rows_reversed(session, feeds):
        return await asyncio.to_thread(session.run, None, {"image": feeds["image"][::-1]})

    async def transposed(session, feeds):
        return await asyncio.to_thread(session.run, None, {"image": feeds["image"].transpose(0, 1, 3, 2)})

    async def unknown_output(session, feeds):
        return await asyncio.to_thread(session.run, ["no_such_output"], feeds)

    for wrong in (rows_reversed, transposed):
        outcome = q2.evaluate(wrong)
        assert outcome.status == "incorrect" and "same rows, same order" in outcome.message, wrong
    outcome = q2.evaluate(unknown_output)
    assert outcome.status == "incorrect" and "'no_such_output'" in outcome.message


def test_q2_accepts_the_threadpool_of_starlette_and_the_output_named():
    import asyncio

    from starlette.concurrency import run_in_threadpool

    async def starlette_pool(session, feeds):
        return await run_in_threadpool(session.run, None, feeds)

    async def named_output(session, feeds):
        return await asyncio.to_thread(session.run, [nb08.OUTPUT_NAME], feeds)

    for right in (starlette_pool, named_output):
        assert q2.evaluate(right).status == "correct", right


def test_q3_rejects_a_filter_on_the_post_method_instead_of_the_path():
    from labsupport.topics.loadgen import parse_metrics

    def every_post(text):  # POST /health (405) and POSTs to unknown paths (404) are not /predict requests
        total = errors = 0.0
        for (name, labels), value in parse_metrics(text).items():
            labels = dict(labels)
            if name == "onnx_service_requests_total" and labels.get("method") == "POST":
                total += value
                errors += value if int(labels["status"]) >= 400 else 0
        return errors / total if total else 0.0

    outcome = q3.evaluate(every_post)
    assert outcome.status == "incorrect" and 'path="/predict"' in outcome.message


def test_q2_rejects_a_150_ms_sleep_on_the_loop_around_a_threaded_run():
    import asyncio

    async def sleeps_first(session, feeds):
        threading.Event().wait(0.15)  # blocks every other request for 150 ms
        return await asyncio.to_thread(session.run, None, feeds)

    outcome = q2.evaluate(sleeps_first)
    assert outcome.status == "incorrect" and "event loop was blocked for 0.1" in outcome.message, outcome.message


def test_q2_rejects_feeds_cast_to_float64_as_onnx_runtime_does():
    import asyncio

    import numpy as np

    async def casts(session, feeds):
        return await asyncio.to_thread(session.run, None, {"image": feeds["image"].astype(np.float64)})

    outcome = q2.evaluate(casts)
    assert outcome.status == "incorrect" and "float64 array for the float32 input" in outcome.message, outcome.message


def test_q3_rejects_a_rounded_rate_and_a_hard_coded_list_of_error_statuses():
    from labsupport.topics.loadgen import parse_metrics

    def predict_counts(text):
        return {
            dict(labels)["status"]: value
            for (name, labels), value in parse_metrics(text).items()
            if name == "onnx_service_requests_total" and dict(labels)["path"] == "/predict"
        }

    def rounded(text):
        counts = predict_counts(text)
        total = sum(counts.values())
        return round(sum(v for s, v in counts.items() if int(s) >= 400) / total, 2) if total else 0.0

    def statuses_seen_in_the_notebook(text):  # 413, 422 and 500 only: a 400 (not JSON) or a 499 (client left) is missed
        counts = predict_counts(text)
        total = sum(counts.values())
        return sum(v for s, v in counts.items() if s in ("413", "422", "500")) / total if total else 0.0

    for wrong in (rounded, statuses_seen_in_the_notebook):
        outcome = q3.evaluate(wrong)
        assert outcome.status == "incorrect", wrong.__name__
        assert "the error rate is 0.428571" in outcome.message or "the error rate is 0.4," in outcome.message, outcome.message


def test_q3_rejects_a_list_of_error_statuses_that_misses_408_415_and_503():
    from labsupport.topics.loadgen import parse_metrics

    def five_error_statuses(text):  # 400, 413, 422, 499, 500: a body too slow (408), a gzip body (415), overload (503) missed
        counts = {
            dict(labels)["status"]: value
            for (name, labels), value in parse_metrics(text).items()
            if name == "onnx_service_requests_total" and dict(labels)["path"] == "/predict"
        }
        total = sum(counts.values())
        return sum(v for s, v in counts.items() if int(s) in {400, 413, 422, 499, 500}) / total if total else 0.0

    outcome = q3.evaluate(five_error_statuses)
    assert outcome.status == "incorrect" and "the error rate is 0.5," in outcome.message, outcome.message
    assert q3.evaluate(q3.reference_answer()).status == "correct"


def test_q2_rejects_a_short_sleep_on_the_loop_whatever_the_machine_load():
    import asyncio
    import time

    async def sleeps_40_ms_first(session, feeds):  # under the stall budget, still a block of every other request
        time.sleep(0.04)
        return await asyncio.to_thread(session.run, None, feeds)

    outcome = q2.evaluate(sleeps_40_ms_first)
    assert outcome.status == "incorrect" and "time.sleep(0.04) ran on the event loop" in outcome.message, outcome.message


def test_q2_accepts_a_callable_object_and_a_sleep_in_the_worker_thread():
    import asyncio
    import time

    class Infer:
        async def __call__(self, session, feeds):
            return await asyncio.to_thread(session.run, None, feeds)

    async def sleeps_in_the_thread(session, feeds):
        def run():
            time.sleep(0.001)  # a worker thread may sleep: the loop keeps running
            return session.run(None, feeds)

        return await asyncio.to_thread(run)

    for right in (Infer(), sleeps_in_the_thread):
        outcome = q2.evaluate(right)
        assert outcome.status == "correct", (right, outcome.message)


def test_q2_checks_an_answer_from_a_cell_of_a_jupyter_kernel_whose_event_loop_runs():
    """ipykernel 7 runs each cell inside its asyncio loop, where asyncio.run() raises: the checker must still judge."""
    import asyncio

    async def right(session, feeds):
        return await asyncio.to_thread(session.run, None, feeds)

    async def blocking(session, feeds):
        return session.run(None, feeds)

    async def from_a_running_loop():
        return q2.evaluate(right), q2.evaluate(blocking)

    accepted, refused = asyncio.run(from_a_running_loop())
    assert accepted.status == "correct", accepted.message
    assert refused.status == "incorrect" and "event loop was blocked" in refused.message


def test_q2_rejects_a_busy_wait_on_the_loop_for_its_own_future_without_hanging(monkeypatch):
    import asyncio
    import time

    async def polls_its_future(session, feeds):
        future = asyncio.get_running_loop().run_in_executor(None, session.run, None, feeds)
        give_up = time.monotonic() + 3  # the test's own bound, so that its thread ends; a learner's loop has none
        while not future.done() and time.monotonic() < give_up:  # the loop that would complete the future never runs
            time.sleep(0.001)
        return future.result()

    monkeypatch.setattr(nb08, "LONGEST_RUN", 0.2)
    monkeypatch.setattr(nb08, "LONGEST_CHECK", 1.0)
    sleep = time.sleep
    outcome = q2.evaluate(polls_its_future)
    assert outcome.status == "incorrect" and "had not returned" in outcome.message, outcome.message
    assert time.sleep is sleep
