"""Model versions in an MLflow registry, and aliases pushed to the running service.

Introduced in notebook 13. ``open_registry()`` points MLflow at a local sqlite file and an artifact
folder under ``artifacts/lifecycle/`` (no server, telemetry off: nothing leaves the machine).
``log_version`` registers an ONNX file with its accuracy, parity report, opset and sha256 (the raw
MLflow calls it makes are shown first in the notebook); ``Registry.model_path`` refuses a registered file
whose sha256 differs from the one recorded. Which version may become champion is decided by the gates
of ``labsupport.topics.gates``; ``routing_document``, ``push_routing`` and ``verify_served`` hand the
aliases to the service of ``deploy/service``, which switches without a restart, and check what it loaded.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.course.compare import compare
from labsupport.course.data import sha256_of
from labsupport.course.paths import artifact
from labsupport.models import contract
from labsupport.models.contract import onnx_logits
from labsupport.onnxutil.sessions import open_session

MODEL_NAME = "digits-classifier"
EXPERIMENT = "onnx-lab-digits"
CHAMPION, CHALLENGER, PREVIOUS = "champion", "challenger", "previous"
ROLLED_BACK = "rolled_back"  # tag on a version that a rollback took out of production
SERVED = "served_as_champion"  # tag on a version that was champion (UTC time it last became champion): rollback targets
SPLIT = "split_sha256"  # tag: the sha256 of the split the recorded accuracy was measured on
# what MLflow's pyfunc flavour opens the model with; its default lists CUDAExecutionProvider first
CPU_PROVIDER = "CPUExecutionProvider"
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


def version_number(version: int | str) -> str:
    """A model version as MLflow numbers it: 2, "2" and "02" are all "2"; anything else raises ValueError with the reason."""
    text = str(version) if isinstance(version, int) and not isinstance(version, bool) else version
    if not (isinstance(text, str) and text.isascii() and text.isdigit() and int(text) >= 1):
        raise ValueError(f"a model version must be an integer of 1 or more (2 or '2'), got {version!r}")
    return str(int(text))


class IntegrityError(RuntimeError):
    """A registered file whose sha256 is not the one recorded, or a service serving other files than the registry's."""


@dataclass
class Registry:
    """An MLflow client bound to one local store and one registered model name."""

    client: Any
    name: str
    experiment_id: str
    folder: Path

    @property
    def uri(self) -> str:
        """The store's tracking and registry URI (a sqlite file)."""
        return f"sqlite:///{(self.folder / 'mlflow.db').resolve()}"

    def download(self, uri: str | None = None, **where: str) -> Path:
        """``mlflow.artifacts.download_artifacts`` from this store, whichever store MLflow's globals point at."""
        return Path(_mlflow().artifacts.download_artifacts(uri, tracking_uri=self.uri, registry_uri=self.uri, **where))

    def version_of(self, alias: str) -> str | None:
        """The version an alias points at, None when the alias is not set; any error reading the store propagates."""
        version = self.client.get_registered_model(self.name).aliases.get(alias)
        return None if version is None else str(version)

    def tags(self, version: str) -> dict[str, str]:
        """The tags logged with a version (sha256, opset, accuracy, parity, description)."""
        return dict(self.client.get_model_version(self.name, version).tags)

    def model_path(self, version_or_alias: int | str) -> Path:
        """The registered ``model.onnx`` of a version number or an alias, checked against the sha256 recorded with it.

        Raises IntegrityError when the file in the artifact store is not the one that was registered.
        """
        number = isinstance(version_or_alias, int) or version_or_alias.isdigit()
        version = version_number(version_or_alias) if number else self.version_of(version_or_alias)
        if version is None:
            raise KeyError(f"no {version_or_alias!r} alias on {self.name}")
        path = self.download(self.client.get_model_version_download_uri(self.name, version)) / "model.onnx"
        recorded, found = self.tags(version).get("sha256"), sha256_of(path)
        if recorded != found:
            raise IntegrityError(f"version {version}: the registered file's sha256 is {found[:12]}..., the registry recorded {recorded}")
        return path


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
    uri = Registry(None, name, "", folder).uri
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


@dataclass(frozen=True)
class Budgets:
    """What a version must meet to be promoted: parity tolerances, accuracy floor and drop, latency relative to the champion."""

    atol: float = 1e-4
    rtol: float = 1e-3
    min_accuracy: float = 0.9
    max_accuracy_drop: float = 0.01  # at most 1 point below the champion, both measured on the gate's split
    max_latency_ratio: float = 1.5  # median single-example run at most 1.5x the champion's, CPU time, side by side


def version_facts(
    model_path: str | Path, reference_logits: np.ndarray, split: Any, description: str, budgets: Budgets = Budgets()
) -> tuple[dict[str, str], dict[str, Any]]:
    """The tags a version is registered with (sha256, opset, accuracy, parity verdict, description) and its parity report.

    ``reference_logits`` are the source framework's outputs on ``split.images`` (PyTorch, say).
    """
    import onnx

    proto = onnx.load(str(model_path))
    logits = onnx_logits(model_path, split)
    report = compare(reference_logits, logits, atol=budgets.atol, rtol=budgets.rtol, name="ONNX vs reference", raise_on_failure=False)
    opset = next((op.version for op in proto.opset_import if op.domain in ("", "ai.onnx")), 0)
    facts = {
        "sha256": sha256_of(model_path),
        "opset": str(opset),
        "accuracy": f"{contract.accuracy(logits, split.labels):.6f}",
        SPLIT: split_fingerprint(split),
        "parity": "passed" if report.passed else "failed",
        "description": description,
    }
    parity = {"passed": report.passed, "max_abs": report.max_abs, "max_rel": report.max_rel, "atol": report.atol, "rtol": report.rtol}
    return facts, parity


