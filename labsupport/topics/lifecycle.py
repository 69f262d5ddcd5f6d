"""Model versions in an MLflow registry, a promotion gate, and aliases pushed to the running service.

Introduced in notebook 13. ``open_registry()`` points MLflow at a local sqlite file and an artifact
folder under ``artifacts/lifecycle/`` (no server, telemetry off: nothing leaves the machine).
``log_version`` registers an ONNX file with its accuracy, parity report, opset and sha256;
``gate`` re-runs the registered artifact and refuses a version that fails a parity, accuracy or
latency budget; ``promote`` and ``rollback`` move the ``champion`` alias; ``routing_document`` and
``push_routing`` hand the aliases to the service of ``deploy/service``, which switches without a restart.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.course.compare import compare
from labsupport.course.data import sha256_of
from labsupport.course.paths import artifact
from labsupport.onnxutil.sessions import open_session

MODEL_NAME = "digits-classifier"
EXPERIMENT = "onnx-lab-digits"
CHAMPION, CHALLENGER, PREVIOUS = "champion", "challenger", "previous"
FOLDER = "lifecycle"
# MLflow reports usage unless told not to, and shows progress bars: both off, before mlflow is imported
OFFLINE_ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


def _mlflow():
    os.environ.update(OFFLINE_ENV)
    with warnings.catch_warnings():  # tqdm (through MLflow) warns that Jupyter widgets are missing
        warnings.simplefilter("ignore")
        import mlflow

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return mlflow


@dataclass
class Registry:
    """An MLflow client bound to one local store and one registered model name."""

    client: Any
    name: str
    experiment_id: str
    folder: Path

    def version_of(self, alias: str) -> str | None:
        """The version an alias points at, None when the alias is not set."""
        try:
            return str(self.client.get_model_version_by_alias(self.name, alias).version)
        except Exception:  # MLflow raises MlflowException for an unknown alias
            return None

    def tags(self, version: str) -> dict[str, str]:
        """The tags logged with a version (sha256, opset, accuracy, parity, description)."""
        return dict(self.client.get_model_version(self.name, version).tags)

    def model_path(self, version_or_alias: str) -> Path:
        """The registered ``model.onnx`` of a version number or an alias, downloaded from the artifact store."""
        mlflow = _mlflow()
        uri = f"models:/{self.name}/{version_or_alias}" if version_or_alias.isdigit() else f"models:/{self.name}@{version_or_alias}"
        return Path(mlflow.artifacts.download_artifacts(uri)) / "model.onnx"


def open_registry(folder: str | Path | None = None, name: str = MODEL_NAME, fresh: bool = False) -> Registry:
    """A registry in ``folder`` (default ``artifacts/lifecycle``): ``mlflow.db`` (sqlite) and ``mlruns/`` (artifacts).

    ``fresh`` deletes an earlier store first, so that version numbers start at 1.
    """
    import shutil

    mlflow = _mlflow()
    from mlflow import MlflowClient

    folder = Path(folder) if folder is not None else artifact(FOLDER)
    if fresh and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{(folder / 'mlflow.db').resolve()}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    experiment_id = (
        experiment.experiment_id
        if experiment
        else client.create_experiment(EXPERIMENT, artifact_location=(folder / "mlruns").resolve().as_uri())
    )
    return Registry(client, name, experiment_id, folder)


def optimized_copy(source: str | Path, target: str | Path) -> Path:
    """A new build of the same model: ONNX Runtime's extended graph optimizations (fusions, notebook 07) saved offline."""
    open_session(source, optimization="extended", optimized_path=target)
    return Path(target)


def mislabeled_copy(source: str | Path, target: str | Path, shift: int = 1) -> Path:
    """A broken release on purpose: the same network with its class scores rotated by ``shift`` (a label-order bug)."""
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load(str(source))
    output = proto.graph.output[0]
    classes = output.type.tensor_type.shape.dim[1].dim_value
    for node in proto.graph.node:
        node.output[:] = [f"{name}_unshifted" if name == output.name else name for name in node.output]
    order = numpy_helper.from_array(np.roll(np.arange(classes), shift).astype(np.int64), "class_order")
    proto.graph.initializer.append(order)
    proto.graph.node.append(helper.make_node("Gather", [f"{output.name}_unshifted", "class_order"], [output.name], axis=1))
    onnx.checker.check_model(proto)
    onnx.save(proto, str(target))
    return Path(target)


def _logits(path: str | Path, images: np.ndarray) -> np.ndarray:
    session = open_session(path)
    return np.asarray(session.run(None, {session.get_inputs()[0].name: images})[0], dtype=np.float64)


