"""The course's scikit-learn models and data for notebook 04 (converting with skl2onnx).

Introduced in notebook 04. Three pipelines on two data sets:

- ``digits_logreg()``: ``Pipeline(StandardScaler, LogisticRegression)`` on the digits' 64 pixels,
- ``digits_forest()``: a small ``RandomForestClassifier`` on the same pixels,
- ``mixed_pipeline()``: a ``ColumnTransformer`` (scaled numbers, one-hot categories) and a
  logistic regression over ``make_mixed_table()``, a small customer table made in code.

``ensure_digits_sklearn()`` returns ``artifacts/digits_sklearn.onnx`` (the fitted
scaler+logistic-regression pipeline, input "pixels" (N, 64) float32, outputs "label" (N,) int64
and "probabilities" (N, 10) float32), fitting and converting it first when it is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from labsupport.course.data import load_digits
from labsupport.course.paths import artifact

ONNX_NAME = "digits_sklearn.onnx"
INPUT_NAME = "pixels"
DEFAULT_SEED = 0
# the converter's targets, pinned so the file does not change with skl2onnx (04); not contract.OPSET: that is for hand-built graphs
DEFAULT_OPSET = {"": 18, "ai.onnx.ml": 3}
NUMERIC_COLUMNS = ("age", "monthly_spend", "support_calls")
CATEGORICAL_COLUMNS = ("plan", "region")
PLANS = ("basic", "plus", "pro")
REGIONS = ("north", "south", "east", "west")
SENSOR_START = 1_700_000_000.0  # a Unix timestamp (14 November 2023, 22:13:20 UTC)


def make_mixed_table(rows: int = 400, seed: int = DEFAULT_SEED) -> tuple[pd.DataFrame, np.ndarray]:
    """A made-up customer table (3 numeric, 2 text columns) and whether each customer churned (0/1) (04)."""
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 10:
        raise ValueError(f"rows must be a whole number >= 10, got {rows!r}")
    rng = np.random.default_rng(seed)
    plan = rng.choice(PLANS, size=rows, p=[0.5, 0.3, 0.2])
    region = rng.choice(REGIONS, size=rows)
    age = rng.integers(18, 80, size=rows).astype(np.float64)
    spend = np.round(rng.gamma(2.0, 20.0, size=rows) + 15.0 * (plan == "pro"), 2)
    calls = rng.poisson(1.5, size=rows).astype(np.float64)
    score = 0.9 * calls - 0.03 * (age - 45) - 0.02 * spend + 1.0 * (plan == "basic") + 0.5 * (region == "south")
    churned = (score + rng.normal(0.0, 0.8, size=rows) > 0.6).astype(np.int64)
    frame = pd.DataFrame({"age": age, "monthly_spend": spend, "support_calls": calls, "plan": plan, "region": region})
    return frame, churned


def make_sensor_log(rows: int = 2000, seed: int = DEFAULT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(X, busy): float64 rows (Unix timestamp in seconds, temperature) over two days, and 1 for office hours 9-17 (04).

    The timestamps (~1.7e9) need float64: float32 keeps only about 7 digits, so it rounds them to
    the nearest 128 seconds. Notebook 04 uses this to show the float32/float64 threshold flip.
    """
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 10:
        raise ValueError(f"rows must be a whole number >= 10, got {rows!r}")
    rng = np.random.default_rng(seed)
    timestamp = SENSOR_START + rng.uniform(0.0, 2 * 86400.0, size=rows)
    temperature = np.round(rng.normal(20.0, 5.0, size=rows), 1)
    hour = (timestamp % 86400.0) / 3600.0
    busy = ((hour >= 9.0) & (hour < 17.0)).astype(np.int64)
    return np.column_stack([timestamp, temperature]), busy


def digits_logreg(seed: int = DEFAULT_SEED) -> Pipeline:
    """Unfitted ``Pipeline(StandardScaler, LogisticRegression)`` for the 64 digit pixels (04)."""
    return Pipeline([("scale", StandardScaler()), ("logreg", LogisticRegression(C=0.5, max_iter=500, random_state=seed))])


def digits_forest(seed: int = DEFAULT_SEED) -> RandomForestClassifier:
    """Unfitted small ``RandomForestClassifier`` (40 trees, depth <= 10, one job) for the digit pixels (04)."""
    return RandomForestClassifier(n_estimators=40, max_depth=10, random_state=seed, n_jobs=1)


