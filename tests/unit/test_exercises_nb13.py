"""Exercises of notebook 13: typical wrong answers fail their checker (the reference solutions: tests/integration/test_all_exercises.py)."""

from __future__ import annotations

import hashlib
import random

from labsupport.exercises.nb13 import VERSIONS, q1, q2


def test_q1_rejects_routes_that_disagree_with_the_service():
    def python_hash(key, percent):
        return "challenger" if key and hash(key) % 100 < percent else "champion"

    def coin(key, percent):
        return "challenger" if random.random() * 100 < percent else "champion"

    def inverted(key, percent):
        bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % 100
        return "champion" if bucket < percent else "challenger"

    def little_endian(key, percent):
        bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little") % 100
        return "challenger" if key and bucket < percent else "champion"

    def version_names(key, percent):
        return "3"

    for wrong in (python_hash, coin, inverted, little_endian, version_names, "challenger"):
        assert q1.evaluate(wrong).status == "incorrect", wrong
    assert "sha256" in q1.evaluate(python_hash).message


def test_q2_rejects_wrong_routing_documents():
    good = {"versions": VERSIONS, "aliases": {"champion": "2", "challenger": "3"}, "challenger_percent": 25, "shadow": "3"}
    cases = {
        "a fraction": ({**good, "challenger_percent": 0.25}, "whole number"),
        "no shadow": ({k: v for k, v in good.items() if k != "shadow"}, "shadow"),
        "aliases swapped": ({**good, "aliases": {"champion": "3", "challenger": "2"}}, "version 2 stays champion"),
        "unknown version": ({**good, "aliases": {"champion": "2", "challenger": "4"}}, "would refuse"),
        "percent too high": ({**good, "challenger_percent": 250}, "would refuse"),
        "not a dict": ([good], "would refuse"),
    }
    for name, (document, reason) in cases.items():
        outcome = q2.evaluate(document)
        assert outcome.status == "incorrect", name
        assert reason in outcome.message, (name, outcome.message)


def test_q2_judges_the_document_as_the_service_receives_it():
    import numpy as np

    good = {"versions": VERSIONS, "aliases": {"champion": "2", "challenger": "3"}, "challenger_percent": 25, "shadow": "3"}
    cases = {
        # an invented field: the service refuses it (ignored, a typo would leave the split at 0)
        "invented field": ({**good, "shadow_percent": 75}, "would refuse it: unknown field(s) 'shadow_percent'"),
        # a typo: the service would read no percentage at all and turn the canary off
        "typo": ({k: v for k, v in good.items() if k != "challenger_percent"} | {"challenger_precent": 25}, "challenger_precent"),
        # int version names and alias values: over JSON the keys become strings and the values stay ints
        "ints": (
            {
                "versions": {2: VERSIONS["2"], 3: VERSIONS["3"]},
                "aliases": {"champion": 2, "challenger": 3},
                "challenger_percent": 25,
                "shadow": 3,
            },
            "would refuse",
        ),
        # a numpy integer cannot be sent as JSON
        "numpy int": ({**good, "challenger_percent": np.int64(25)}, "must be JSON"),
    }
    for name, (document, reason) in cases.items():
        outcome = q2.evaluate(document)
        assert outcome.status == "incorrect", name
        assert reason in outcome.message, (name, outcome.message)
    assert q2.evaluate(good).status == "correct"
    assert q2.evaluate({**good, "versions": {"3": VERSIONS["3"], "2": VERSIONS["2"]}}).status == "correct"  # order is free


