"""Exercise 4 of notebook 13 logs and registers models in a scratch MLflow store: each known mistake is named."""

from __future__ import annotations

import re

import pytest

from labsupport.exercises.nb13 import q4
from labsupport.topics.lifecycle import pins


def _log_and_register(*, signature="both", alias="move", uri="alias", own_store=None):
    """A log_and_register like the reference, with one mistake a learner makes switched on."""
    import mlflow
    import onnxruntime as ort
    from mlflow.models import infer_signature

    def answer(model, rows, name):
        if own_store:
            mlflow.set_tracking_uri(own_store)  # the recipe's first line, copied into the function
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        label, probabilities = session.run(None, {"X": rows})
        outputs = {"both": {"label": label, "probabilities": probabilities}, "first": label, "none": None}[signature]
        with mlflow.start_run():
            info = mlflow.onnx.log_model(
                model,
                name="model",
                signature=None if outputs is None else infer_signature(rows, outputs),
                onnx_execution_providers=["CPUExecutionProvider"],
                pip_requirements=pins(),  # listed, so that MLflow does not infer them in a subprocess (2 s a call)
                registered_model_name=name,
            )
        version = info.registered_model_version
        if alias == "move" or (alias == "first" and str(version) == "1"):
            mlflow.MlflowClient().set_registered_model_alias(name, "champion", version)
        return f"models:/{name}@champion" if uri == "alias" else f"models:/{name}/{version}"

    return answer


def test_q4_accepts_the_reference_without_save_as_external_data():
    assert q4.evaluate(_log_and_register()).status == "correct"


@pytest.mark.parametrize(
    ("mistake", "reason"),
    [
        ({"signature": "none"}, "logged without a signature"),
        ({"signature": "first"}, "label \\(int64\\) and probabilities \\(float32\\)"),
        ({"alias": "first"}, "'champion' points at version 1: move it"),
        ({"uri": "version"}, "return the alias URI models:/wine-classifier@champion"),
    ],
)
def test_q4_names_each_mistake(mistake, reason):
    outcome = q4.evaluate(_log_and_register(**mistake))
    assert outcome.status == "incorrect", mistake
    assert re.search(reason, outcome.message), (mistake, outcome.message)


def test_q4_names_a_tracking_uri_of_the_learners_own(tmp_path):
    """Registered, but in a store of its own: told so, not that nothing was registered."""
    outcome = q4.evaluate(_log_and_register(own_store=f"sqlite:///{tmp_path}/own.db"))
    assert outcome.status == "incorrect"
    assert "your function set the tracking URI" in outcome.message, outcome.message


def test_q4_checks_in_its_own_store_after_the_notebook_set_a_registry_uri(tmp_path):
    """Notebook 13's sections set a registry URI (lifecycle.open_registry): the checker's store is still fresh and used."""
    import mlflow

    earlier = f"sqlite:///{tmp_path / 'earlier.db'}"
    before = mlflow.get_registry_uri()
    mlflow.set_registry_uri(earlier)
    try:
        assert q4.evaluate(_log_and_register()).status == "correct"
        assert q4.evaluate(_log_and_register()).status == "correct"  # a second check starts from an empty store again
        assert mlflow.get_registry_uri() == earlier  # restored
    finally:
        mlflow.set_registry_uri(before)
    assert not (tmp_path / "earlier.db").exists() or not mlflow.MlflowClient(registry_uri=earlier).search_registered_models()
