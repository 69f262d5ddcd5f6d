"""Exercises of notebook 13 (model versions, A/B routing, shadow, promotion and rollback)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile

import numpy as np

from labsupport.exercises import Exercise, Incorrect

# the service hashes the key exactly as sent: case, spaces and the Unicode form all change the bucket
KEYS = [f"user-{i}" for i in range(400)] + ["", "ünïcode", "a" * 100, "User-7", " user-7", "user-7 ", "USER-12", "cafe\u0301", "café"]
VERSIONS = {"2": "models/v2.onnx", "3": "models/v3.onnx"}  # the file paths exercise 2 uses


def _service_routing():
    from onnx_service import routing

    return routing


def _check_route(route) -> str:
    routing = _service_routing()
    if not callable(route):
        raise Incorrect("expected a function route(key, percent) -> 'champion' or 'challenger'")
    for percent in (0, 10, 50, 100):
        for key in KEYS:
            want = routing.CHALLENGER if key and percent and routing.bucket(key) < percent else routing.CHAMPION
            got = route(key, percent)
            if got not in (routing.CHAMPION, routing.CHALLENGER):
                raise Incorrect(f"route must return 'champion' or 'challenger', got {got!r}")
            if got != want:
                raise Incorrect(
                    f"route({key!r}, {percent}) gave {got!r}, the service sends that key to {want!r}: "
                    "bucket = the first 4 bytes of sha256(key) as a big-endian integer, modulo 100, with the key hashed exactly "
                    "as sent (its UTF-8 bytes: no lower-casing, stripping or Unicode normalisation); "
                    "the challenger gets buckets below the percentage (an empty key: champion)"
                )
    return "your routing agrees with the service on every key: a user always sees the same version"


def _as_sent(document):
    """The document as the service receives it: through JSON (int keys become strings, numpy numbers do not pass)."""
    try:
        return json.loads(json.dumps(document))
    except (TypeError, ValueError) as error:
        raise Incorrect(f"the document must be JSON: use Python dicts, strings and ints ({error})") from None


def _check_document(document) -> str:
    routing = _service_routing()
    document = _as_sent(document)
    try:
        checked = routing.check_document(document)
    except routing.RoutingError as error:
        raise Incorrect(f"the service would refuse it: {error}") from None
    if checked.versions != VERSIONS:
        raise Incorrect(f'"versions" should be {VERSIONS} (the two files), got {checked.versions}')
    if checked.aliases != {routing.CHAMPION: "2", routing.CHALLENGER: "3"}:
        raise Incorrect(f"version 2 stays champion and version 3 is the challenger; your aliases are {checked.aliases}")
    if checked.challenger_percent != 25:
        raise Incorrect(f'"challenger_percent" is a whole percentage of request keys: 25, got {checked.challenger_percent!r}')
    if checked.shadow != "3":
        raise Incorrect(f'the challenger should also run in shadow on the champion\'s traffic ("shadow": "3"), got {checked.shadow!r}')
    if checked.sha256:
        raise Incorrect(
            f"versions {sorted(checked.sha256)} carry a sha256 that nobody computed: the files of VERSIONS are examples, and the "
            "service computes each file's sha256 and refuses the whole document when one differs (section 5). Give the paths only"
        )
    return (
        "the service accepts this document's fields: 25% of keys get version 3, and version 3 shadows the rest "
        "(it then loads each file and refuses the document if one is missing)"
    )


class StoreUnreadable(RuntimeError):
    """What a registry raises in exercise 3 when its database cannot be read."""


# exercise 3: (what reading the champion gives or raises, the candidate's accuracy, the right answer, why)
GATE_CASES = [
    (None, 0.95, True, "there is no champion yet: only the 90% floor applies"),
    (None, 0.85, False, "there is no champion and the candidate is below the 90% floor"),
    (None, 0.9, True, "there is no champion and the candidate is exactly at the 90% floor (at least 0.9: >=)"),
    (None, 0.8999, False, "there is no champion and the candidate is 0.01 points below the 90% floor"),
    (None, 0.89996, False, "there is no champion and the candidate is 0.004 points below the 90% floor"),
    (0.99, 0.985, True, "the candidate is half a point below the champion: within the 1-point budget"),
    (0.99, 0.995, True, "the candidate beats the champion"),
    (0.99, 0.9801, True, "the candidate is 0.99 points below the champion: within the 1-point budget"),
    (
        0.95,
        0.9402,
        True,
        "the candidate is 0.98 points below a 95% champion: within the budget (1 point, not 1% of the champion's accuracy)",
    ),
    (0.99, 0.9799, False, "the candidate is 1.01 points below the champion: over the 1-point budget"),
    (0.99, 0.975, False, "the candidate is 1.5 points below the champion"),
    (0.905, 0.9, True, "the candidate is half a point below the champion and exactly at the 90% floor"),
    (0.905, 0.899, False, "the candidate is within 1 point of the champion but below the 90% floor"),
    (StoreUnreadable("database is locked"), 0.99, False, "the champion could not be read (the store is locked)"),
    (KeyError("accuracy"), 0.99, False, "the champion's record has no accuracy"),
    (OSError("disk I/O error"), 0.99, False, "the champion's file could not be read (OSError: any exception means no)"),
    (ValueError("could not convert string to float: 'n/a'"), 0.99, False, "the champion's recorded accuracy is not a number"),
]


def _reader(outcome):
    def read_champion_accuracy():
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return read_champion_accuracy


def _check_gate(may_promote) -> str:
    if not callable(may_promote):
        raise Incorrect("expected a function may_promote(read_champion_accuracy, candidate_accuracy) -> True or False")
    for champion, candidate, want, why in GATE_CASES:
        try:
            got = may_promote(_reader(champion), candidate)
        except Exception as error:
            raise Incorrect(
                f"may_promote raised {type(error).__name__}: {error} when {why}; a gate that fails closed answers False instead"
            ) from None
        if not isinstance(got, bool | np.bool_):
            raise Incorrect(f"may_promote must return True or False, got {got!r}")
        if bool(got) != want:
            verdict = "promote" if got else "refuse"
            raise Incorrect(f"may_promote said {verdict} when {why}: the answer is {want}")
    return "your gate refuses whenever the champion cannot be read: it fails closed"


Q4_NAME = "wine-classifier"  # the registered model name exercise 4 uses


@functools.cache
def _wine_models() -> tuple[tuple[bytes, np.ndarray], ...]:
    """Two scikit-learn classifiers of the wine data converted with skl2onnx (serialized) and the rows they disagree on."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier

    features, labels = load_wine(return_X_y=True)
    features = features.astype(np.float32)
    estimators = (make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)), DecisionTreeClassifier(max_depth=1, random_state=0))
    fitted = [estimator.fit(features, labels) for estimator in estimators]
    rows = features[fitted[0].predict(features) != fitted[1].predict(features)][:12]
    options = {"zipmap": False}
    opsets = {"": 18, "ai.onnx.ml": 3}
    return tuple((to_onnx(model, features[:1], options=options, target_opset=opsets).SerializeToString(), rows) for model in fitted)


