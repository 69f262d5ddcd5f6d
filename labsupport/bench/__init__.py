"""Benchmarks: ``timing`` (measure, ratio tables, plots) and one module per headless suite.

``python -m labsupport.bench SUITE`` (``make bench``) runs ``runtime`` (05), ``quantization`` (06),
``service`` (08) or ``all``, prints ratios measured in one run and writes their JSON under ``artifacts/``.
"""
