"""JupyterLab as a classroom expects it: binder/overrides.json, installed by `make` and by binder/postBuild.

The overrides turn off the "official Jupyter news" prompt, the news feed and the update check (the
requests JupyterLab would make to other sites) and the extension manager (PyPI), and shut a notebook's
kernel down when it is closed, as defaults that a user can still change in the Settings Editor.
"""

from __future__ import annotations

import json
import shutil
import sys
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from labsupport.course.paths import repo_root

ROOT = repo_root()
OVERRIDES = ROOT / "binder" / "overrides.json"
LAB_DIR = Path(sys.prefix) / "share" / "jupyter" / "lab"
INSTALLED = LAB_DIR / "settings" / "overrides.d" / "onnx-lab.json"
TOKEN = "onnx-lab-settings-test"
EXPECTED = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension:plugin": {"enabled": False},
    # closing a notebook shuts its kernel down: on Binder (2 GB) or a shared hub, kernels left running add up
    "@jupyterlab/notebook-extension:tracker": {"kernelShutdown": True},
}


def _schema(plugin_id: str) -> dict:
    package, plugin = plugin_id.split(":")
    return json.loads((LAB_DIR / "schemas" / package / f"{plugin}.json").read_text(encoding="utf-8"))


def test_overrides_turn_off_what_reaches_other_sites_and_match_the_schemas():
    overrides = json.loads(OVERRIDES.read_text(encoding="utf-8"))
    assert overrides == EXPECTED
    for plugin_id, values in overrides.items():
        schema = _schema(plugin_id)
        jsonschema.validate(values, schema)  # names and types as this JupyterLab defines them
        assert set(values) <= set(schema["properties"]), plugin_id


def test_overrides_are_installed_in_this_environment(prerequisite):
    prerequisite(INSTALLED.is_file(), f"{INSTALLED} is missing: `make lab` / `make test` install it from binder/overrides.json")
    assert json.loads(INSTALLED.read_text(encoding="utf-8")) == json.loads(OVERRIDES.read_text(encoding="utf-8"))


def test_binder_installs_the_overrides_where_jupyterlab_reads_them():
    post_build = (ROOT / "binder" / "postBuild").read_text(encoding="utf-8")
    assert "cp binder/overrides.json" in post_build and "/settings/overrides.d" in post_build and "/onnx-lab.json" in post_build
    assert "binder/overrides.json" in (ROOT / "Makefile").read_text(encoding="utf-8")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode("utf-8")


@pytest.mark.slow
def test_jupyterlab_starts_with_the_news_prompt_and_update_check_off(tmp_path, jupyterlab):
    settings = tmp_path / "app-settings" / "overrides.d"
    settings.mkdir(parents=True)
    shutil.copy(OVERRIDES, settings / "onnx-lab.json")
    lab = jupyterlab(
        f"--LabApp.app_settings_dir={settings.parent}",
        env={"JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")},
    )
    for plugin_id, values in EXPECTED.items():
        reply = json.loads(_get(lab.url(f"/lab/api/settings/{plugin_id}")))
        # overrides become the defaults of the schema that the server hands to the page
        defaults = {key: reply["schema"]["properties"][key]["default"] for key in values}
        assert defaults == values and reply["settings"] == {}, plugin_id