@contextlib.contextmanager
def _scratch_registry():
    """A fresh sqlite MLflow store in a temporary folder (also the working folder) for tracking and registry alike,
    the previous URIs restored after (notebook 13's sections set a registry URI of their own: lifecycle.open_registry)."""
    from labsupport.topics.lifecycle import _mlflow

    mlflow = _mlflow()
    before, registry_before, folder = mlflow.get_tracking_uri(), mlflow.get_registry_uri(), os.getcwd()
    with tempfile.TemporaryDirectory(prefix="nb13_q4_") as scratch:
        os.chdir(scratch)  # the default experiment keeps its artifacts in ./mlruns: here, not in the learner's folder
        try:
            mlflow.set_tracking_uri(f"sqlite:///{scratch}/mlflow.db")
            mlflow.set_registry_uri(f"sqlite:///{scratch}/mlflow.db")
            yield mlflow
        finally:
            mlflow.set_tracking_uri(before)
            mlflow.set_registry_uri(registry_before)
            os.chdir(folder)


def _check_signature(signature, width: int) -> None:
    if signature is None:
        raise Incorrect("the model was logged without a signature: pass signature=infer_signature(rows, outputs)")
    inputs = signature.inputs.to_dict()
    shapes = [spec.get("tensor-spec", {}) for spec in inputs]
    if len(inputs) != 1 or shapes[0].get("dtype") != "float32" or list(shapes[0].get("shape", ()))[-1:] != [width]:
        raise Incorrect(f"the signature's input must be one float32 tensor of {width} features per row, got {inputs}")
    if shapes[0]["shape"][0] != -1:
        raise Incorrect(f"the signature's input has {shapes[0]['shape'][0]} rows: infer it from an ndarray so that the batch is -1 (any)")
    outputs = {spec.get("name"): spec.get("tensor-spec", {}).get("dtype") for spec in signature.outputs.to_dict()}
    if outputs != {"label": "int64", "probabilities": "float32"}:
        raise Incorrect(
            f"the signature's outputs are {outputs}; the model has two, label (int64) and probabilities (float32): "
            "infer it from the dict of both outputs, {name: array}, not from the first one alone"
        )