@dataclass(frozen=True)
class Budgets:
    """What a version must meet to be promoted: parity tolerances, accuracy floor and drop, latency at batch 1."""

    atol: float = 1e-4
    rtol: float = 1e-3
    min_accuracy: float = 0.9
    max_accuracy_drop: float = 0.01  # at most 1 point below the current champion
    max_latency_ms: float = 2.0  # median of one single-example run


def log_version(
    registry: Registry, model_path: str | Path, reference_logits: np.ndarray, split: Any, description: str, budgets: Budgets = Budgets()
) -> str:
    """Register ``model_path`` as a new version with its accuracy on ``split``, parity report, opset and sha256.

    ``reference_logits`` are the source framework's outputs on ``split.images`` (PyTorch, say):
    the parity report compares the ONNX file with them, and they are stored with the version so
    that ``gate`` can check the registered artifact later. Returns the version number.
    """
    import onnx

    mlflow = _mlflow()
    model_path = Path(model_path)
    proto = onnx.load(str(model_path))
    logits = _logits(model_path, split.images)
    report = compare(reference_logits, logits, atol=budgets.atol, rtol=budgets.rtol, name="ONNX vs reference", raise_on_failure=False)
    accuracy = float(np.mean(logits.argmax(axis=1) == split.labels))
    opset = next((op.version for op in proto.opset_import if op.domain in ("", "ai.onnx")), 0)
    facts = {
        "sha256": sha256_of(model_path),
        "opset": str(opset),
        "accuracy": f"{accuracy:.6f}",
        "parity": "passed" if report.passed else "failed",
        "description": description,
    }
    with mlflow.start_run(experiment_id=registry.experiment_id, run_name=description):
        mlflow.log_metric("accuracy", accuracy)
        mlflow.log_params({"opset": opset, "sha256": facts["sha256"], "producer": proto.producer_name})
        mlflow.log_dict(
            {"passed": report.passed, "max_abs": report.max_abs, "max_rel": report.max_rel, "atol": report.atol, "rtol": report.rtol},
            "parity_report.json",
        )
        reference_file = registry.folder / "reference_logits.npy"
        np.save(reference_file, np.asarray(reference_logits, dtype=np.float64))
        mlflow.log_artifact(str(reference_file))
        with contextlib.redirect_stderr(io.StringIO()):  # "Successfully registered model ..." chatter
            info = mlflow.onnx.log_model(
                proto, name="model", registered_model_name=registry.name, pip_requirements=_pins(), save_as_external_data=False
            )
        run_id = mlflow.active_run().info.run_id
    version = str(info.registered_model_version)
    for key, value in {**facts, "run_id": run_id}.items():
        registry.client.set_model_version_tag(registry.name, version, key, value)
    return version


def _pins() -> list[str]:
    from labsupport.course.env import installed_version

    return [f"{name}=={installed_version(name)}" for name in ("onnx", "onnxruntime")]


def load_by_alias(registry: Registry, alias: str):
    """The ONNX ModelProto an alias points at, through MLflow's ONNX flavour."""
    return _mlflow().onnx.load_model(f"models:/{registry.name}@{alias}")


@dataclass
class GateCheck:
    """One budget: its name, whether the version met it, the rule in words, and the measured figure (CPU-dependent)."""

    name: str
    passed: bool
    rule: str
    measured: str

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.rule}"


