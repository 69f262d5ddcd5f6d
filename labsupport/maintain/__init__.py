"""Maintainer and teacher tools (not used by the notebooks): navigation cells, environment files, the docs site's
links and check, the learner copy of the course, the classroom hub, ONNX Runtime's C/C++ headers (notebook 10).

Run them as modules: ``python -m labsupport.maintain.navigation``, ``python -m labsupport.maintain.student``
(``make student``), ``python -m labsupport.maintain.hub`` (``make hub``), ``python -m labsupport.maintain.sync_environment``,
``python -m labsupport.maintain.ort_headers`` (.ci/run);
``docs/conf.py`` imports ``sitecheck``.
"""
