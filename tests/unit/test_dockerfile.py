"""deploy/service/Dockerfile, its requirements and .dockerignore, checked without a Docker engine.

The Triton model repository (onnx_service.triton) is tested in test_triton.py, the rule that the deploy packages never
import labsupport in test_layers.py.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import ClassVar

import pytest

from labsupport.course.env import pinned_versions
from labsupport.course.paths import artifacts_dir, repo_root
from labsupport.models.digits_cnn import ensure_digits_cnn
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


def test_requirements_cover_what_the_service_imports(imports):
    imported = {name.split(".")[0] for _, _, name in imports(SERVICE / "onnx_service")} - {"onnx_service"}
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