@dataclass
class GateReport:
    """The verdict on one version: every check, and ``passed`` only when all of them passed."""

    version: str
    checks: list[GateCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def __str__(self) -> str:
        verdict = "may be promoted" if self.passed else "REFUSED"
        return "\n".join([f"version {self.version}: {verdict}", *(f"  {check}" for check in self.checks)])

    def details(self) -> str:
        """The measured figures (they vary with the CPU: show them in an uncompared cell)."""
        return "\n".join(f"version {self.version} {check.name}: {check.measured}" for check in self.checks)


def gate(registry: Registry, version: str, split: Any, budgets: Budgets = Budgets()) -> GateReport:
    """Run the registered artifact of ``version`` and check it against ``budgets`` (parity, accuracy, latency).

    Parity: the artifact's outputs on ``split.images`` vs the reference logits logged with it
    (``labsupport.course.compare``). Accuracy: at least ``min_accuracy`` and at most ``max_accuracy_drop``
    below the champion's logged accuracy. Latency: median single-example run (``labsupport.onnxutil.timing.measure``).
    """
    from labsupport.onnxutil.timing import measure

    mlflow = _mlflow()
    path = registry.model_path(version)
    tags = registry.tags(version)
    reference = np.load(mlflow.artifacts.download_artifacts(run_id=tags["run_id"], artifact_path="reference_logits.npy"))
    logits = _logits(path, split.images)
    parity = compare(
        reference, logits, atol=budgets.atol, rtol=budgets.rtol, name="registered artifact vs reference", raise_on_failure=False
    )
    accuracy = float(np.mean(logits.argmax(axis=1) == split.labels))
    champion = registry.version_of(CHAMPION)
    floor = budgets.min_accuracy
    if champion and champion != version:
        floor = max(floor, float(registry.tags(champion)["accuracy"]) - budgets.max_accuracy_drop)
    session = open_session(path)
    feeds = {session.get_inputs()[0].name: split.images[:1]}
    latency = measure(lambda: session.run(None, feeds), name=f"v{version}", warmup=5, repeat=50)
    return GateReport(
        version,
        [
            GateCheck(
                "parity",
                parity.passed,
                f"outputs within atol={budgets.atol:g}, rtol={budgets.rtol:g} of the logged reference",
                f"max abs err {parity.max_abs:.2e}, max rel err {parity.max_rel:.2e}",
            ),
            GateCheck(
                "accuracy",
                accuracy >= floor,
                f"accuracy >= {budgets.min_accuracy:.0%} and at most {budgets.max_accuracy_drop * 100:g} point(s) below the champion",
                f"accuracy {accuracy:.2%} (floor {floor:.2%})",
            ),
            GateCheck(
                "latency",
                latency.median_ms <= budgets.max_latency_ms,
                f"median single-example run <= {budgets.max_latency_ms:g} ms",
                f"median {latency.median_ms:.3f} ms",
            ),
        ],
    )


def promote(registry: Registry, version: str, split: Any, budgets: Budgets = Budgets()) -> GateReport:
    """Gate ``version``; when it passes, point ``champion`` at it and ``previous`` at the old champion."""
    report = gate(registry, version, split, budgets)
    if report.passed:
        old = registry.version_of(CHAMPION)
        if old and old != version:
            registry.client.set_registered_model_alias(registry.name, PREVIOUS, old)
        registry.client.set_registered_model_alias(registry.name, CHAMPION, version)
    return report


def rollback(registry: Registry) -> str:
    """Point ``champion`` back at ``previous`` (and ``previous`` at the version rolled back); returns the new champion."""
    previous, current = registry.version_of(PREVIOUS), registry.version_of(CHAMPION)
    if previous is None:
        raise RuntimeError(f"no {PREVIOUS!r} alias on {registry.name}: nothing to roll back to")
    registry.client.set_registered_model_alias(registry.name, CHAMPION, previous)
    if current:
        registry.client.set_registered_model_alias(registry.name, PREVIOUS, current)
    return previous


def routing_document(registry: Registry, challenger_percent: int = 0, shadow: bool = False) -> dict[str, Any]:
    """The service's routing document for the registry's aliases: champion, challenger (if set), split, shadow."""
    aliases = {alias: registry.version_of(alias) for alias in (CHAMPION, CHALLENGER)}
    aliases = {alias: version for alias, version in aliases.items() if version}
    versions = {version: str(registry.model_path(version)) for version in set(aliases.values())}
    challenger = aliases.get(CHALLENGER)
    return {
        "versions": versions,
        "aliases": aliases,
        "challenger_percent": challenger_percent if challenger else 0,
        "shadow": challenger if shadow and challenger and challenger != aliases[CHAMPION] else None,
    }


def push_routing(url: str, token: str, document: dict[str, Any]) -> dict[str, Any]:
    """PUT the routing document to the service's admin API (127.0.0.1 only); returns the routing it now serves."""
    import httpx

    from labsupport.topics.serving import require_loopback

    require_loopback(url)
    response = httpx.put(url + "/admin/routing", json=document, headers={"authorization": f"Bearer {token}"}, timeout=60)
    if response.status_code != 200:
        raise RuntimeError(f"the service refused the routing ({response.status_code}): {response.text}")
    return response.json()


def version_table(registry: Registry) -> list[dict[str, object]]:
    """One row per registered version: description, opset, sha256 prefix, parity verdict and aliases."""
    found = registry.client.search_model_versions(f"name='{registry.name}'")
    versions = sorted((registry.client.get_model_version(registry.name, v.version) for v in found), key=lambda v: int(v.version))
    return [
        {
            "version": str(v.version),
            "description": v.tags.get("description", ""),
            "opset": v.tags.get("opset"),
            "sha256": v.tags.get("sha256", "")[:12],
            "parity": v.tags.get("parity"),
            "aliases": ", ".join(sorted(v.aliases)) or "-",
        }
        for v in versions
    ]
