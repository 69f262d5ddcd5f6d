"""The image Binder builds from binder/, checked with repo2docker itself as far as it runs without Docker.

1. repo2docker (PyPI ``jupyter-repo2docker``, pinned) renders the Dockerfile it would build (``--no-build``): the
   steps and their order are checked, not guessed.
2. The image is repo2docker's base environment (a conda lock file that ships in repo2docker) updated by pip with
   binder/environment.yml's pins. The test asks pip (dry runs against the package index) for the metadata of both
   sets, plays pip's update (a base package is kept when it satisfies what the pins need, replaced otherwise), and
   checks every requirement of every package that ends up in the image. Given a binder/ without the
   ``notebook`` pin, the check finds the broken Notebook 7.4 that the image then holds: it can fail.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import repo2docker
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from labsupport.course.paths import repo_root

ROOT = repo_root()
LOCK = Path(repo2docker.__file__).parent / "buildpacks" / "conda" / "environment.py-3.11-linux-64.lock"
BINDER_USER = ["--user-id", "1000", "--user-name", "jovyan"]  # what mybinder.org builds with
# conda-forge names that differ from the PyPI project they package
CONDA_TO_PYPI = {
    "jupyterhub-base": "jupyterhub",
    "nbconvert-core": "nbconvert",
    "brotli-python": "brotli",
    "python-fastjsonschema": "fastjsonschema",
}
LINUX_311 = {"python_version": "3.11", "python_full_version": "3.11.14", "sys_platform": "linux", "platform_system": "Linux"}
LINUX_311 |= {
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


@pytest.fixture(scope="module")
def dockerfile() -> str:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("jupyter-repo2docker")), "--no-build", "--debug", *BINDER_USER, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _step(dockerfile: str, pattern: str) -> int:
    found = [number for number, line in enumerate(dockerfile.splitlines()) if re.search(pattern, line)]
    assert len(found) == 1, f"{pattern!r}: {len(found)} lines"
    return found[0]


def test_repo2docker_builds_binder_with_conda_then_pip_then_post_build(dockerfile):
    assert "Building conda environment for python=3.11" not in dockerfile  # that goes to the log, the Dockerfile to stdout
    lock = _step(dockerfile, r"COPY .*environment-2epy-2d3-2e11-2dlinux-2d64-2elock")  # the base environment: this lock, Python 3.11
    update = _step(dockerfile, r'\$\{MAMBA_EXE\} env update -p \$\{NB_PYTHON_PREFIX\} --file "binder/environment.yml"')
    repo = _step(dockerfile, r"^COPY --chown=1000:1000 src/ \$\{REPO_DIR\}/$")
    user = max(number for number, line in enumerate(dockerfile.splitlines()) if line == "USER ${NB_USER}")
    post_build = _step(dockerfile, r"^RUN \./binder/postBuild$")
    assert lock < update < repo < user < post_build, "base environment, pins, the repository, then postBuild as the user"
    # conda's Graphviz (binder/environment.yml) is found first: no apt.txt, and the environment leads PATH
    assert "graphviz" not in "\n".join(line for line in dockerfile.splitlines() if "apt-get" in line)
    assert re.search(r"^ENV PATH=\$\{NB_PYTHON_PREFIX\}/bin:", dockerfile, re.M)
    post = (ROOT / "binder" / "postBuild").read_text(encoding="utf-8")
    assert post.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in post
    install = post.index("pip install --no-deps --no-build-isolation -e . -e deploy/service -e deploy/web")
    assert install < post.index("python -m labsupport.maintain.ort_headers"), "notebook 10's headers, once labsupport is installed"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    requires: tuple[str, ...]


def _base_pins() -> dict[str, str]:
    """``{pypi name: version}`` of the Python packages in repo2docker's base environment for Python 3.11."""
    pins = {}
    for file in re.findall(r"^https://\S+/([^/#]+)\.(?:conda|tar\.bz2)#", LOCK.read_text(encoding="utf-8"), re.M):
        name, version, build = file.rsplit("-", 2)
        if build.startswith("py") and name not in {"python", "pip"}:
            pins[canonicalize_name(CONDA_TO_PYPI.get(name, name))] = version
    return pins


def _mamba_pip_lines() -> list[str]:
    """The pip section of binder/environment.yml, one entry a line: the requirements file mamba hands to pip."""
    document = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text(encoding="utf-8"))
    return next(item["pip"] for item in document["dependencies"] if isinstance(item, dict))


