"""Exercises of notebook 00 (how exercises work); q3 applies the recipe (train, export, run, check) to the wine data."""

from __future__ import annotations

import numpy as np

from labsupport.course.data import PIXEL_MAX, load_digits
from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer, expect_value, onnx_session, whole_number

# a bright image (its maximum is 16) and a faint one (maximum 8): dividing by the image's own maximum fails the second;
# odd pixels (1, 7, 15) catch an answer that halves first and so loses the last bit, (p // 2) / 8
SCALE_INPUTS = (
    np.array([[0, 8, 16], [4, 12, 2], [1, 7, 15]], dtype=np.uint8),
    np.array([[0, 4, 8]], dtype=np.uint8),
)
for _raw in SCALE_INPUTS:
    _raw.setflags(write=False)  # the answer gets a copy: an in-place answer cannot change what later checks feed


def _check_scale(scale) -> str:
    if not callable(scale):
        raise Incorrect(f"expected a function pixels -> array, got {type(scale).__name__}")
    for raw in SCALE_INPUTS:
        _check_scaled(raw, scale(raw.copy()))
    return "pixels 0..16 map to float32 0..1"


def _check_scaled(raw: np.ndarray, result: object) -> None:
    if result is None:
        raise Incorrect("your function returned None: return the scaled array (is the return statement missing?)")
    out = np.asarray(result)
    if not np.issubdtype(out.dtype, np.number):
        raise Incorrect(f"expected an array of numbers, got {type(result).__name__} of {out.dtype}")
    if out.shape != raw.shape:
        raise Incorrect(f"the output shape must equal the input's {raw.shape}, got {out.shape}")
    if not np.allclose(out, raw / PIXEL_MAX):
        row = next(i for i in range(len(raw)) if not np.allclose(out[i], raw[i] / PIXEL_MAX))
        gap = float(np.max(np.abs(out[row] - raw[row] / PIXEL_MAX)))
        shown = (
            f"for the row {raw[row].tolist()} it gave {_rounded(out[row])}, expected {_rounded(raw[row] / PIXEL_MAX)} "
            f"(largest difference {gap:.2g})"
        )
        if _rescaled_by_itself(raw, out, row):
            shown += f"; divide by the fixed maximum {PIXEL_MAX:g}, not by this image's (or row's) own maximum or range"
        raise Incorrect(f"pixels 0..{PIXEL_MAX:g} must map to 0..1: {shown}")
    if out.dtype != np.float32:
        container = "; a Python list has no float32 dtype, return a NumPy array" if isinstance(result, (list, tuple)) else ""
        raise Incorrect(f"the output must be float32 (what ONNX models take), got {out.dtype}{container}")


def _rescaled_by_itself(raw: np.ndarray, out: np.ndarray, row: int) -> bool:
    """Whether ``out[row]`` is ``raw[row]`` divided by the image's or the row's own maximum, or min-max rescaled by either."""
    pixels = raw.astype(np.float64)
    candidates = []
    for scope in (pixels, pixels[row]):
        low, high = scope.min(), scope.max()
        candidates += [pixels[row] / max(high, 1), (pixels[row] - low) / max(high - low, 1)]
    return any(np.allclose(out[row], candidate) for candidate in candidates)


def _rounded(values: np.ndarray) -> str:
    """The values to float32's 7 significant digits: a difference the check sees is a difference the message shows."""
    return "[" + ", ".join(f"{float(v):.7g}" for v in values) + "]"


COUNTED_DIGIT = 8  # the one digit whose test count no other digit shares


def _other_digits_reason(per_digit: np.ndarray, count: int) -> str:
    digits = ", ".join(str(digit) for digit in np.flatnonzero(per_digit == count))
    return f"{count} is the test count of another digit ({digits}); count the {COUNTED_DIGIT}s"


def _check_count(count) -> str:
    digits = load_digits()
    per_digit = np.bincount(digits.test.labels, minlength=10)
    truth = int(per_digit[COUNTED_DIGIT])
    others = [(int(n), _other_digits_reason(per_digit, int(n))) for n in sorted(set(per_digit.tolist()) - {truth})]
    expect_value(
        whole_number(count, "count"),
        truth,
        mistakes=[
            (
                int(np.sum(digits.train.labels == COUNTED_DIGIT)),
                "that is the count in the *train* split; the question asks about the test split",
            ),
            (len(digits.test.labels), "that is the size of the whole test split; count only one digit"),
            *others,
        ],
        wrong=f"{count} is not the number of {COUNTED_DIGIT}s in the test split",
    )
    return f"{truth} test images show an {COUNTED_DIGIT}"


# q3: the recipe on another bundled data set: 178 wines, 13 measurements, 3 cultivars
WINE_INPUT = "measurements"
WINE_FEATURES = 13
WINE_MIN_ACCURACY = 0.9  # any reasonable classifier fitted on wine is above it; one fitted on other data is not


def _wine() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_wine

    data, target = load_wine(return_X_y=True)
    return data.astype(np.float32), target