def test_q3_rejects_gates_that_fail_open_or_miss_a_rule():
    from labsupport.exercises.nb13 import q3

    def fail_open(read, candidate):  # an unreadable champion treated as "no champion"
        try:
            champion = read()
        except Exception:
            champion = None
        return candidate >= 0.9 and (champion is None or candidate >= champion - 0.01)

    def crashes(read, candidate):  # lets the store's error through
        champion = read()
        return candidate >= 0.9 and (champion is None or candidate >= champion - 0.01)

    def catches_one_error(read, candidate):  # only the store's error: a missing record still crashes
        try:
            champion = read()
        except RuntimeError:
            return False
        return candidate >= 0.9 and (champion is None or candidate >= champion - 0.01)

    def no_floor(read, candidate):
        try:
            champion = read()
        except Exception:
            return False
        return champion is None or candidate >= champion - 0.01

    def points_not_fractions(read, candidate):  # "1 point" read as 1.0
        try:
            champion = read()
        except Exception:
            return False
        return candidate >= 0.9 and (champion is None or candidate >= champion - 1)

    def no_champion_rule(read, candidate):
        try:
            read()
        except Exception:
            return False
        return candidate >= 0.9

    def yes_no(read, candidate):
        return "yes"

    cases = {
        fail_open: "could not be read",
        crashes: "a gate that fails closed answers False",
        catches_one_error: "raised KeyError",
        no_floor: "below the 90% floor",
        points_not_fractions: "1.01 points below",
        no_champion_rule: "1.01 points below",
        yes_no: "True or False",
    }
    for wrong, reason in cases.items():
        outcome = q3.evaluate(wrong)
        assert outcome.status == "incorrect", wrong.__name__
        assert reason in outcome.message, (wrong.__name__, outcome.message)
    assert q3.evaluate(q3.reference_answer()).status == "correct"


def _gate(floor_ok, drop_ok, errors=(Exception,)):
    """A may_promote answer built from a floor rule and a drop rule (each wrong answer below gets one of them wrong)."""

    def may_promote(read, candidate):
        try:
            champion = read()
        except errors:
            return False
        return floor_ok(candidate) and (champion is None or drop_ok(champion, candidate))

    return may_promote


def test_q3_rejects_gates_with_a_wrong_boundary_or_rule():
    from labsupport.exercises.nb13 import q3

    def floor(candidate):
        return candidate >= 0.9

    def drop(champion, candidate):
        return candidate >= champion - 0.01

    cases = {
        "strict floor (c > 0.9)": (_gate(lambda c: c > 0.9, drop), "exactly at the 90% floor"),
        "a 1% relative drop (c >= 0.99 * champion)": (_gate(floor, lambda ch, c: c >= 0.99 * ch), "not 1% of the champion"),
        "a 1.5-point budget (0.0149)": (_gate(floor, lambda ch, c: c >= ch - 0.0149), "1.01 points below"),
        "a 1.04-point budget": (_gate(floor, lambda ch, c: c >= ch - 0.0104), "1.01 points below"),
        "floor 0.8995": (_gate(lambda c: c >= 0.8995, drop), "below the 90% floor"),
        "floor 0.89995": (_gate(lambda c: c >= 0.89995, drop), "0.004 points below the 90% floor"),
        "catches only RuntimeError and KeyError": (_gate(floor, drop, (RuntimeError, KeyError)), "raised OSError"),
        "catches only the store's errors and OSError": (_gate(floor, drop, (RuntimeError, KeyError, OSError)), "raised ValueError"),
        "returns 1 and 0": (lambda read, c: int(_gate(floor, drop)(read, c)), "True or False"),
    }
    for name, (wrong, reason) in cases.items():
        outcome = q3.evaluate(wrong)
        assert outcome.status == "incorrect", name
        assert reason in outcome.message, (name, outcome.message)


def test_q3_accepts_numpy_booleans_and_the_reference():
    import numpy as np

    from labsupport.exercises.nb13 import q3

    def numpy_gate(read, candidate):  # np.float64 comparisons give np.True_ / np.False_: right by value
        try:
            champion = read()
        except Exception:
            return np.False_
        return np.float64(candidate) >= 0.9 and (champion is None or np.float64(candidate) >= champion - 0.01)

    assert isinstance(numpy_gate(lambda: 0.99, 0.5), np.bool_)
    assert q3.evaluate(numpy_gate).status == "correct", q3.evaluate(numpy_gate).message
    assert q3.evaluate(q3.reference_answer()).status == "correct"


