"""Sphinx configuration of the course website (`make docs`): MyST-NB renders the committed notebooks.

The source folder is the repository root, so the README (the landing page) and the notebooks keep
their own relative links; only README.md and notebooks/*.ipynb are read. Notebooks are never
executed here: the site shows the outputs that nbval verified. The README's course map becomes the
site's navigation, and ``labsupport/maintain/sitecheck.py`` fails the build on a broken internal link or image.
"""

from __future__ import annotations

from labsupport.maintain import navigation, sitecheck

project = "ONNX Lab"
author = "ONNX Lab contributors"
copyright = "ONNX Lab contributors"
language = "en"

root_doc = "README"
include_patterns = ["README.md", "notebooks/*.ipynb"]
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


def _landing_page(app, docname: str, source: list[str]) -> None:
    if docname == root_doc:
        source[0] = sitecheck.landing_page(source[0], navigation.course_map())


def setup(app):
    """The README becomes the landing page (the course map its navigation); the built site's links are checked."""
    app.connect("source-read", _landing_page)
    app.connect("build-finished", sitecheck.check_built_site)
    return {"parallel_read_safe": True}
