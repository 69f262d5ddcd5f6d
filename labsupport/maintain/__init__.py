"""Maintainer and teacher tools that no notebook imports; each runs as ``python -m labsupport.maintain.NAME``.

The README's table "How the course works" lists them, and CONTRIBUTING.md says when to run which.
"""