def _check_log_and_register(log_and_register) -> str:
    import onnx
    import onnxruntime

    if not callable(log_and_register):
        raise Incorrect("expected a function log_and_register(model, rows, name) -> 'models:/<name>@champion'")
    with _scratch_registry() as mlflow:
        client, store = mlflow.MlflowClient(), mlflow.get_tracking_uri()
        for number, (serialized, rows) in enumerate(_wine_models(), start=1):
            uri = log_and_register(onnx.load_from_string(serialized), rows[:4].copy(), Q4_NAME)
            if mlflow.get_tracking_uri() != store:
                raise Incorrect(
                    f"your function set the tracking URI to {mlflow.get_tracking_uri()!r}: log to the store that is current when it "
                    "runs (the checker's fresh one), without mlflow.set_tracking_uri"
                )
            versions = client.search_model_versions(f"name='{Q4_NAME}'")
            if len(versions) != number:
                raise Incorrect(
                    f"after call {number}, {Q4_NAME!r} has {len(versions)} registered versions: each call must register a new one"
                )
            try:
                champion = str(client.get_model_version_by_alias(Q4_NAME, "champion").version)
            except mlflow.exceptions.MlflowException:
                raise Incorrect("no version has the alias 'champion': set_registered_model_alias(name, 'champion', version)") from None
            if champion != str(number):
                raise Incorrect(f"after registering version {number}, 'champion' points at version {champion}: move it to the new version")
            if uri != f"models:/{Q4_NAME}@champion":
                raise Incorrect(f"return the alias URI models:/{Q4_NAME}@champion, which follows the alias, got {uri!r}")
            loaded = mlflow.pyfunc.load_model(uri)
            _check_signature(loaded.metadata.signature, rows.shape[1])
            expected = onnxruntime.InferenceSession(serialized, providers=["CPUExecutionProvider"]).run(["label"], {"X": rows})[0]
            got = np.asarray(loaded.predict(rows)["label"])
            if not np.array_equal(got, expected):
                raise Incorrect(f"models:/{Q4_NAME}@champion predicts {got.tolist()}, the model given in call {number} {expected.tolist()}")
    return "two versions logged with their signature, registered, the alias moved, and each loads back with the same predictions"


q1 = Exercise(
    1,
    "a deterministic traffic split",
    _check_route,
    hint=(
        "hashlib.sha256(key.encode()).digest()[:4] -> int.from_bytes(..., 'big') % 100; below percent -> 'challenger'. "
        "Python's hash() changes between processes: never route on it."
    ),
    solution_code="""
        import hashlib

        def answer(key, percent):
            if not key or not percent:
                return "champion"
            bucket = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "big") % 100
            return "challenger" if bucket < percent else "champion"
    """,
)

q2 = Exercise(
    2,
    "a routing document for a canary with shadow",
    _check_document,
    hint=(
        'Four fields: "versions" (name -> path, use VERSIONS), "aliases" ({"champion": ..., "challenger": ...}), '
        '"challenger_percent" (a whole number) and "shadow" (a version name).'
    ),
    solution_code="""
        from labsupport.exercises.nb13 import VERSIONS

        answer = {"versions": VERSIONS, "aliases": {"champion": "2", "challenger": "3"}, "challenger_percent": 25, "shadow": "3"}
    """,
)

q3 = Exercise(
    3,
    "a gate that fails closed",
    _check_gate,
    hint=(
        "What should 'I could not read the champion' mean for a gate, whichever error it is? "
        "The two rules are inclusive ('at least', 'at most'), and '1 point' is 0.01 of accuracy, not 1% of the champion's."
    ),
    solution_code="""
        def answer(read_champion_accuracy, candidate_accuracy):
            try:
                champion = read_champion_accuracy()
            except Exception:
                return False  # could not read the champion: refuse
            if candidate_accuracy < 0.9:
                return False
            return champion is None or candidate_accuracy >= champion - 0.01
    """,
)

q4 = Exercise(
    4,
    "log, register and load back a model the notebook has not shown",
    _check_log_and_register,
    hint=(
        "The recipe's calls, with the model's two outputs in the signature: outputs = dict(zip(['label', 'probabilities'], "
        "session.run(None, {'X': rows}))), infer_signature(rows, outputs); log_model(..., registered_model_name=name) "
        "returns model_info.registered_model_version; then MlflowClient().set_registered_model_alias(name, 'champion', version)."
    ),
    solution_code="""
        import mlflow
        import onnxruntime as ort
        from mlflow.models import infer_signature


        def answer(model, rows, name):
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            outputs = dict(zip([output.name for output in session.get_outputs()], session.run(None, {"X": rows}), strict=True))
            with mlflow.start_run():
                info = mlflow.onnx.log_model(
                    model,
                    name="model",
                    signature=infer_signature(rows, outputs),
                    onnx_execution_providers=["CPUExecutionProvider"],
                    save_as_external_data=False,
                    registered_model_name=name,
                )
            mlflow.MlflowClient().set_registered_model_alias(name, "champion", info.registered_model_version)
            return f"models:/{name}@champion"
    """,
)

EXERCISES = [q1, q2, q3, q4]
