"""The course website's links (labsupport/maintain/sitecheck.py): launch links, test markers, addresses of this machine."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

from labsupport.maintain import sitecheck

NOTEBOOK = "06_quantization.ipynb"


def _links(launch: sitecheck.Launch) -> dict[str, str]:
    return dict(launch.links(NOTEBOOK))


def test_a_github_course_gets_binder_hub_download_and_source_links():
    links = _links(sitecheck.Launch("https://github.com/school/onnx-lab-class", "spring", "https://hub.school.edu/"))
    assert list(links) == ["Launch on Binder", "Open on the class JupyterHub", "Download the .ipynb", "View the source"]
    assert (
        links["Launch on Binder"]
        == "https://mybinder.org/v2/gh/school/onnx-lab-class/spring?urlpath=lab/tree/notebooks/06_quantization.ipynb"
    )
    hub = urlsplit(links["Open on the class JupyterHub"])
    assert (hub.scheme, hub.netloc, hub.path) == ("https", "hub.school.edu", "/hub/user-redirect/git-pull")
    assert parse_qs(hub.query) == {
        "repo": ["https://github.com/school/onnx-lab-class"],
        "branch": ["spring"],
        "targetpath": ["onnx-lab-class"],  # nbgitpuller's folder: the repository's name
        "urlpath": ["lab/tree/onnx-lab-class/notebooks/06_quantization.ipynb"],
    }
    assert links["Download the .ipynb"] == NOTEBOOK  # next to the page
    assert links["View the source"] == "https://github.com/school/onnx-lab-class/blob/spring/notebooks/06_quantization.ipynb"


def test_without_a_hub_there_is_no_hub_link_and_the_default_is_the_course_itself():
    links = _links(sitecheck.Launch())
    assert "Open on the class JupyterHub" not in links
    assert links["Launch on Binder"].startswith("https://mybinder.org/v2/gh/onnx-lab/onnx-lab/main?")


def test_another_git_host_gets_binders_git_provider_and_a_clone_with_its_name():
    launch = sitecheck.Launch("https://gitlab.example.org/team/course.git", "main", "https://hub.example.org")
    links = _links(launch)
    assert links["Launch on Binder"].startswith("https://mybinder.org/v2/git/https%3A%2F%2Fgitlab.example.org%2Fteam%2Fcourse.git/main?")
    assert launch.folder == "course" and parse_qs(urlsplit(links["Open on the class JupyterHub"]).query)["targetpath"] == ["course"]
    assert links["View the source"] == "https://gitlab.example.org/team/course.git"


def test_the_launch_bar_escapes_and_marks_the_download():
    bar = sitecheck.launch_bar(sitecheck.Launch("https://github.com/a/b", "x&y", "https://h.edu"), NOTEBOOK)
    assert 'href="06_quantization.ipynb" download>' in bar and "x%26y" in bar and "&amp;branch=" in bar
    assert bar.count("<a ") == 4


def test_a_notebook_page_drops_test_markers_and_links_to_this_machine():
    notebook = {
        "cells": [
            {"cell_type": "code", "source": ["# NBVAL_IGNORE_OUTPUT\n", "print(1)  # NBVAL_IGNORE_OUTPUT stays in a comment\n"]},
            {"cell_type": "markdown", "source": "Open <http://127.0.0.1:8000> or <http://localhost:8080/docs>; <https://onnx.ai> stays."},
        ],
        "metadata": {},
    }
    page = json.loads(sitecheck.notebook_page(json.dumps(notebook)))
    assert page["cells"][0]["source"] == "print(1)  # NBVAL_IGNORE_OUTPUT stays in a comment\n"
    assert page["cells"][1]["source"] == "Open `http://127.0.0.1:8000` or `http://localhost:8080/docs`; <https://onnx.ai> stays."


def test_the_landing_page_turns_this_machines_addresses_into_code():
    page = sitecheck.landing_page("Serve it at <http://127.0.0.1:8001>.\n", [])
    assert "`http://127.0.0.1:8001`" in page and "<http" not in page


def test_the_site_check_reports_a_link_to_this_machine(tmp_path):
    (tmp_path / "index.html").write_text('<a href="http://127.0.0.1:8000/">demo</a><a href="https://onnx.ai">fine</a>')
    assert sitecheck.broken_references(tmp_path) == [
        "index.html: link http://127.0.0.1:8000/: this machine's address, which a reader of the website cannot open"
    ]
