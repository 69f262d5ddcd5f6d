"""Azure Machine Learning route (labsupport.topics.azure_ml, deploy/azureml), validated offline with sockets refused.

The validation passes on the course's files, sends nothing anywhere, and rejects each known wrong input: a YAML
key the SDK does not know, a bad endpoint name, YAML that disagrees with the Python entities, a scoring script
that does not parse, a code folder without the service package, and scoring scripts that answer differently
from the service.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import socket
import sys
import textwrap

import pytest
import yaml
from azure.ai.ml.exceptions import ValidationException
from marshmallow.exceptions import ValidationError

from labsupport.course.env import pinned_versions
from labsupport.course.paths import repo_root
from labsupport.maintain import azure_ml_yaml
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import azure_ml

SCHEMA_ERRORS = (ValidationError, ValidationException)


@pytest.fixture
def offline():
    """Sockets refused for the whole test; fails the test if anything tried to connect."""
    with azure_ml.no_network() as attempts:
        yield attempts
    assert attempts == [], f"network access attempted: {attempts}"


@pytest.fixture
def yaml_folder(tmp_path):
    """``write(kind, **changes)``: a copy of deploy/azureml's YAML files in tmp_path with one document changed."""

    def write(kind: str, **changes) -> object:
        azure_ml_yaml.write_yaml(tmp_path)
        shutil.copy2(azure_ml.DEPLOY_DIR / azure_ml.CONDA_FILE, tmp_path)  # the environment loader reads it
        document = {**azure_ml.yaml_documents()[kind], **changes}
        (tmp_path / azure_ml.YAML_FILES[kind]).write_text(yaml.safe_dump(document), encoding="utf-8")
        return tmp_path

    return write


