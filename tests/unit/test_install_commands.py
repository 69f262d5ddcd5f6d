"""Every way to install the course installs the same local packages as `make`: labsupport and the two deploy packages.

Notebooks 00, 08, 09 and 13 import onnx_service or onnx_web_demo; an install route that forgets them fails there.
"""

from __future__ import annotations

import re

from labsupport.course.paths import repo_root

ROOT = repo_root()
ROUTES = ["Makefile", "README.md", "environment.yml", "binder/postBuild"]
EDITABLE = re.compile(r"-e\s+([^\s`]+)")


def _local_installs(text: str) -> list[set[str]]:
    """The ``-e`` targets of each ``pip install --no-deps`` command in a text (one command a line)."""
    return [set(EDITABLE.findall(line)) for line in text.splitlines() if re.search(r"pip install .*--no-deps", line)]


def test_every_install_route_installs_labsupport_and_the_deploy_packages():
    makefile = _local_installs((ROOT / "Makefile").read_text(encoding="utf-8"))
    wanted = {".", "deploy/service", "deploy/web"}
    assert makefile and all(targets == wanted for targets in makefile)
    assert {path.parent.relative_to(ROOT).as_posix() for path in ROOT.glob("deploy/*/pyproject.toml")} | {"."} == wanted
    for route in ROUTES:
        commands = _local_installs((ROOT / route).read_text(encoding="utf-8"))
        assert commands, f"{route} has no pip install --no-deps command"
        assert all(targets == wanted for targets in commands), f"{route}: {commands}"


def test_the_check_catches_a_route_that_forgets_the_deploy_packages():
    assert _local_installs("pip install --no-deps -e .\n") == [{"."}]