def _pip_report(tmp_path: Path, name: str, lines: list[str], *options: str, prerequisite) -> dict[str, Package]:
    """What pip would install for ``lines`` (a dry run against the package index), with each package's requirements."""
    requirements, report = tmp_path / f"{name}.txt", tmp_path / f"{name}.json"
    requirements.write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    done = subprocess.run([*command, *options, "-r", str(requirements)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        assert "ResolutionImpossible" not in done.stderr, done.stderr[-4000:]
        prerequisite(False, f"pip could not reach the package index: {done.stderr[-500:]}")
    packages = {}
    for item in json.loads(report.read_text(encoding="utf-8"))["install"]:
        metadata = item["metadata"]
        packages[canonicalize_name(metadata["name"])] = Package(
            metadata["name"], metadata["version"], tuple(metadata.get("requires_dist", []))
        )
    return packages


def _needs(package: Package, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    """The requirements of ``package`` that apply on Binder (Linux x86-64, Python 3.11), with ``extras`` requested."""
    found = []
    for text in package.requires:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({**LINUX_311, "extra": extra}) for extra in {"", *extras}):
            found.append(requirement)
    return found


def image_packages(base: dict[str, Package], pinned: dict[str, Package], resolved: dict[str, Package]) -> dict[str, Package]:
    """The image after pip installs ``pinned`` over ``base``: a base package stays while it satisfies what is asked of it."""
    image = dict(base) | pinned
    todo, seen = [(name, frozenset()) for name in pinned], set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for requirement in _needs(image[name], extras):
            wanted = canonicalize_name(requirement.name)
            current = image.get(wanted)
            if current is None or not requirement.specifier.contains(current.version, prereleases=True):
                image[wanted] = resolved[wanted]
            todo.append((wanted, frozenset(requirement.extras)))
    return image


def conflicts(image: dict[str, Package]) -> list[str]:
    """Every requirement of a package in the image that the image's version of that requirement breaks."""
    found = []
    for package in image.values():
        for requirement in _needs(package):
            present = image.get(canonicalize_name(requirement.name))
            if present is not None and not requirement.specifier.contains(present.version, prereleases=True):
                found.append(f"{package.name} {package.version} requires {requirement}; the image would have {present.version}")
    return sorted(found)


@pytest.fixture(scope="module")
def environments(tmp_path_factory, prerequisite):
    if (sys.platform, platform.machine()) != ("linux", "x86_64"):
        pytest.skip("Binder builds for Linux x86-64, and pip evaluates environment markers for the machine it runs on")
    folder = tmp_path_factory.mktemp("binder")
    base = _pip_report(
        folder, "base", [f"{name}=={version}" for name, version in _base_pins().items()], "--no-deps", prerequisite=prerequisite
    )
    # the CPU index of PyTorch is left out: not every test machine reaches it, and CPU or CUDA torch pins nothing of Jupyter's
    ours = _pip_report(folder, "ours", [line for line in _mamba_pip_lines() if not line.startswith("--")], prerequisite=prerequisite)
    requirements = [Requirement(line) for line in _mamba_pip_lines() if not line.startswith("--")]
    pinned = {canonicalize_name(pin.name) for pin in requirements if pin.marker is None or pin.marker.evaluate(LINUX_311)}
    return base, ours, pinned


def test_the_binder_lock_is_the_one_repo2docker_uses_and_knows_the_jupyter_base():
    pins = _base_pins()
    assert {"jupyterlab", "notebook", "jupyterhub", "jupyter-server", "ipykernel"} <= set(pins)
    assert pins["notebook"].startswith("7.4.") and pins["jupyterhub"].split(".")[0] == "5"


def test_binder_pins_and_repo2dockers_base_make_one_consistent_image(environments):
    base, ours, pinned = environments
    image = image_packages(base, {name: ours[name] for name in pinned}, ours)
    assert conflicts(image) == []
    for name in pinned:
        assert image[name] == ours[name]
    assert image["jupyterhub"].version.split(".")[0] == base["jupyterhub"].version.split(".")[0], (
        "Binder's hub and ours share a major version"
    )


def test_without_the_notebook_pin_the_image_holds_a_broken_notebook(environments):
    base, ours, pinned = environments
    image = image_packages(base, {name: ours[name] for name in pinned - {"notebook"}}, ours)
    assert any(problem.startswith(f"notebook {base['notebook'].version} requires jupyterlab") for problem in conflicts(image)), conflicts(
        image
    )


def test_mamba_hands_pip_the_cpu_index_of_pytorch():
    lines = _mamba_pip_lines()
    # mamba writes each entry on a line of a requirements file for `pip install -r`, where an option line is valid
    assert lines[0] == "--extra-index-url https://download.pytorch.org/whl/cpu"
    assert any(line.startswith("torch==") for line in lines)


Z2JH = ROOT / "deploy" / "hub" / "z2jh-config.yaml"


def test_the_zero_to_jupyterhub_config_runs_the_image_repo2docker_builds_from_the_learner_course(tmp_path):
    from labsupport.maintain import student

    text = Z2JH.read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    build = re.search(r"jupyter-repo2docker (.*?) build/classroom/learner", re.sub(r"\\\n#\s*", " ", text))
    assert build, "the file says how its image is built"
    options = dict(re.findall(r"(--[\w-]+) (\S+)", build.group(1)))
    image, target = options["--image-name"], options["--target-repo-dir"]
    singleuser = config["singleuser"]
    assert image == f"{singleuser['image']['name']}:{singleuser['image']['tag']}"
    assert f"cp -rn {target}/. ~/onnx-lab/" in " ".join(singleuser["lifecycleHooks"]["postStart"]["exec"]["command"])
    assert singleuser["extraEnv"]["ONNX_LAB_SOLUTIONS"] == "hidden"
    assert config["hub"]["config"]["JupyterHub"]["authenticator_class"] == "null", "closed until the teacher picks a log-in"
    course = tmp_path / "learner"
    student.write_learner_course([ROOT / "notebooks" / "00_start_here.ipynb"], course)
    assert (course / singleuser["defaultUrl"].removeprefix("/lab/tree/onnx-lab/")).is_file()
    command = [str(Path(sys.executable).with_name("jupyter-repo2docker")), "--no-build", "--debug", *BINDER_USER]
    done = subprocess.run([*command, "--target-repo-dir", target, str(course)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    # --target-repo-dir becomes the build argument REPO_DIR (repo2docker/app.py), where the course is copied and postBuild runs
    assert "ARG REPO_DIR=${HOME}" in done.stdout and "COPY --chown=1000:1000 src/ ${REPO_DIR}/" in done.stdout
    assert done.stdout.index("WORKDIR ${REPO_DIR}") < done.stdout.index("RUN ./binder/postBuild")
    assert '--file "binder/environment.yml"' in done.stdout, "the same binder/ as the course's Binder image"
