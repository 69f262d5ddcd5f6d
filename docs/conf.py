"""Sphinx configuration of the course website (`make docs`): MyST-NB renders the committed notebooks.

The source folder is the repository root, so the README (the landing page) and the notebooks keep
their own relative links; only README.md, CONTRIBUTING.md and notebooks/*.ipynb are read. Notebooks are never
executed here: the site shows the outputs that nbval verified. The README's course map becomes the
site's navigation, each notebook page opens with links that run it (Binder; a JupyterHub through
nbgitpuller when ``onnx_lab_hub_url`` is set), download it and show its source, and
``labsupport/maintain/sitecheck.py`` fails the build on a broken internal link or image.
The links' settings: ``docs/build.py --repository URL --branch NAME --hub-url URL`` (``make docs SITE_HUB=...``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from docutils import nodes

from labsupport.maintain import navigation, sitecheck

project = "ONNX Lab"
author = "ONNX Lab contributors"
copyright = "ONNX Lab contributors"
language = "en"

root_doc = "README"
include_patterns = ["README.md", "CONTRIBUTING.md", "notebooks/*.ipynb"]
# pruned while Sphinx walks the source folder (the repository root)
exclude_patterns = [".git", ".venv", ".venv-latest", "artifacts", "build", "deploy", "node_modules", "data"]

extensions = ["myst_nb"]
nb_execution_mode = "off"  # show the committed, nbval-verified outputs; never re-run a notebook
nb_ipywidgets_js = {}  # nothing from a CDN: the site must work offline
myst_heading_anchors = 3  # "../README.md#course-map" in the notebooks resolves to the heading

html_theme = "furo"
html_title = "ONNX Lab"
html_static_path = ["_static"]
html_css_files = ["onnx-lab.css"]
html_copy_source = False
html_show_sourcelink = False
templates_path = ["_templates"]
html_additional_pages = {"index": "landing.html"}  # "/" opens the README (README.html)


def _page_source(app, docname: str, source: list[str]) -> None:
    if docname == root_doc:
        source[0] = sitecheck.landing_page(source[0], navigation.course_map())
    elif docname.startswith("notebooks/"):
        source[0] = sitecheck.notebook_page(source[0])


def _collapse_going_deeper(app, doctree) -> None:
    """A notebook's "Going deeper" parts open collapsed on the site too, as in JupyterLab: their body in <details>."""
    for section in doctree.findall(nodes.section):
        title = section.next_node(nodes.title)
        if title is None or not title.astext().startswith("Going deeper"):
            continue
        opening = '<details class="going-deeper"><summary>Show this part (a first reading can skip it)</summary>'
        section.insert(section.index(title) + 1, nodes.raw("", opening, format="html"))
        section.append(nodes.raw("", "</details>", format="html"))


def _launch(app) -> sitecheck.Launch:
    return sitecheck.Launch(app.config.onnx_lab_repository, app.config.onnx_lab_branch, app.config.onnx_lab_hub_url)


def _launch_bar(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    if pagename.startswith("notebooks/") and "body" in context:
        context["body"] = sitecheck.launch_bar(_launch(app), f"{Path(pagename).name}.ipynb") + context["body"]


def _copy_notebooks(app, exception: Exception | None) -> None:
    """Each page's download link: the committed notebook next to its page."""
    if exception is None and app.builder.format == "html":
        for _, notebook, _ in navigation.course_map():
            shutil.copy2(Path(app.srcdir) / "notebooks" / notebook, Path(app.outdir) / "notebooks" / notebook)


def setup(app):
    """The README becomes the landing page (the course map its navigation), notebook pages get their launch links;
    the built site's links are checked."""
    defaults = sitecheck.Launch()
    app.add_config_value("onnx_lab_repository", defaults.repository, "html", str)
    app.add_config_value("onnx_lab_branch", defaults.branch, "html", str)
    app.add_config_value("onnx_lab_hub_url", defaults.hub, "html", str)
    app.connect("source-read", _page_source)
    app.connect("doctree-read", _collapse_going_deeper)
    app.connect("html-page-context", _launch_bar)
    app.connect("build-finished", _copy_notebooks, priority=400)  # before the check (500) that follows the links
    app.connect("build-finished", sitecheck.check_built_site)
    return {"parallel_read_safe": True}
