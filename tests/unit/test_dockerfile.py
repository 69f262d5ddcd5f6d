"""deploy/service/Dockerfile and the Triton model repository, checked without a Docker engine or Triton server."""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import sys
import tomllib
from importlib.metadata import distribution
from pathlib import Path

import onnxruntime as ort
import pytest

from labsupport.course.env import pinned_versions
from labsupport.course.paths import artifacts_dir, repo_root
from labsupport.models.digits_cnn import ensure_digits_cnn
from onnx_service import triton
from onnx_service.config import PREFIX, Settings

SERVICE = repo_root() / "deploy" / "service"


def _instructions() -> list[tuple[str, str]]:
    text = (SERVICE / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def _requirements() -> dict[str, str]:
    pins = {}
    for line in (SERVICE / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line)
            assert match, f"deploy/service/requirements.txt: {line!r} is not an exact pin (name==version)"
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _in_build_context(source: str) -> Path:
    """Where a COPY source is: in the checkout, or for ``artifacts/...`` in the generated folder (see paths.artifacts_dir)."""
    generated = source.removeprefix("artifacts/")
    return artifacts_dir() / generated if generated != source else repo_root() / source


def test_every_copy_source_exists_in_the_build_context():
    ensure_digits_cnn()  # the model the image copies in (artifacts/ is generated, not committed)
    copies = [args for op, args in _instructions() if op == "COPY"]
    assert copies, "the Dockerfile copies nothing"
    for args in copies:
        parts = [part for part in shlex.split(args) if not part.startswith("--")]
        for source in parts[:-1]:
            assert _in_build_context(source).exists(), f"COPY source {source} does not exist (build context = repo root)"


def test_container_requirements_are_a_subset_of_the_course_pins():
    course = pinned_versions()
    container = _requirements()
    assert container, "deploy/service/requirements.txt pins nothing"
    for name, version in container.items():
        assert name in course, f"{name} is not a course pin (requirements.txt)"
        assert course[name] == version, f"{name}=={version} differs from the course pin {course[name]}"
    assert not {"torch", "jupyterlab", "tensorflow-cpu"} & set(container), "only runtime dependencies belong in the image"


def _top_level_imports(package: Path) -> set[str]:
    imported = set()
    for source in package.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    return imported


def test_requirements_cover_what_the_service_imports():
    imported = _top_level_imports(SERVICE / "onnx_service")
    third_party = {name for name in imported if name not in sys.stdlib_module_names}
    provided = set(_requirements()) | {"starlette", "anyio"}  # both come with fastapi
    assert third_party <= provided, f"imported but not in deploy/service/requirements.txt: {third_party - provided}"


def test_dockerfile_is_slim_non_root_with_healthcheck_and_runs_the_package():
    instructions = _instructions()
    ops = [op for op, _ in instructions]
    base = next(args for op, args in instructions if op == "FROM")
    assert "slim" in base and "python:3.11" in base
    user = [args for op, args in instructions if op == "USER"]
    assert user and user[-1] not in {"root", "0"}
    assert ops.index("USER") > max(i for i, op in enumerate(ops) if op == "RUN"), "USER must come after the RUN steps"
    health = next(args for op, args in instructions if op == "HEALTHCHECK")
    assert "/ready" in health or "/health" in health
    cmd = next(args for op, args in instructions if op == "CMD")
    assert "onnx_service" in cmd and (SERVICE / "onnx_service" / "__main__.py").is_file()
    env = " ".join(args for op, args in instructions if op == "ENV")
    assert "ONNX_SERVICE_MODEL=/app/model/digits_cnn.onnx" in env


def test_triton_repository_structure(tmp_path):
    model = ensure_digits_cnn()
    config = triton.write_repository(model, tmp_path / "models", max_batch=32, instances=2)
    assert config == tmp_path / "models" / "digits_cnn" / "config.pbtxt"
    assert (config.parent / "1" / "model.onnx").read_bytes() == model.read_bytes()
    parsed = triton.parse_pbtxt(config.read_text())
    assert parsed["name"] == "digits_cnn" == config.parent.name
    assert parsed["backend"] == "onnxruntime" and parsed["max_batch_size"] == 32
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for key, args in (("input", session.get_inputs()), ("output", session.get_outputs())):
        assert [entry["name"] for entry in parsed[key]] == [arg.name for arg in args]
        for entry, arg in zip(parsed[key], args, strict=True):
            assert entry["data_type"] == "TYPE_FP32"
            assert entry["dims"] == list(arg.shape[1:])  # batch dimension left out when max_batch_size > 0
    assert parsed["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    assert parsed["dynamic_batching"] == {"max_queue_delay_microseconds": 100}


def _dockerfile_env() -> dict[str, str]:
    env = {}
    for op, args in _instructions():
        if op == "ENV":
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def test_dockerfile_service_settings_are_valid_and_batching_is_opt_in():
    env = {key: value for key, value in _dockerfile_env().items() if key.startswith(PREFIX) and "${" not in value}
    settings = Settings.from_env(env)  # raises ConfigError for any invalid value
    assert settings.batching is False and settings.host == "0.0.0.0"
    assert {f"{PREFIX}BATCHING", f"{PREFIX}BATCH_MAX_SIZE", f"{PREFIX}BATCH_MAX_WAIT_MS", f"{PREFIX}BATCH_QUEUE_LIMIT"} <= set(env)
    assert Settings.from_env({**env, f"{PREFIX}BATCHING": "1"}).batching


# the fields of Triton's ModelDynamicBatching and ModelQueuePolicy messages (model_config.proto)
DYNAMIC_BATCHING_FIELDS = {
    "preferred_batch_size",
    "max_queue_delay_microseconds",
    "preserve_ordering",
    "priority_levels",
    "default_priority_level",
    "default_queue_policy",
    "priority_queue_policy",
}
QUEUE_POLICY_FIELDS = {"timeout_action", "default_timeout_microseconds", "allow_timeout_override", "max_queue_size"}


def test_triton_dynamic_batching_block_matches_the_service_batcher(tmp_path):
    settings = Settings(batching=True, max_batch=64, batch_max_size=32, batch_max_wait_ms=2.5, batch_queue_limit=128)
    block = triton.DynamicBatching.from_settings(settings)
    config = triton.write_repository(ensure_digits_cnn(), tmp_path, max_batch=settings.max_batch, batching=block)
    parsed = triton.parse_pbtxt(config.read_text())
    batching = parsed["dynamic_batching"]
    assert set(batching) <= DYNAMIC_BATCHING_FIELDS and set(batching["default_queue_policy"]) <= QUEUE_POLICY_FIELDS
    assert batching["max_queue_delay_microseconds"] == 2500  # the service waits in ms, Triton in microseconds
    assert batching["preferred_batch_size"] == [32] and all(
        1 <= size <= parsed["max_batch_size"] for size in batching["preferred_batch_size"]
    )
    assert batching["default_queue_policy"]["max_queue_size"] == 128  # Triton rejects beyond it, like the service's 503
    with pytest.raises(triton.TritonError, match="between 1 and max_batch_size 16"):
        triton.config_text("m", [], [], max_batch=16, batching=triton.DynamicBatching(preferred_batch_sizes=(32,)))


def test_triton_command_line_takes_the_batching_settings_from_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(f"{PREFIX}BATCH_MAX_WAIT_MS", "4")
    monkeypatch.setenv(f"{PREFIX}BATCH_QUEUE_LIMIT", "10")
    assert triton.main([str(ensure_digits_cnn()), str(tmp_path), "--from-env"]) == 0
    printed = triton.parse_pbtxt(capsys.readouterr().out)
    assert printed["dynamic_batching"] == {
        "preferred_batch_size": [32],
        "max_queue_delay_microseconds": 4000,
        "default_queue_policy": {"max_queue_size": 10},
    }


def test_triton_without_batching_keeps_all_dims_and_refuses_bad_names(tmp_path):
    model = ensure_digits_cnn()
    parsed = triton.parse_pbtxt(triton.write_repository(model, tmp_path, name="cnn_nobatch", max_batch=0).read_text())
    assert parsed["max_batch_size"] == 0 and parsed["input"][0]["dims"] == [-1, 1, 8, 8]
    assert "dynamic_batching" not in parsed
    with pytest.raises(triton.TritonError, match="use letters, digits"):
        triton.write_repository(model, tmp_path, name="bad name/..")
    with pytest.raises(FileNotFoundError, match="model file not found"):
        triton.write_repository(tmp_path / "none.onnx", tmp_path)
    with pytest.raises(ValueError, match="missing"):
        triton.parse_pbtxt('input [ { name: "x" ')


@pytest.mark.parametrize(
    ("folder", "distribution_name", "package"), [("service", "onnx-service", "onnx_service"), ("web", "onnx-web-demo", "onnx_web_demo")]
)
def test_deploy_packages_are_installed_and_never_import_labsupport(folder, distribution_name, package):
    root = repo_root() / "deploy" / folder
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == distribution_name and project["dependencies"] == []  # the course's requirements.txt pins them
    assert not (root / "__init__.py").exists(), f"deploy/{folder} is a project folder, not a package: import {package}"
    installed = distribution(distribution_name)  # `make` installs it editable
    assert installed.version == importlib.import_module(package).__version__
    assert "labsupport" not in _top_level_imports(root / package), "imports go one way: labsupport -> deploy packages"