def _check_wine(answer) -> str:
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        raise Incorrect(f"expected a pair (fitted scikit-learn model, ONNX model), got {type(answer).__name__}")
    estimator, onnx_model = answer
    if not hasattr(estimator, "predict"):
        raise Incorrect(f"the first item must be the fitted scikit-learn classifier, got {type(estimator).__name__}")
    if not hasattr(estimator, "predict_proba"):
        raise Incorrect(
            f"{type(estimator).__name__} has no predict_proba(), so there are no probabilities to export: "
            "choose a classifier that gives them (LogisticRegression, RandomForestClassifier, ...)"
        )
    if getattr(estimator, "n_features_in_", None) != WINE_FEATURES:
        seen = getattr(estimator, "n_features_in_", "no")
        raise Incorrect(f"the classifier was fitted on {seen} features; the wine data has {WINE_FEATURES} (load_wine)")
    X, y = _wine()
    accuracy = float((estimator.predict(X) == y).mean())
    if accuracy < WINE_MIN_ACCURACY:
        raise Incorrect(
            f"the classifier gets {accuracy:.0%} of the raw wine measurements right: fit it on load_wine's data and "
            "target, and put any scaling inside the model (make_pipeline(StandardScaler(), ...)) so that the ONNX file "
            "scales the raw rows too"
        )
    session = onnx_session(onnx_model, "the ONNX model (a ModelProto or a .onnx path)")
    _wine_signature(session)
    with blame_answer("ONNX Runtime fails on the wine data"):
        labels, probabilities = session.run(None, {WINE_INPUT: X})[:2]
    if not (labels == estimator.predict(X)).all():
        raise Incorrect("the ONNX labels differ from your classifier's predict(): export the classifier you return")
    if not np.allclose(probabilities, estimator.predict_proba(X), rtol=1e-4, atol=1e-5):
        raise Incorrect("the ONNX probabilities differ from predict_proba() beyond atol 1e-5: export the classifier you return")
    return f"the ONNX model agrees with your classifier on all {len(X)} wines ({accuracy:.0%} right)"


def _wine_signature(session) -> None:
    """``Incorrect`` unless the model takes float32 [N, 13] named ``measurements`` and returns label and probabilities."""
    inputs = session.get_inputs()
    if [i.name for i in inputs] != [WINE_INPUT]:
        raise Incorrect(
            f"the model must have one input named {WINE_INPUT!r}, it has {[i.name for i in inputs]}: name it with "
            f"initial_types=[({WINE_INPUT!r}, FloatTensorType([None, {WINE_FEATURES}]))]"
        )
    if inputs[0].type != "tensor(float)":
        raise Incorrect(f"the input must be float32 (tensor(float)), it is {inputs[0].type}: use FloatTensorType")
    if len(inputs[0].shape) != 2 or inputs[0].shape[1] != WINE_FEATURES or isinstance(inputs[0].shape[0], int):
        raise Incorrect(f"the input shape must be [None, {WINE_FEATURES}] (any number of rows), it is {inputs[0].shape}")
    outputs = session.get_outputs()
    if len(outputs) < 2 or outputs[1].type != "tensor(float)":
        raise Incorrect(
            f"the second output must be the probabilities as one float32 array, it is {outputs[1].type if len(outputs) > 1 else 'missing'}: "
            "pass options={'zipmap': False} to to_onnx, as the recipe does"
        )


q1 = Exercise(
    1,
    "scale raw pixels",
    _check_scale,
    hint="Raw digit pixels run from 0 to 16. Divide by 16 and convert with .astype(np.float32).",
    solution_code="""
        import numpy as np

        def answer(pixels):
            return (np.asarray(pixels) / 16.0).astype(np.float32)
    """,
)

q2 = Exercise(
    2,
    "count a class in the test split",
    _check_count,
    hint="load_digits().test.labels is an array of class numbers; compare it with 8 and sum.",
    solution_code="""
        from labsupport.course.data import load_digits

        answer = int((load_digits().test.labels == 8).sum())
    """,
)

q3 = Exercise(
    3,
    "the recipe on the wine data",
    _check_wine,
    hint=(
        "sklearn.datasets.load_wine(return_X_y=True) gives the data; fit a classifier on it as float32. To name the input, "
        "pass initial_types=[('measurements', FloatTensorType([None, 13]))] to to_onnx instead of X[:1] "
        "(from skl2onnx.common.data_types import FloatTensorType), and keep options={'zipmap': False}."
    ),
    solution_code="""
        import numpy as np
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType
        from sklearn.datasets import load_wine
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        X, y = load_wine(return_X_y=True)
        wine_model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X.astype(np.float32), y)
        wine_onnx = to_onnx(
            wine_model, initial_types=[("measurements", FloatTensorType([None, 13]))], options={"zipmap": False}
        )
        answer = (wine_model, wine_onnx)
    """,
)

EXERCISES = [q1, q2, q3]