def mixed_pipeline(seed: int = DEFAULT_SEED) -> Pipeline:
    """Unfitted ``ColumnTransformer`` (scaled numbers, one-hot text) + ``LogisticRegression`` for ``make_mixed_table`` (04)."""
    columns = ColumnTransformer(
        [
            ("numbers", StandardScaler(), list(NUMERIC_COLUMNS)),
            ("categories", OneHotEncoder(handle_unknown="ignore"), list(CATEGORICAL_COLUMNS)),
        ]
    )
    return Pipeline([("columns", columns), ("logreg", LogisticRegression(max_iter=500, random_state=seed))])


def fit_on_digits(model: Any) -> Any:
    """Fit an sklearn estimator on the digits train split (flat (N, 64) float32 pixels); returns it (04)."""
    if not hasattr(model, "fit"):
        raise TypeError(f"fit_on_digits() expects a scikit-learn estimator with .fit, got {type(model).__name__}")
    train = load_digits().train
    return model.fit(train.flat, train.labels)


def onnx_inputs(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The ONNX feeds for a table: one (N, 1) column per input, float32 for numbers, str objects for text (04).

    skl2onnx converts a pipeline fitted on a DataFrame with one graph input per column, so a
    consumer feeds the columns separately.
    """
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"onnx_inputs() expects a pandas DataFrame, got {type(frame).__name__}")
    feeds: dict[str, np.ndarray] = {}
    for name in frame.columns:
        column = frame[name].to_numpy()
        if pd.api.types.is_numeric_dtype(frame[name]):
            feeds[name] = column.astype(np.float32).reshape(-1, 1)
        else:
            feeds[name] = column.astype(str).astype(object).reshape(-1, 1)
    return feeds


def initial_types(frame: pd.DataFrame) -> list[tuple[str, Any]]:
    """skl2onnx ``initial_types`` for a table: FloatTensorType([None, 1]) or StringTensorType([None, 1]) per column (04)."""
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"initial_types() expects a pandas DataFrame, got {type(frame).__name__}")
    return [
        (name, FloatTensorType([None, 1]) if pd.api.types.is_numeric_dtype(frame[name]) else StringTensorType([None, 1]))
        for name in frame.columns
    ]


def tidy_opset_imports(proto: Any) -> Any:
    """Sort a model's opset imports (``ai.onnx`` first) and drop duplicates, in place; returns the model (04).

    skl2onnx 1.20 lists the domains in an order that changes from run to run (and ``ai.onnx``
    twice), so two conversions of the same model are not byte-identical until this is applied.
    """
    import onnx

    if not isinstance(proto, onnx.ModelProto):
        raise TypeError(f"tidy_opset_imports() expects an onnx.ModelProto, got {type(proto).__name__}")
    versions: dict[str, int] = {}
    for entry in proto.opset_import:
        versions[entry.domain] = max(entry.version, versions.get(entry.domain, 0))
    del proto.opset_import[:]
    for domain in sorted(versions, key=lambda name: (name != "", name)):
        proto.opset_import.add(domain=domain, version=versions[domain])
    return proto


def convert_digits_model(model: Any, path: str | Path | None = None, zipmap: bool = False) -> Any:
    """Convert a fitted digits classifier with ``skl2onnx.to_onnx`` (input "pixels" (N, 64) float32); saves it if ``path`` (04)."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType

    if path is not None and Path(path).suffix != ".onnx":
        raise ValueError(f"the ONNX file name must end in .onnx, got {Path(path).name!r}")
    if not hasattr(model, "classes_"):
        name = type(model).__name__
        raise ValueError(f"convert_digits_model() needs a fitted classifier; call fit_on_digits() first ({name} is not fitted)")
    proto = to_onnx(
        model,
        initial_types=[(INPUT_NAME, FloatTensorType([None, 64]))],
        options={"zipmap": zipmap},
        target_opset=DEFAULT_OPSET,
    )
    tidy_opset_imports(proto)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(proto.SerializeToString())
    return proto


def ensure_digits_sklearn(force: bool = False) -> Path:
    """Path of ``artifacts/digits_sklearn.onnx`` (scaler + logistic regression, zipmap off); fits and converts it if missing (04)."""
    path = artifact(ONNX_NAME)
    if force or not path.is_file():
        convert_digits_model(fit_on_digits(digits_logreg()), path)
    return path