def split_fingerprint(split: Any) -> str:
    """The sha256 of a split's images and labels: an accuracy is comparable only with one measured on the same split."""
    import hashlib

    digest = hashlib.sha256(np.ascontiguousarray(split.images).tobytes())
    digest.update(np.ascontiguousarray(split.labels).tobytes())
    return digest.hexdigest()


def save_reference(registry: Registry, reference_logits: np.ndarray) -> Path:
    """The reference logits as a .npy file to log with a version (the gate re-checks the registered file against them)."""
    path = registry.folder / "reference_logits.npy"
    np.save(path, np.asarray(reference_logits, dtype=np.float64))
    return path


def log_version(
    registry: Registry, model_path: str | Path, reference_logits: np.ndarray, split: Any, description: str, budgets: Budgets = Budgets()
) -> str:
    """Register ``model_path`` as a new version with its accuracy on ``split``, parity report, opset and sha256.

    The MLflow calls of notebook 13's first version: a run with the metric, parameters, parity report
    and reference logits, ``mlflow.onnx.log_model`` (with a signature: the input and output contract),
    ``mlflow.register_model`` and the version's tags.
    Returns the version number.
    """
    import onnx

    mlflow = _mlflow()
    facts, parity = version_facts(model_path, reference_logits, split, description, budgets)
    with mlflow.start_run(experiment_id=registry.experiment_id, run_name=description) as run:
        mlflow.log_metric("accuracy", float(facts["accuracy"]))
        mlflow.log_params({"opset": facts["opset"], "sha256": facts["sha256"]})
        mlflow.log_dict(parity, "parity_report.json")
        mlflow.log_artifact(str(save_reference(registry, reference_logits)))
        info = mlflow.onnx.log_model(
            onnx.load(str(model_path)),
            name="model",
            signature=mlflow.models.infer_signature(split.images[:1], np.asarray(reference_logits[:1], dtype=np.float32)),
            onnx_execution_providers=[CPU_PROVIDER],
            pip_requirements=pins(),
            save_as_external_data=False,
        )
    with contextlib.redirect_stderr(io.StringIO()):  # "Successfully registered model ..." chatter
        registered = mlflow.register_model(info.model_uri, registry.name)
    for key, value in {**facts, "run_id": run.info.run_id}.items():
        registry.client.set_model_version_tag(registry.name, registered.version, key, value)
    return str(registered.version)


def pins() -> list[str]:
    """The pip requirements logged with a version: the installed onnx and onnxruntime, pinned exactly."""
    from labsupport.course.env import installed_version

    return [f"{name}=={installed_version(name)}" for name in ("onnx", "onnxruntime")]


def load_by_alias(registry: Registry, alias: str):
    """The ONNX ModelProto an alias points at, through MLflow's ONNX flavour, after checking the file's sha256."""
    registry.model_path(alias)
    return _mlflow().onnx.load_model(f"models:/{registry.name}@{alias}")


def routing_document(registry: Registry, challenger_percent: int = 0, shadow: bool = False) -> dict[str, Any]:
    """The service's routing document for the registry's aliases: champion, challenger (if set), split, shadow.

    Each version carries its file and the sha256 the registry recorded: the service refuses a file that has changed since.
    """
    aliases = {alias: registry.version_of(alias) for alias in (CHAMPION, CHALLENGER)}
    aliases = {alias: version for alias, version in aliases.items() if version}
    versions = {
        version: {"path": str(registry.model_path(version)), "sha256": registry.tags(version)["sha256"]}
        for version in sorted(set(aliases.values()))
    }
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


def verify_served(registry: Registry, served: dict[str, Any]) -> str:
    """Check the service's routing (``push_routing``'s answer) against the registry: same aliases, registered sha256s.

    The sha256 of each version is the one the service computed from the file it loaded. Raises
    IntegrityError on any difference (a promotion that was never pushed, a file changed on disk).
    """
    expected = {alias: registry.version_of(alias) for alias in (CHAMPION, CHALLENGER)}
    expected = {alias: version for alias, version in expected.items() if version}
    if served.get("aliases") != expected:
        raise IntegrityError(f"the service routes {served.get('aliases')}, the registry's aliases are {expected}")
    for version, loaded in served["versions"].items():
        recorded = registry.tags(version).get("sha256")
        if loaded.get("sha256") != recorded:
            raise IntegrityError(
                f"the service loaded version {version} with sha256 {loaded.get('sha256')}, the registry recorded {recorded}"
            )
    return f"the service serves the registry's aliases {expected}, every file with its registered sha256"


def version_table(registry: Registry) -> list[dict[str, object]]:
    """One row per registered version: description, opset, sha256 prefix, parity verdict, aliases, served as champion, rolled back."""
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
            "served": "yes" if SERVED in v.tags else "-",
            "rolled back": "yes" if v.tags.get(ROLLED_BACK) == "true" else "-",
        }
        for v in versions
    ]
