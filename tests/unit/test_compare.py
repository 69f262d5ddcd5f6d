import math

import numpy as np
import pytest

from labsupport.course.compare import ParityError, compare, decade_bound, softmax


def test_close_outputs_pass_with_stable_text():
    scores = np.random.default_rng(0).normal(size=(50, 10))
    report = compare(scores, scores + 3e-7, name="ort vs torch")
    assert report.passed and report.argmax_agreement == 1.0
    assert math.isclose(report.max_abs, 3e-7, rel_tol=0.1)
    # the printed verdict carries no CPU-dependent digits; the exact figures are in details
    assert str(report) == "ort vs torch: 500 values within tolerance, argmax agreement 100.00% -> OK (atol=1e-05, rtol=0.0001)"
    assert str(compare(scores, scores + 4e-6, name="ort vs torch")) == str(report)
    assert report.details.startswith("ort vs torch: max abs err 3.00e-07, max rel err ")


def test_out_of_tolerance_raises_with_figures():
    with pytest.raises(ParityError, match=r"max abs err <= 1e-02.*FAILED.*exact max abs err 5.000e-03 at index \(1,\)"):
        compare([1.0, 2.0, 3.0], [1.0, 2.005, 3.0])


def test_a_tie_within_tolerance_is_no_disagreement():
    # an all-zero ReLU row, and two near-equal scores swapped within tolerance
    assert compare(np.zeros((1, 3)), np.array([[0, 1e-7, 0]])).argmax_agreement == 1.0
    assert compare([[1.0, 1.0000001]], [[1.0000001, 1.0]]).passed
    report = compare(np.array([[0.5, 0.5000001], [1.0, 0.0]]), np.array([[0.5000001, 0.5], [1.0, 0.0]]))
    assert report.passed and report.argmax_agreement == 1.0


def test_argmax_disagreement_counts_rows_that_pick_a_worse_class():
    expected = np.array([[0.4, 0.6], [1.0, 0.0]])
    actual = np.array([[0.6, 0.4], [1.0, 0.0]])
    with pytest.raises(ParityError, match=r"argmax agreement 50\.00%"):
        compare(expected, actual)
    report = compare(expected, actual, min_agreement=0.5, raise_on_failure=False)
    assert report.argmax_agreement == 0.5 and not report.passed  # the values are out of tolerance too


def test_classifier_false_prints_no_agreement_for_a_weight_matrix():
    weights = np.random.default_rng(1).normal(size=(8, 8))
    assert "argmax" not in str(compare(weights, weights, classifier=False))


def test_no_raise_mode_and_non_classifier():
    report = compare(np.zeros((3, 4)), np.ones((3, 4)), raise_on_failure=False, classifier=False)
    assert not report.passed and report.argmax_agreement is None and "FAILED" in str(report)


def test_nan_is_never_within_tolerance():
    with pytest.raises(ParityError):
        compare([1.0, 2.0], [1.0, float("nan")])


def test_bad_inputs_get_clear_errors():
    with pytest.raises(ParityError, match=r"shapes differ: expected \(2,\), got \(3,\)"):
        compare([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="empty"):
        compare([], [])
    with pytest.raises(TypeError, match="numeric array-like"):
        compare(["a"], ["b"])


@pytest.mark.parametrize(
    ("value", "text"), [(0.0, "0"), (3e-7, "1e-06"), (1e-6, "1e-06"), (0.5, "1e+00"), (12.0, "1e+02"), (math.inf, "inf")]
)
def test_decade_bound(value, text):
    assert decade_bound(value) == text


def test_softmax_rows_sum_to_one_and_survive_large_logits():
    logits = np.array([[0.0, np.log(3.0)], [1000.0, 1000.0]])
    np.testing.assert_allclose(softmax(logits), [[0.25, 0.75], [0.5, 0.5]])
    np.testing.assert_allclose(softmax(logits.T, axis=0), [[0.25, 0.5], [0.75, 0.5]])
    assert softmax([1.0, 2.0]).dtype == np.float64