def test_q3_accepts_the_budget_written_either_way():
    """No case sits exactly on the 1-point boundary, where champion - candidate differs from 0.01 in floats."""
    from labsupport.exercises.nb13 import q3

    def floor(candidate):
        return candidate >= 0.9

    for name, drop in {
        "champion - candidate <= 0.01": lambda ch, c: ch - c <= 0.01,
        "candidate > champion - 0.01": lambda ch, c: c > ch - 0.01,
    }.items():
        outcome = q3.evaluate(_gate(floor, drop))
        assert outcome.status == "correct", (name, outcome.message)


def _sha_route(key_of=lambda key: key, encoding="utf-8", digits=slice(0, 4), below=lambda bucket, percent: bucket < percent):
    """A route(key, percent) built like the service's, with one part changed (the wrong answers below change one each)."""

    def route(key, percent):
        if not key or not percent:
            return "champion"
        bucket = int.from_bytes(hashlib.sha256(key_of(key).encode(encoding, "replace")).digest()[digits], "big") % 100
        return "challenger" if below(bucket, percent) else "champion"

    return route


def test_q1_rejects_routes_that_change_the_key_before_hashing():
    """The service hashes the key as sent: 'User-7' and 'user-7' are different users (buckets 13 and 40)."""
    import unicodedata

    cases = {
        "lower-cased": _sha_route(key_of=lambda key: key.strip().lower()),
        "lower-cased only": _sha_route(key_of=str.lower),
        "stripped only": _sha_route(key_of=str.strip),
        "NFC-normalised": _sha_route(key_of=lambda key: unicodedata.normalize("NFC", key)),
    }
    for name, wrong in cases.items():
        outcome = q1.evaluate(wrong)
        assert outcome.status == "incorrect", name
        assert "the service sends that key to" in outcome.message and "hashed exactly as sent" in outcome.message, (name, outcome.message)


def test_q1_rejects_three_more_wrong_routes_and_accepts_an_equivalent_one():
    cases = {
        "bucket <= percent (one bucket too many)": _sha_route(below=lambda bucket, percent: bucket <= percent),
        "latin-1 instead of UTF-8 (differs on non-ASCII keys only)": _sha_route(encoding="latin-1"),
        "the last 4 bytes of the digest": _sha_route(digits=slice(-4, None)),
    }
    for name, wrong in cases.items():
        assert q1.evaluate(wrong).status == "incorrect", name

    def hex_prefix(key, percent):  # the first 8 hex digits are the first 4 bytes, big-endian: the same bucket
        bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 100
        return "challenger" if key and bucket < percent else "champion"

    assert q1.evaluate(hex_prefix).status == "correct"


def test_q2_never_says_the_service_accepts_a_sha256_nobody_computed():
    good = {"versions": VERSIONS, "aliases": {"champion": "2", "challenger": "3"}, "challenger_percent": 25, "shadow": "3"}
    zeros = {name: {"path": path, "sha256": "0" * 64} for name, path in VERSIONS.items()}
    one = {**VERSIONS, "3": {"path": VERSIONS["3"], "sha256": "ab" * 32}}
    for versions in (zeros, one):
        outcome = q2.evaluate({**good, "versions": versions})
        assert outcome.status == "incorrect" and "refuses the whole document when one differs" in outcome.message, outcome.message
        assert "accepts" not in outcome.message
    paths_as_dicts = {name: {"path": path} for name, path in VERSIONS.items()}  # the shape section 5 sends, without digests
    assert q2.evaluate({**good, "versions": paths_as_dicts}).status == "correct"
    assert "refuses the document if one is missing" in q2.evaluate(good).message


def test_q2_rejects_three_more_wrong_documents():
    good = {"versions": VERSIONS, "aliases": {"champion": "2", "challenger": "3"}, "challenger_percent": 25, "shadow": "3"}
    cases = {
        "the shadow's share as the split (75)": ({**good, "challenger_percent": 75}, "25"),
        "the champion shadowing itself": ({**good, "shadow": "2"}, '"shadow": "3"'),
        "a third alias": ({**good, "aliases": {**good["aliases"], "previous": "2"}}, "would refuse"),
    }
    for name, (document, reason) in cases.items():
        outcome = q2.evaluate(document)
        assert outcome.status == "incorrect" and reason in outcome.message, (name, outcome.message)