def test_no_network_refuses_and_records_a_connection():
    with azure_ml.no_network() as attempts, pytest.raises(OSError, match="refused"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    assert len(attempts) == 1
    socket.getaddrinfo("localhost", None)  # restored afterwards


def test_validate_passes_offline_and_sends_nothing(offline):
    lines = azure_ml.validate()
    assert any("a valid ManagedOnlineDeployment" in line for line in lines)
    assert any("the SDK's syntax check of score.py passed" in line for line in lines)
    assert any("classified exactly as onnx_service's model does" in line for line in lines)
    assert any("422 missing_field" in line for line in lines)


def test_committed_yaml_files_are_what_the_module_writes():
    for kind, name in azure_ml.YAML_FILES.items():
        assert (azure_ml.DEPLOY_DIR / name).read_text(encoding="utf-8") == azure_ml.yaml_text(kind), (
            f"run python -m {azure_ml_yaml.__name__}"
        )


def test_the_sdk_loader_rejects_an_unknown_key(yaml_folder, offline):
    with pytest.raises(SCHEMA_ERRORS, match="instance_kind"):
        azure_ml.load_yaml(yaml_folder("deployment", instance_kind="Standard_DS3_v2"))


def test_the_sdk_loader_rejects_a_bad_endpoint_name_and_auth_mode(yaml_folder, offline):
    with pytest.raises(SCHEMA_ERRORS, match="auth_mode"):
        azure_ml.load_yaml(yaml_folder("endpoint", name="onnx_lab digits!", auth_mode="password"))


def test_yaml_that_disagrees_with_the_python_entities_is_rejected(yaml_folder, offline):
    with pytest.raises(azure_ml.AzureMLValidationError, match=r"deployment\.yml says .*Standard_DS2_v2"):
        azure_ml.validate(yaml_folder("deployment", instance_type="Standard_DS2_v2"))


def test_a_scoring_script_that_does_not_parse_is_rejected(tmp_path, offline):
    code = azure_ml.stage_code(tmp_path / "code")
    (code / azure_ml.SCORING_SCRIPT).write_text("def init(:\n    pass\n", encoding="utf-8")
    assets = azure_ml.build_entities(ensure_digits_cnn(), code)
    with pytest.raises(ValidationException, match="syntax errors"):
        azure_ml._check_files(assets)


def test_a_code_folder_without_the_service_package_is_rejected(tmp_path, offline):
    code = azure_ml.stage_code(tmp_path / "code")
    for path in sorted((code / "onnx_service").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (code / "onnx_service").rmdir()
    with pytest.raises(azure_ml.AzureMLValidationError, match=r"missing: .*onnx_service/validation.py"):
        azure_ml._check_files(azure_ml.build_entities(ensure_digits_cnn(), code))


WRONG_SCORING = {
    # the same class for every image: shaped like an answer, not the model's
    "a constant answer": "run = lambda raw_data, request_headers=None: {'predictions': [0] * 8}",
    # a bad request answered 200 with an error body: the service would say 422
    "200 for a bad request": textwrap.dedent(
        """
        _original = run
        def run(raw_data, request_headers=None):
            answer = _original(raw_data, request_headers)
            return answer.message if hasattr(answer, "status_code") else answer
        """
    ),
    # argmax over the wrong axis of the logits
    "the wrong axis": textwrap.dedent(
        """
        def run(raw_data, request_headers=None):
            import json, numpy as np
            model = _served["model"]
            logits = model.run(np.asarray(json.loads(raw_data)["inputs"], dtype=np.float32))[0]
            return {"predictions": logits.argmax(axis=0).tolist()}
        """
    ),
}


@pytest.mark.parametrize("wrong", WRONG_SCORING, ids=list(WRONG_SCORING))
def test_a_scoring_script_that_answers_unlike_the_service_is_rejected(tmp_path, wrong):
    code = azure_ml.stage_code(tmp_path / "code")
    script = code / azure_ml.SCORING_SCRIPT
    script.write_text(script.read_text(encoding="utf-8") + "\n" + WRONG_SCORING[wrong] + "\n", encoding="utf-8")
    with pytest.raises(azure_ml.AzureMLValidationError, match=r"score.py (answered|failed)"):
        azure_ml._check_scoring(code, ensure_digits_cnn())


def test_score_py_refuses_a_model_folder_without_exactly_one_onnx_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # score.py prepends its folder: undone after the test
    spec = importlib.util.spec_from_file_location("entry_module", azure_ml.DEPLOY_DIR / azure_ml.SCORING_SCRIPT)
    score = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(score)
    with pytest.raises(FileNotFoundError, match=r"expected exactly one .onnx file under AZUREML_MODEL_DIR=.*found none"):
        score.model_file(tmp_path)
    (tmp_path / "a.onnx").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.onnx").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"a.onnx, .*b.onnx"):
        score.model_file(tmp_path)
    (tmp_path / "a.onnx").unlink()
    assert score.model_file(tmp_path) == tmp_path / "sub" / "b.onnx"


def test_the_environment_pins_the_course_versions_and_the_inference_server():
    conda = yaml.safe_load((azure_ml.DEPLOY_DIR / azure_ml.CONDA_FILE).read_text(encoding="utf-8"))
    pip = dict(line.split("==") for line in conda["dependencies"][-1]["pip"])
    pins = pinned_versions()
    assert {name: pip[name] for name in ("onnxruntime", "onnx", "numpy")} == {name: pins[name] for name in ("onnxruntime", "onnx", "numpy")}
    assert "azureml-inference-server-http" in pip and "python=3.11" in conda["dependencies"]


def test_score_py_imports_the_service_and_never_labsupport():
    tree = ast.parse((azure_ml.DEPLOY_DIR / azure_ml.SCORING_SCRIPT).read_text(encoding="utf-8"))
    modules = {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    modules |= {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "onnx_service" in modules and "labsupport" not in modules


def test_the_deployment_names_what_the_readme_of_deploy_azureml_documents():
    readme = (repo_root() / "deploy" / "azureml" / "README.md").read_text(encoding="utf-8")
    for name in (azure_ml.ENDPOINT_NAME, azure_ml.INSTANCE_TYPE, azure_ml.BASE_IMAGE, azure_ml.DEPLOYMENT_NAME):
        assert name in readme


class _FakeRegistry:
    """The three calls ``from_registry`` makes on a lifecycle.Registry, for version 4 of a store."""

    name = "digits-classifier"

    def __init__(self, path):
        self.path = path

    def version_of(self, alias):
        return "4" if alias == "champion" else None

    def model_path(self, version):
        return self.path

    def tags(self, version):
        return {"sha256": "ab" * 32, "run_id": "r123", "accuracy": "0.99"}


def test_a_registry_version_keeps_its_number_sha256_and_run_id_on_azure(tmp_path):
    source = azure_ml.from_registry(_FakeRegistry(ensure_digits_cnn()))
    assets = azure_ml.build_entities(source, tmp_path)
    assert (assets.model.version, str(assets.deployment.model)) == ("4", "azureml:onnx-lab-digits-cnn:4")
    assert assets.model.tags["sha256"] == "ab" * 32 and assets.model.tags["mlflow_version"] == "4" and assets.model.tags["run_id"] == "r123"
    assert assets.deployment.environment_variables[azure_ml.SHA256_SETTING] == "ab" * 32  # score.py's init() checks the file
    with pytest.raises(KeyError, match="no 'challenger' alias"):
        azure_ml.from_registry(_FakeRegistry(ensure_digits_cnn()), "challenger")
    plain = azure_ml.build_entities(ensure_digits_cnn(), tmp_path)  # notebook 02's file, as model.yml: no sha256 to check
    assert plain.model.version == "1" and azure_ml.SHA256_SETTING not in plain.deployment.environment_variables


def test_the_deployment_runs_one_worker_and_one_request_per_vcpu():
    deployment = azure_ml.yaml_documents()["deployment"]
    assert deployment["environment_variables"]["WORKER_COUNT"] == str(azure_ml.WORKERS) == "4"
    assert deployment["environment_variables"]["ONNX_SERVICE_THREADS"] == "1"
    assert deployment["request_settings"] == {"max_concurrent_requests_per_instance": 4}
