"""Root pytest configuration: applies to the notebooks under notebooks/ as well as to tests/."""

from __future__ import annotations


def pytest_collectstart(collector):
    """nbval: leave stderr (progress bars, framework log noise) and SVG pictures out of the output comparison.

    nbval already skips PNG and JPEG; a graph drawing's SVG is a picture too (its coordinates come from
    Graphviz's layout, which may move with its version), and its text/plain repr is still compared.
    """
    if collector.path is not None and collector.path.suffix == ".ipynb" and hasattr(collector, "skip_compare"):
        collector.skip_compare += ("stderr", "image/svg+xml")
