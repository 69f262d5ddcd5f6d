"""Exercises of notebook 04 (converting scikit-learn pipelines with skl2onnx).

The learner's answer is an ONNX model (a ``ModelProto`` or the path of a .onnx file); the
checkers run it with ONNX Runtime and compare labels and probabilities with scikit-learn.
"""

from __future__ import annotations

import copy
from functools import lru_cache

import numpy as np

from labsupport.course.compare import ParityError, compare
from labsupport.course.data import load_digits
from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer, onnx_session

_WHAT = "an ONNX ModelProto (what to_onnx returns) or a .onnx path"

PROBABILITY_ATOL = 1e-5
TABLE_ROWS = 400
TRAIN_ROWS = 300


@lru_cache(maxsize=1)
def _reference_pipeline():
    """The checker's own fitted digits pipeline; the learner only ever sees copies of it."""
    from labsupport.models.digits_sklearn import digits_logreg, fit_on_digits

    return fit_on_digits(digits_logreg())


@lru_cache(maxsize=1)
def _reference_table():
    """The checker's own (table, churned, fitted mixed pipeline); the learner only ever sees copies of it."""
    from labsupport.models.digits_sklearn import make_mixed_table, mixed_pipeline

    frame, churned = make_mixed_table(TABLE_ROWS)
    model = mixed_pipeline().fit(frame[:TRAIN_ROWS], churned[:TRAIN_ROWS])
    return frame, churned, model


def exercise_pipeline():
    """A fresh copy of the fitted digits pipeline (StandardScaler + LogisticRegression) that exercise 1 converts.

    A copy on every call: refitting or changing it cannot change what the checker compares with.
    """
    return copy.deepcopy(_reference_pipeline())


def exercise_table():
    """(table, churned, fitted mixed pipeline): fresh copies of the customer table and of the pipeline fitted on its first 300 rows (exercise 2)."""
    return copy.deepcopy(_reference_table())


def _check_outputs(session, feeds, model, features) -> str:
    outputs = session.get_outputs()
    if len(outputs) < 2:
        raise Incorrect(f"expected two outputs (label, probabilities), found {[o.name for o in outputs]}")
    if not outputs[1].type.startswith("tensor("):
        raise Incorrect(
            f"the probabilities come out as {outputs[1].type} (ZipMap's list of dicts); "
            "convert with options={'zipmap': False} to get a plain (N, classes) tensor"
        )
    if len(outputs[1].shape) != 2:
        raise Incorrect(
            f"the second output should be the (N, classes) probabilities, found {outputs[1].name} with shape {outputs[1].shape} "
            f"(outputs {[o.name for o in outputs]}); convert with options={{'zipmap': False}}"
        )
    names = [o.name for o in outputs[:2]]  # extra outputs (class labels) are fine
    _require_table_shapes(session)
    first_row = {name: value[:1] for name, value in feeds.items()}
    with blame_answer("running the model on a single row failed (is the batch dimension None?)"):
        session.run(names, first_row)
    with blame_answer("running the model failed"):
        labels, probabilities = session.run(names, feeds)
    expected_labels = model.predict(features)
    if np.shape(labels) != expected_labels.shape:
        raise Incorrect(f"the labels have shape {np.shape(labels)}; scikit-learn gives {expected_labels.shape}")
    agreement = float(np.mean(np.asarray(labels) == expected_labels))
    if agreement < 1.0:
        raise Incorrect(f"the labels agree with scikit-learn on only {agreement:.1%} of rows (expected 100%)")
    try:
        compare(model.predict_proba(features), probabilities, atol=PROBABILITY_ATOL, rtol=0, name="probabilities")
    except ParityError as error:
        raise Incorrect(f"the probabilities differ from scikit-learn's: {error}") from None
    return f"labels 100% equal, probabilities within {PROBABILITY_ATOL:g} of scikit-learn's"


def _require_table_shapes(session) -> None:
    """Every input is 2-D with a free batch dimension: (N, columns), or (N, 1) for one column of a table."""
    for model_input in session.get_inputs():
        shape = model_input.shape
        if len(shape) != 2:
            raise Incorrect(
                f"input {model_input.name!r} has shape {shape}: declare it 2-D, [None, width] (one column of a table is [None, 1])"
            )
        if isinstance(shape[0], int):
            raise Incorrect(
                f"input {model_input.name!r} has a fixed batch dimension of {shape[0]} rows: declare None, "
                "so that the model takes any number of rows"
            )


