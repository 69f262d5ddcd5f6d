"""The course's ONNX model on Azure Machine Learning with the SDK v2 (``azure-ai-ml``), built and validated offline.

Introduced in notebook 13: a registered model version carried to a managed online endpoint. The same four
entities (a model and an environment, which Azure ML calls assets, an endpoint and a deployment) exist twice,
and ``validate`` shows that they agree without an Azure subscription and without sending anything anywhere
(``no_network`` refuses every connection and records the attempts):

- as SDK entities built in Python (``build_entities``): ``Model``, ``Environment``, ``ManagedOnlineEndpoint``
  and ``ManagedOnlineDeployment``, what ``MLClient.begin_create_or_update`` sends;
- as the YAML files in deploy/azureml (``yaml_documents``; ``python -m labsupport.maintain.azure_ml_yaml`` writes them,
  ``az ml ... create -f`` reads them),
  loaded back with the SDK's own loaders (``load_model``, ``load_environment``, ``load_online_endpoint``,
  ``load_online_deployment``), which validate them against the SDK's schemas.

The deployment's code folder (``stage_code``: deploy/azureml/score.py and the service package ``onnx_service``
beside it, in artifacts/azureml/code) goes through the SDK's syntax check of score.py, and score.py runs
in a fresh Python, as Azure ML's inference server runs it, on test images and on a bad request: in the
course's interpreter (``validate``), and in a virtual environment built from conda.yml's pip section
(``conda_venv``; ``make test`` does it), which can import only what the deployment's image installs.
``from_registry`` carries a registry version to Azure ML: its version number, its sha256 (which score.py
then checks when it loads the file) and its run id.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from labsupport.course.data import load_digits
from labsupport.course.paths import artifact, artifacts_dir, relative, repo_root
from labsupport.models.digits_cnn import ensure_digits_cnn

DEPLOY_DIR = repo_root() / "deploy" / "azureml"
SCORING_SCRIPT = "score.py"
CONDA_FILE = "conda.yml"
CODE_ARTIFACT = "azureml/code"  # the staged code folder, under artifacts/
MODEL_ARTIFACT = "digits_cnn.onnx"
ARTIFACTS_FROM_YAML = "../../artifacts"  # where deploy/azureml's YAML files find artifacts/ (the default folder)
MODEL_NAME, MODEL_VERSION = "onnx-lab-digits-cnn", "1"  # the YAML route: notebook 02's file as version 1
ENVIRONMENT_NAME, ENVIRONMENT_VERSION = "onnx-lab-onnxruntime", "1"
# Azure ML's CPU base image; conda.yml adds the course's onnxruntime, onnx and numpy and the inference server
BASE_IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest"
ENDPOINT_NAME = "onnx-lab-digits"  # endpoint names are unique per Azure region: add a suffix of your own
DEPLOYMENT_NAME = "blue"
# the SDK's minimum recommended size for general-purpose endpoints (it warns for Standard_DS1_v2 and DS2_v2)
INSTANCE_TYPE, INSTANCE_COUNT = "Standard_DS3_v2", 1
# Standard_DS3_v2 has 4 vCPUs: 4 inference-server workers (WORKER_COUNT, read by azureml-inference-server-http; its
# default is 1) of one ONNX Runtime thread each, and 4 requests in flight per instance (the SDK's default is 1;
# Azure answers 429 beyond 2 x max_concurrent_requests_per_instance x instance_count pending requests)
WORKERS = 4
SERVICE_SETTINGS = {"ONNX_SERVICE_THREADS": "1", "ONNX_SERVICE_MAX_BATCH": "64", "WORKER_COUNT": str(WORKERS)}
REQUEST_SETTINGS = {"max_concurrent_requests_per_instance": WORKERS}
SHA256_SETTING = "ONNX_SERVICE_MODEL_SHA256"  # score.py (onnx_service's Settings) refuses a model file with another sha256
VENV_PREFIX = "azureml-env-"  # build/azureml-env-<conda.yml's sha256 prefix>: the deployment's pip packages, nothing else
TAGS = {"course": "onnx-lab", "notebook": "13"}
MODEL_DESCRIPTION = (
    "ONNX Lab's digits CNN, served by deploy/azureml/score.py "
    "(model.yml: notebook 02's file; notebook 13: the MLflow registry's champion, named in its tags)"
)
# the SDK logs "Class DeploymentTemplateReferenceSchema: This is an experimental class" when it writes a Model
# as YAML (Model.dump): the schema of a field the course never sets; its errors still show
logging.getLogger("azure.ai.ml._utils._experimental").setLevel(logging.ERROR)
YAML_FILES = {"model": "model.yml", "environment": "environment.yml", "endpoint": "endpoint.yml", "deployment": "deployment.yml"}
SCHEMAS = {
    "model": "model.schema.json",
    "environment": "environment.schema.json",
    "endpoint": "managedOnlineEndpoint.schema.json",
    "deployment": "managedOnlineDeployment.schema.json",
}


class AzureMLValidationError(RuntimeError):
    """The Azure ML assets disagree, miss a file, or the scoring script does not answer like the service."""


@dataclass(frozen=True)
class ModelSource:
    """The file an Azure ML model asset uploads, its version there, its sha256 (None: not checked) and lineage tags."""

    path: Path
    version: str = MODEL_VERSION
    sha256: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def settings(self) -> dict[str, str]:
        """The deployment's environment variables: the service's settings, and the sha256 score.py must find."""
        return {**SERVICE_SETTINGS, **({SHA256_SETTING: self.sha256} if self.sha256 else {})}


def from_registry(registry: Any, alias: str = "champion") -> ModelSource:
    """The registry version an alias points at, as an Azure ML model source: same version number, its sha256 and run id.

    ``registry`` is a ``labsupport.topics.lifecycle.Registry``; its file is checked against the recorded sha256 first.
    """
    version = registry.version_of(alias)
    if version is None:
        raise KeyError(f"no {alias!r} alias on {registry.name}")
    path, recorded = registry.model_path(version), registry.tags(version)
    lineage = {"mlflow_model": registry.name, "mlflow_version": version, "sha256": recorded["sha256"], "run_id": recorded["run_id"]}
    return ModelSource(path, version, recorded["sha256"], lineage)


@dataclass(frozen=True)
class AzureMLAssets:
    """The four SDK entities of the deployment."""

    model: Any
    environment: Any
    endpoint: Any
    deployment: Any


@contextlib.contextmanager
def no_network() -> Iterator[list[str]]:
    """Refuse every socket connection and name lookup inside the block; yields the list of attempts (notebook 13)."""
    attempts: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(repr(args[1:] if args and isinstance(args[0], socket.socket) else args)[:200])
        raise OSError("network access refused: Azure ML assets are validated offline")

    saved = {name: getattr(socket, name) for name in ("create_connection", "getaddrinfo")}
    saved_methods = {name: getattr(socket.socket, name) for name in ("connect", "connect_ex")}
    for name in saved:
        setattr(socket, name, refuse)
    for name in saved_methods:
        setattr(socket.socket, name, refuse)
    try:
        yield attempts
    finally:
        for name, original in saved.items():
            setattr(socket, name, original)
        for name, original in saved_methods.items():
            setattr(socket.socket, name, original)


def model_reference(version: str = MODEL_VERSION) -> str:
    """The registered model version the deployment serves, ``azureml:NAME:VERSION``."""
    return f"azureml:{MODEL_NAME}:{version}"


def environment_reference() -> str:
    """The registered environment version the deployment runs in, ``azureml:NAME:VERSION``."""
    return f"azureml:{ENVIRONMENT_NAME}:{ENVIRONMENT_VERSION}"


def stage_code(destination: Path | None = None) -> Path:
    """Copy score.py and the installed ``onnx_service`` package into the code folder Azure ML uploads (artifacts/azureml/code)."""
    import onnx_service  # the installed service package of deploy/service

    folder = destination or artifacts_dir() / CODE_ARTIFACT
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy2(DEPLOY_DIR / SCORING_SCRIPT, folder / SCORING_SCRIPT)
    shutil.copytree(Path(onnx_service.__file__).parent, folder / "onnx_service", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def yaml_documents() -> dict[str, dict[str, Any]]:
    """The four YAML documents of deploy/azureml (paths relative to that folder), keyed like ``YAML_FILES``."""
    schema = "https://azuremlschemas.azureedge.net/latest/"
    return {
        "model": {
            "$schema": schema + SCHEMAS["model"],
            "name": MODEL_NAME,
            "version": MODEL_VERSION,
            "type": "custom_model",
            "path": f"{ARTIFACTS_FROM_YAML}/{MODEL_ARTIFACT}",
            "description": MODEL_DESCRIPTION,
            "tags": TAGS,
        },
        "environment": {
            "$schema": schema + SCHEMAS["environment"],
            "name": ENVIRONMENT_NAME,
            "version": ENVIRONMENT_VERSION,
            "image": BASE_IMAGE,
            "conda_file": CONDA_FILE,
            "description": "ONNX Runtime and the inference server for deploy/azureml/score.py",
        },
        "endpoint": {
            "$schema": schema + SCHEMAS["endpoint"],
            "name": ENDPOINT_NAME,
            "auth_mode": "key",
            "description": "ONNX Lab's digits classifier (notebook 13)",
            "tags": TAGS,
        },
        "deployment": {
            "$schema": schema + SCHEMAS["deployment"],
            "name": DEPLOYMENT_NAME,
            "endpoint_name": ENDPOINT_NAME,
            "model": model_reference(),
            "environment": environment_reference(),
            "code_configuration": {"code": f"{ARTIFACTS_FROM_YAML}/{CODE_ARTIFACT}", "scoring_script": SCORING_SCRIPT},
            "instance_type": INSTANCE_TYPE,
            "instance_count": INSTANCE_COUNT,
            "environment_variables": SERVICE_SETTINGS,
            "request_settings": REQUEST_SETTINGS,
        },
    }


def yaml_text(kind: str) -> str:
    """The text of deploy/azureml/<kind>.yml as ``yaml_documents`` makes it (the committed files must equal it)."""
    header = (
        "# Generated by python -m labsupport.maintain.azure_ml_yaml from labsupport/topics/azure_ml.py: edit that module, then run it.\n"
    )
    return header + yaml.safe_dump(yaml_documents()[kind], sort_keys=False, width=140)


def _source(model: ModelSource | Path | None) -> ModelSource:
    if isinstance(model, ModelSource):
        return model
    return ModelSource(Path(model) if model is not None else artifact(MODEL_ARTIFACT))


def build_entities(model: ModelSource | Path | None = None, code: Path | None = None) -> AzureMLAssets:
    """The deployment as SDK entities built in Python (notebook 13 shows these calls).

    ``model``: a ``ModelSource`` (``from_registry``: the registry's version number, sha256 and run id), or a
    file path, or None for notebook 02's file; a path or None gives version 1 without a sha256, as the YAML files.
    """
    from azure.ai.ml.entities import (
        CodeConfiguration,
        Environment,
        ManagedOnlineDeployment,
        ManagedOnlineEndpoint,
        Model,
        OnlineRequestSettings,
    )

    source = _source(model)
    documents = yaml_documents()
    model = Model(
        name=MODEL_NAME,
        version=source.version,
        type="custom_model",
        path=str(source.path),
        description=documents["model"]["description"],
        tags={**TAGS, **source.tags},
    )
    environment = Environment(
        name=ENVIRONMENT_NAME,
        version=ENVIRONMENT_VERSION,
        image=BASE_IMAGE,
        conda_file=str(DEPLOY_DIR / CONDA_FILE),
        description=documents["environment"]["description"],
    )
    endpoint = ManagedOnlineEndpoint(name=ENDPOINT_NAME, auth_mode="key", description=documents["endpoint"]["description"], tags=TAGS)
    deployment = ManagedOnlineDeployment(
        name=DEPLOYMENT_NAME,
        endpoint_name=ENDPOINT_NAME,
        model=model_reference(source.version),
        environment=environment_reference(),
        code_configuration=CodeConfiguration(code=str(code or artifacts_dir() / CODE_ARTIFACT), scoring_script=SCORING_SCRIPT),
        instance_type=INSTANCE_TYPE,
        instance_count=INSTANCE_COUNT,
        environment_variables=source.settings(),
        request_settings=OnlineRequestSettings(**REQUEST_SETTINGS),
    )
    return AzureMLAssets(model, environment, endpoint, deployment)


def load_yaml(folder: Path = DEPLOY_DIR) -> AzureMLAssets:
    """The four YAML files loaded with the SDK's loaders, which reject unknown keys, wrong types and bad names."""
    from azure.ai.ml import load_environment, load_model, load_online_deployment, load_online_endpoint

    return AzureMLAssets(
        model=load_model(folder / YAML_FILES["model"]),
        environment=load_environment(folder / YAML_FILES["environment"]),
        endpoint=load_online_endpoint(folder / YAML_FILES["endpoint"]),
        deployment=load_online_deployment(folder / YAML_FILES["deployment"]),
    )


def summary(assets: AzureMLAssets) -> dict[str, Any]:
    """What must agree between the YAML files and the Python entities (local paths by their last parts)."""
    model, environment, endpoint, deployment = assets.model, assets.environment, assets.endpoint, assets.deployment
    return {
        "model": (model.name, str(model.version), model.type, Path(model.path).name, model.tags),
        "environment": (environment.name, str(environment.version), environment.image, environment.conda_file),
        "endpoint": (endpoint.name, endpoint.auth_mode, endpoint.tags),
        "deployment": (
            deployment.name,
            deployment.endpoint_name,
            str(deployment.model).removeprefix("azureml:"),  # the YAML loader drops the prefix, the constructor keeps it
            str(deployment.environment).removeprefix("azureml:"),
            Path(deployment.code_configuration.code).parts[-2:],
            deployment.code_configuration.scoring_script,
            deployment.instance_type,
            deployment.instance_count,
            deployment.environment_variables,
            deployment.request_settings.max_concurrent_requests_per_instance,
        ),
    }


# Runs score.py in a fresh interpreter the way Azure ML's inference server does: loaded from its path with
# importlib, init() once, then run(body text, request headers). Where the server is installed (the conda.yml venv)
# its own AMLResponse is used; the course's environment lacks it, so a stand-in with the same constructor records
# what it was given. Sockets are refused.
_SCORE_DRIVER = """
import importlib.util, json, socket, sys, types
def refuse(*args, **kwargs):
    raise OSError("network access refused")
socket.create_connection = socket.getaddrinfo = socket.socket.connect = socket.socket.connect_ex = refuse
try:
    from azureml_inference_server_http.api.aml_response import AMLResponse
    def refusal(answer):
        return {"status": answer.status_code, "body": answer.get_json()}
except ImportError:
    class AMLResponse:
        def __init__(self, message, status_code, response_headers={}, json_str=False, run_function_failed=False):
            self.message, self.status_code = message, status_code
    def refusal(answer):
        return {"status": answer.status_code, "body": answer.message}
    module = types.ModuleType("azureml_inference_server_http.api.aml_response")
    module.AMLResponse = AMLResponse
    sys.modules["azureml_inference_server_http.api.aml_response"] = module
script, requests = sys.argv[1], json.loads(sys.stdin.read())
spec = importlib.util.spec_from_file_location("entry_module", script)
score = importlib.util.module_from_spec(spec)
spec.loader.exec_module(score)
score.init()
answers = []
for body, headers in requests:
    answer = score.run(body, headers)
    answers.append(refusal(answer) if isinstance(answer, AMLResponse) else {"status": 200, "body": answer})
import onnx_service
print(json.dumps({"answers": answers, "service_package": onnx_service.__file__, "prefix": sys.prefix}))
"""


def run_scoring_script(
    code: Path,
    model: ModelSource | Path,
    requests: list[tuple[str, dict[str, str]]],
    python: str | Path = sys.executable,
) -> dict[str, Any]:
    """Run ``code``/score.py in a fresh ``python`` with the model mounted as Azure ML mounts it; its answers to ``requests``.

    The interpreter runs isolated (``-I``: no PYTHONPATH, no user site-packages), with the deployment's
    environment variables (``ModelSource.settings``: a source with a sha256 makes init() check the file).
    """
    source = _source(model)
    with tempfile.TemporaryDirectory(prefix="azureml-models-") as mount:
        model_dir = Path(mount) / MODEL_NAME / source.version
        model_dir.mkdir(parents=True)
        shutil.copy2(source.path, model_dir / source.path.name)
        environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
        environment.update({"AZUREML_MODEL_DIR": str(model_dir), **source.settings()})
        completed = subprocess.run(
            [str(python), "-I", "-c", _SCORE_DRIVER, str(code / SCORING_SCRIPT)],
            input=json.dumps(requests),
            capture_output=True,
            text=True,
            timeout=120,
            env=environment,
            cwd=mount,
        )
    if completed.returncode != 0:
        raise AzureMLValidationError(f"score.py failed in a fresh Python ({python}):\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _check_scoring(code: Path, model: ModelSource | Path, python: str | Path = sys.executable) -> list[str]:
    from onnx_service.model import load_served_model

    source = _source(model)
    images = load_digits().test.images[:8]
    good = (json.dumps({"inputs": images.tolist()}), {"Content-Type": "application/json"})
    bad = (json.dumps({"input": images[0].tolist()}), {"Content-Type": "application/json"})
    result = run_scoring_script(code, source, [good, bad], python)
    served, refused = result["answers"]
    reference = load_served_model(source.path)
    expected = reference.postprocess(reference.run(images.astype(np.float32)))["predictions"]
    if not Path(result["service_package"]).resolve().is_relative_to(code.resolve()):
        raise AzureMLValidationError(f"score.py imported onnx_service from {result['service_package']}, not from its code folder")
    if served["status"] != 200 or served["body"]["predictions"] != expected:
        raise AzureMLValidationError(f"score.py answered {served}, the service's model predicts {expected}")
    if refused["status"] != 422 or refused["body"]["error"] != "missing_field":
        raise AzureMLValidationError(f"score.py answered a body without 'inputs' with {refused}, expected 422 missing_field")
    where = "the course's Python" if Path(python) == Path(sys.executable) else f"the Python of {_shown(Path(result['prefix']))}"
    checked = f", its sha256 checked by init() ({SHA256_SETTING})" if source.sha256 else ""
    return [
        f"score.py in a fresh, isolated run of {where}, as the inference server runs it: {len(expected)} test images "
        f"classified exactly as onnx_service's model does, with onnx_service imported from the code folder{checked}",
        f"a body without 'inputs' gets {refused['status']} {refused['body']['error']} from score.py, the service's answer",
    ]


def conda_pip_requirements(conda_file: Path = DEPLOY_DIR / CONDA_FILE) -> list[str]:
    """The pip section of conda.yml: what the deployment's image installs besides Python and pip."""
    dependencies = yaml.safe_load(conda_file.read_text(encoding="utf-8"))["dependencies"]
    return next(item["pip"] for item in dependencies if isinstance(item, dict) and "pip" in item)


def conda_venv(build: Path | None = None, conda_file: Path = DEPLOY_DIR / CONDA_FILE, timeout: float = 900) -> Path:
    """A virtual environment with conda.yml's pip section and nothing else; returns its python. Needs PyPI or pip's cache.

    Built once under ``build`` (default build/ at the repository root), in a folder named after conda.yml's
    sha256, so that a changed conda.yml gets a new one; a lock file serializes concurrent builders.
    """
    text = conda_file.read_text(encoding="utf-8")
    wanted = next(item for item in yaml.safe_load(text)["dependencies"] if isinstance(item, str) and item.startswith("python="))
    running = f"python={sys.version_info.major}.{sys.version_info.minor}"
    if wanted != running:
        raise AzureMLValidationError(f"conda.yml asks for {wanted}; this interpreter is {running}: the venv would not be the deployment's")
    folder = (build or repo_root() / "build") / (VENV_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:12])
    python, done = folder / "bin" / "python", folder / ".complete"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / (folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            # no pip of its own and no .pyc written ahead: this interpreter's pip installs into it (--python): 5-9 s, not 20
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
            pip = [sys.executable, "-m", "pip", "--python", str(python), "--quiet", "--disable-pip-version-check"]
            install = [*pip, "install", "--no-compile", *conda_pip_requirements(conda_file)]
            completed = subprocess.run(install, capture_output=True, text=True, timeout=timeout)
            if completed.returncode != 0:
                raise AzureMLValidationError(f"pip could not install conda.yml's pip section:\n{completed.stderr[-2000:]}")
            done.write_text("\n".join(conda_pip_requirements(conda_file)) + "\n", encoding="utf-8")
    return python


def _shown(path: Path) -> str:
    """``artifacts/...`` or a repo-relative path where it has one, else the full path."""
    shown = relative(path)
    return shown if "/" in shown else str(path)


def _check_files(assets: AzureMLAssets) -> list[str]:
    # an ast.parse of score.py, which begin_create_or_update runs before it contacts Azure
    from azure.ai.ml._utils._endpoint_utils import validate_scoring_script

    code = Path(assets.deployment.code_configuration.code)
    needed = [Path(assets.model.path), code / SCORING_SCRIPT, code / "onnx_service" / "validation.py", DEPLOY_DIR / CONDA_FILE]
    missing = [_shown(path) for path in needed if not path.is_file()]
    if missing:
        raise AzureMLValidationError(
            f"missing: {', '.join(missing)} (run labsupport.topics.azure_ml.stage_code() after ensure_digits_cnn())"
        )
    validate_scoring_script(assets.deployment)
    listed = [f"the model file ({needed[0].name})", *(_shown(path) for path in needed[1:])]  # a registry's folder names vary
    return [f"files present: {', '.join(listed)}; the SDK's syntax check of score.py passed"]


def validate(folder: Path = DEPLOY_DIR, model: ModelSource | None = None, python: str | Path = sys.executable) -> list[str]:
    """Check everything offline that can be checked without Azure; returns what was checked, raises AzureMLValidationError.

    Stages the code folder and makes notebook 02's model if needed, loads ``folder``'s YAML files with the SDK's
    loaders, compares them with ``build_entities`` of that model, checks the files and runs score.py with ``python``
    on ``model`` (default: the YAML files' model; ``from_registry``: a registry version, its sha256 checked by init()).
    Introduced in notebook 13.
    """
    model_path = ensure_digits_cnn()
    code = stage_code()
    built, loaded = build_entities(model_path, code), load_yaml(folder)
    lines = [f"{name}: a valid {type(getattr(loaded, kind)).__name__} (the SDK's loader)" for kind, name in YAML_FILES.items()]
    expected, found = summary(built), summary(loaded)
    for kind in YAML_FILES:
        if expected[kind] != found[kind]:
            raise AzureMLValidationError(f"{YAML_FILES[kind]} says {found[kind]}, the Python entity {expected[kind]}")
    lines.append("the YAML files and the Python entities agree on names, versions, image, size, code and settings")
    served = build_entities(model or model_path, code)
    return lines + _check_files(served) + _check_scoring(code, model or model_path, python)
