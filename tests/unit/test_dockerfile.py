"""deploy/service/Dockerfile and the Triton model repository, checked without a Docker engine or Triton server."""

from __future__ import annotations

import ast
import http.server
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from importlib.metadata import distribution, packages_distributions
from pathlib import Path
from typing import ClassVar

import numpy as np
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
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^;\s]+)(\s*;.+)?", line)
            assert match, f"deploy/service/requirements.txt: {line!r} is not an exact pin (name==version, maybe ; marker)"
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
    pinned = {name.replace("_", "-") for name in _requirements()}
    modules = packages_distributions()  # module -> distributions, e.g. swagger_ui_bundle -> swagger-ui-bundle-v2
    provided = {module for module, dists in modules.items() if pinned & {d.lower().replace("_", "-") for d in dists}}
    provided |= {"starlette", "anyio"}  # both come with fastapi
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
    assert parsed["parameters"] == [
        {"key": "intra_op_thread_count", "value": {"string_value": "1"}},
        {"key": "inter_op_thread_count", "value": {"string_value": "1"}},
    ]


def _label_classifier(path: Path) -> Path:
    """The service's contract with a scikit-learn-style ``label`` output of shape ``[batch]`` (rank 1) next to ``logits``."""
    from onnx import TensorProto, helper, numpy_helper, save

    weights = numpy_helper.from_array(np.zeros((64, 10), dtype=np.float32), "weights")
    shape = numpy_helper.from_array(np.array([-1, 64], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["image", "shape"], ["flat"]),
            helper.make_node("MatMul", ["flat", "weights"], ["logits"]),
            helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0),
        ],
        "label_classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10]),
        ],
        [weights, shape],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def test_triton_label_output_of_rank_one_gets_dims_one_and_a_reshape(tmp_path):
    model = _label_classifier(tmp_path / "label_classifier.onnx")
    parsed = triton.parse_pbtxt(triton.write_repository(model, tmp_path / "models").read_text())
    label, logits = parsed["output"]
    # Triton refuses dims: [ ] (rank >= 1); its docs write a [batch] output as dims [ 1 ] reshaped to [ ]
    assert label == {"name": "label", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}}
    assert logits == {"name": "logits", "data_type": "TYPE_FP32", "dims": [10]}
    assert all(entry["dims"] for entry in [*parsed["input"], *parsed["output"]]), "no empty dims anywhere"


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
    # the service's BATCH_MAX_SIZE is a cap; Triton's guide says preferred sizes "should not be used for most models"
    assert "preferred_batch_size" not in batching
    assert batching["default_queue_policy"]["max_queue_size"] == 128  # Triton rejects beyond it, like the service's 503
    explicit = triton.DynamicBatching(preferred_batch_sizes=(8,)).text(max_batch=16)
    assert triton.parse_pbtxt(explicit)["dynamic_batching"]["preferred_batch_size"] == [8]  # only when asked for
    with pytest.raises(triton.TritonError, match="between 1 and max_batch_size 16"):
        triton.config_text("m", [], [], max_batch=16, batching=triton.DynamicBatching(preferred_batch_sizes=(32,)))


def test_triton_command_line_takes_the_batching_settings_from_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(f"{PREFIX}BATCH_MAX_WAIT_MS", "4")
    monkeypatch.setenv(f"{PREFIX}BATCH_QUEUE_LIMIT", "10")
    monkeypatch.setenv(f"{PREFIX}THREADS", "3")
    assert triton.main([str(ensure_digits_cnn()), str(tmp_path), "--from-env"]) == 0
    printed = triton.parse_pbtxt(capsys.readouterr().out)
    assert printed["dynamic_batching"] == {"max_queue_delay_microseconds": 4000, "default_queue_policy": {"max_queue_size": 10}}
    threads = {entry["key"]: entry["value"]["string_value"] for entry in printed["parameters"]}
    assert threads == {"intra_op_thread_count": "3", "inter_op_thread_count": "1"}  # the service's THREADS, per instance
    with pytest.raises(triton.TritonError, match="threads must be >= 1"):
        triton.config_text("m", [], [], threads=0)


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


def _healthcheck_command() -> list[str]:
    health = next(args for op, args in _instructions() if op == "HEALTHCHECK")
    return json.loads(health[health.index("CMD") + len("CMD") :].strip())


class _Probe(http.server.BaseHTTPRequestHandler):
    status = 200
    paths: ClassVar[list[str]] = []

    def do_GET(self):
        type(self).paths.append(self.path)
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_healthcheck_asks_ready_on_the_configured_port(status, healthy):
    handler = type("Probe", (_Probe,), {"status": status, "paths": []})
    with http.server.HTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        command = _healthcheck_command()
        assert command[0] == "python"
        env = {**os.environ, f"{PREFIX}PORT": str(server.server_address[1])}  # not the image's default 8080
        result = subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, timeout=30)
        server.shutdown()
    assert handler.paths == ["/ready"]
    assert (result.returncode == 0) is healthy, result.stderr.decode()


def _docker_pattern(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as a regex (Go filepath.Match plus ``**``, as Docker's pattern matcher)."""
    parts = re.split(r"(\*\*/?|\*|\?)", pattern.strip("/"))
    wildcard = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(wildcard.get(part, re.escape(part)) for part in parts))


def _sent_to_docker(path: str, rules: list[tuple[bool, re.Pattern]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent folders decides."""
    prefixes = ["/".join(path.split("/")[:n]) for n in range(1, path.count("/") + 2)]
    excluded = False
    for exclude, pattern in rules:
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            excluded = exclude
    return not excluded


def test_dockerignore_sends_exactly_what_the_dockerfile_copies():
    lines = (SERVICE / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    rules = [(not line.startswith("!"), _docker_pattern(line.lstrip("!"))) for line in lines if line.strip() and not line.startswith("#")]
    copies = [shlex.split(args)[:-1] for op, args in _instructions() if op == "COPY"]
    for source in (source for sources in copies for source in sources):
        assert _sent_to_docker(f"{source}/x.py" if "." not in Path(source).name else source, rules), f"COPY {source} is ignored"
    for heavy in (".venv/lib/python3.11/site-packages/x.py", "deploy/web/node_modules/a.js", ".git/HEAD", "artifacts/other.onnx"):
        assert not _sent_to_docker(heavy, rules), f"{heavy} would be sent to the builder"
    assert not _sent_to_docker("deploy/service/onnx_service/__pycache__/app.cpython-311.pyc", rules)