def _check_plain_tensor(answer) -> str:
    session = onnx_session(answer, _WHAT)
    inputs = session.get_inputs()
    if len(inputs) != 1 or inputs[0].type != "tensor(float)" or list(inputs[0].shape[1:]) != [64]:
        found = [(i.name, i.type, i.shape) for i in inputs]
        raise Incorrect(f"expected one float32 input of shape (N, 64), found {found}")
    test = load_digits().test
    return _check_outputs(session, {inputs[0].name: test.flat}, _reference_pipeline(), test.flat)


def _check_table(answer) -> str:
    from labsupport.models.digits_sklearn import onnx_inputs

    frame, _, model = _reference_table()
    session = onnx_session(answer, _WHAT)
    held_out = frame[TRAIN_ROWS:]
    feeds = onnx_inputs(held_out)
    names = sorted(i.name for i in session.get_inputs())
    extra = sorted(set(names) - set(feeds))
    if extra and set(feeds) <= set(names):
        raise Incorrect(
            f"the model has inputs that are not feature columns of the table: {extra} (a label is no input); "
            "build initial_types from the feature columns only"
        )
    if names != sorted(feeds):
        raise Incorrect(f"expected one input per column {sorted(feeds)}, found {names}")
    for info in session.get_inputs():
        wanted = "tensor(float)" if feeds[info.name].dtype == np.float32 else "tensor(string)"
        if info.type != wanted:
            raise Incorrect(f"input {info.name!r} should be {wanted} (float32 numbers, strings for text), found {info.type}")
    return _check_outputs(session, feeds, model, held_out)


q1 = Exercise(
    1,
    "probabilities as a plain tensor",
    _check_plain_tensor,
    hint=(
        "skl2onnx.to_onnx(pipeline, X_sample_float32, options={'zipmap': False}, target_opset=...) "
        "makes the second output a (N, 10) float tensor instead of a list of dicts."
    ),
    solution_code="""
        from skl2onnx import to_onnx
        from labsupport.course.data import load_digits
        from labsupport.exercises.nb04 import exercise_pipeline
        from labsupport.models.digits_sklearn import tidy_opset_imports

        pipeline = exercise_pipeline()
        sample = load_digits().train.flat[:1]  # float32, so the ONNX input is float32 (N, 64)
        answer = to_onnx(pipeline, sample, options={"zipmap": False}, target_opset={"": 18, "ai.onnx.ml": 3})
        tidy_opset_imports(answer)  # optional, as in section 1: the opset imports sorted, ai.onnx once
    """,
)

q2 = Exercise(
    2,
    "convert the mixed-type table pipeline",
    _check_table,
    hint=(
        "Give to_onnx initial_types: one (column, FloatTensorType([None, 1])) per numeric column and "
        "(column, StringTensorType([None, 1])) per text column; labsupport.models.digits_sklearn.initial_types(frame) "
        "builds that list. Keep options={'zipmap': False}."
    ),
    solution_code="""
        from skl2onnx import to_onnx
        from labsupport.exercises.nb04 import exercise_table
        from labsupport.models.digits_sklearn import initial_types, tidy_opset_imports

        frame, churned, table_pipeline = exercise_table()
        answer = to_onnx(
            table_pipeline,
            initial_types=initial_types(frame),
            options={"zipmap": False},
            target_opset={"": 18, "ai.onnx.ml": 3},
        )
        tidy_opset_imports(answer)  # optional, as in section 1: the opset imports sorted, ai.onnx once
    """,
)


FEATURES = "features"


