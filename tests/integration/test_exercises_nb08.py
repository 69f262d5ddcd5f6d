"""Exercise 4 of notebook 08 trains and converts two scikit-learn classifiers and serves them: each known mistake is named."""

from __future__ import annotations

import re

import pytest

from labsupport.exercises.nb08 import q4


def _q4_app(*, width=None, check_nan=True, check_width=True, per_request=False, key="predictions", dtype="float32"):
    """A make_app like the reference one, with one of the mistakes a learner makes switched on."""
    import numpy as np
    import onnxruntime as ort
    from fastapi import FastAPI, HTTPException

    def make_app(model_path):
        session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        features = width or session.get_inputs()[0].shape[1]
        app = FastAPI()

        @app.post("/predict")
        def predict(body: dict):
            run = ort.InferenceSession(model_path).run if per_request else session.run
            try:
                batch = np.asarray(body["inputs"], dtype=dtype)
            except (KeyError, ValueError):
                raise HTTPException(422, "bad inputs") from None
            if batch.ndim != 2 or len(batch) == 0 or (check_width and batch.shape[1] != features):
                raise HTTPException(422, "bad shape")
            if check_nan and not np.isfinite(batch).all():
                raise HTTPException(422, "not finite")
            return {key: run(None, {"X": batch})[0].tolist()}

        return app

    return make_app


def test_q4_accepts_a_reference_like_app_without_pydantic():
    assert q4.evaluate(_q4_app()).status == "correct"


@pytest.mark.parametrize(
    ("mistake", "reason"),
    [
        ({"width": 13}, "iris model.*read the number of features from the model"),
        ({"check_width": False}, "crashed the app \\(status 500\\)"),
        ({"check_nan": False}, "a NaN was answered 200"),
        ({"per_request": True}, "InferenceSessions were opened for one app"),
        ({"key": "labels"}, '"predictions"'),
        ({"dtype": "float64"}, "crashed the app \\(500\\).*float32"),
    ],
)
def test_q4_rejects_each_mistake_by_name(mistake, reason):
    outcome = q4.evaluate(_q4_app(**mistake))
    assert outcome.status == "incorrect", mistake
    assert re.search(reason, outcome.message), (mistake, outcome.message)


def test_q4_rejects_an_app_that_returns_probability_argmax_of_the_wrong_output():
    make_app = _q4_app()

    def wrong_order(model_path):
        app = make_app(model_path)
        route = next(r for r in app.routes if getattr(r, "path", "") == "/predict")
        original = route.endpoint

        def reversed_predictions(body: dict):
            answer = original(body)
            return {"predictions": answer["predictions"][::-1]}

        app.router.routes.remove(route)
        app.post("/predict")(reversed_predictions)
        return app

    outcome = q4.evaluate(wrong_order)
    assert outcome.status == "incorrect"
    assert "differ from session.run's labels" in outcome.message
