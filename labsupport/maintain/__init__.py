"""Maintainer tools (not used by the notebooks): navigation cells, classroom copies, environment files, the docs site check.

Run them as modules: ``python -m labsupport.maintain.navigation``, ``python -m labsupport.maintain.student``,
``python -m labsupport.maintain.sync_environment``; ``docs/conf.py`` imports ``sitecheck``.
"""
