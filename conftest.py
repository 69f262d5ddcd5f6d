"""Root pytest configuration: applies to the notebooks under notebooks/ as well as to tests/."""

from __future__ import annotations


def pytest_collectstart(collector):
    """nbval: leave stderr (progress bars, framework log noise) out of the output comparison."""
    if collector.path is not None and collector.path.suffix == ".ipynb" and hasattr(collector, "skip_compare"):
        collector.skip_compare += ("stderr",)