@lru_cache(maxsize=1)
def _transfer_cases():
    """(data set, numeric DataFrame, fitted pipeline) pairs the checker converts with the learner's function.

    Two bundled scikit-learn data sets of different widths and two pipelines the notebook never converts, so a
    function that hard-codes the wine table's 13 columns or one estimator's options fails on the second one.
    """
    from sklearn.datasets import load_breast_cancer, load_wine
    from sklearn.decomposition import PCA
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    wine, cancer = load_wine(as_frame=True), load_breast_cancer(as_frame=True)
    wine_model = make_pipeline(StandardScaler(), PCA(n_components=5, random_state=0), LogisticRegression(max_iter=1000))
    cancer_model = make_pipeline(MinMaxScaler(), RandomForestClassifier(n_estimators=30, max_depth=6, random_state=0))
    return (
        ("wine", wine.data, wine_model.fit(wine.data, wine.target)),
        ("breast cancer", cancer.data, cancer_model.fit(cancer.data, cancer.target)),
    )


def exercise_wine():
    """(wine table, its classes, fitted StandardScaler + PCA + LogisticRegression): fresh copies to try exercise 3 on."""
    from sklearn.datasets import load_wine

    _, frame, model = _transfer_cases()[0]
    return frame.copy(), load_wine().target, copy.deepcopy(model)


def _hard_coded_width_message(name: str, found: object, width: int) -> str:
    return (
        f"on the {name} table the input has shape {found}, expected (N, {width}): take the width from the frame, "
        "do not hard-code the wine table's"
    )


def _refuse_a_hard_coded_width(converted, name: str, width: int) -> None:
    """A declared width that is not the frame's: ONNX Runtime would refuse the file with a shape error that names no cause."""
    import onnx

    if not isinstance(converted, onnx.ModelProto) or len(converted.graph.input) != 1:
        return
    dims = converted.graph.input[0].type.tensor_type.shape.dim
    declared = [dim.dim_value if dim.HasField("dim_value") else None for dim in dims]
    if len(declared) == 2 and declared[1] not in (None, width):
        raise Incorrect(_hard_coded_width_message(name, declared, width))


def _check_converter(answer) -> str:
    if not callable(answer):
        raise Incorrect(f"expected a function answer(pipeline, frame) that returns an ONNX model, got {type(answer).__name__}")
    for name, frame, model in _transfer_cases():
        with blame_answer(f"your function failed on the {name} pipeline"):
            converted = answer(copy.deepcopy(model), frame.copy())
        _refuse_a_hard_coded_width(converted, name, frame.shape[1])
        session = onnx_session(converted, f"{_WHAT} from answer(pipeline, frame)")
        inputs = [(i.name, i.type, i.shape) for i in session.get_inputs()]
        width = frame.shape[1]
        if len(inputs) != 1:
            raise Incorrect(
                f"on the {name} table ({width} numeric columns) expected one input {FEATURES!r} float32 (N, {width}), found "
                f"{len(inputs)} inputs {[i[0] for i in inputs][:4]}...: the DataFrame was given as the sample, which makes "
                "one input per column; declare one matrix input with initial_types"
            )
        input_name, input_type, input_shape = inputs[0]
        if input_name != FEATURES:
            default = " (the converter's default for a sample)" if input_name == "X" else ""
            raise Incorrect(
                f"the input is named {input_name!r}{default}; name it {FEATURES!r}: "
                f"initial_types=[({FEATURES!r}, FloatTensorType([None, n_columns]))]"
            )
        if input_type != "tensor(float)":
            raise Incorrect(f"the input should be float32 (tensor(float)), found {input_type}")
        if len(input_shape) != 2 or input_shape[1] != width:
            raise Incorrect(_hard_coded_width_message(name, input_shape, width))
        features = frame.astype(np.float32)  # both sides see the same float32 numbers
        verdict = _check_outputs(session, {FEATURES: features.to_numpy()}, model, features)
    return f"{verdict}, on the wine and the breast cancer pipelines"


q3 = Exercise(
    3,
    "a converter for any numeric table",
    _check_converter,
    hint=(
        "The sample route names the input 'X' and, given a DataFrame, makes one input per column. initial_types declares "
        "the input yourself: a list of (name, type) pairs, the type from skl2onnx.common.data_types with a None batch "
        "dimension and the frame's number of columns."
    ),
    solution_code="""
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType


        def answer(pipeline, frame):
            features = [("features", FloatTensorType([None, frame.shape[1]]))]
            return to_onnx(pipeline, initial_types=features, options={"zipmap": False}, target_opset={"": 18, "ai.onnx.ml": 3})
    """,
)

EXERCISES = [q1, q2, q3]
