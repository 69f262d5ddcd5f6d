"""labsupport: the small helper package that the ONNX Lab notebooks import.

Each public helper says in its docstring which notebook introduces it. Imports run one way, up this
list from ``course`` (which imports no other part of labsupport): ``onnxutil`` uses ``course``,
``models`` uses both, ``topics`` uses the models, ``bench`` and ``exercises`` use everything below them
(not each other), ``maintain`` uses ``exercises``. Any layer may use the installed deploy packages
(``onnx_service``, ``onnx_web_demo``). ``tests/unit/test_layers.py`` fails on an import against this order.

- ``exercises``: the exercise API (``check`` / ``hint`` / ``solution``), one ``nbNN`` module per notebook (00)
- ``bench``: one module per headless suite: ``runtime`` (05), ``quantization`` (06), ``service`` (08);
  ``python -m labsupport.bench``
- ``topics``: helpers of one lesson each: ``quantization``, ``hardware``, ``memory`` (06), ``serving`` (08),
  ``edge`` (09), ``custom_ops`` (10), ``generation`` (11), ``hugging_face`` (12), ``lifecycle`` (13)
- ``models``: one module per course model (definition, training, export): ``digits_cnn`` (02),
  ``digits_keras`` (03), ``digits_sklearn`` (04), ``wide_mlp`` (06), ``conv_bn_relu`` (07),
  ``heavy_classifier`` (08), ``tiny_transformer`` (11); ``contract``: the opset, IR version and digits I/O they share
- ``onnxutil``: ONNX and ONNX Runtime tools: ``graph`` and ``draw`` (01), ``export`` (02),
  ``sessions``, ``timing`` (measure, ratio tables, plots) and ``profiling`` (05), ``optimize`` (07)
- ``course``: ``paths``, ``data``, ``env`` (00), ``compare``, ``display`` (01), ``kernels`` (tests, 06)
- ``maintain``: maintainer tools that no notebook imports (navigation cells, classroom copies, environment files)
"""

import os
import warnings

__version__ = "0.1.0"

# transformers, optimum and onnxruntime-extensions import tqdm.auto, which warns in a notebook kernel
# without ipywidgets; the course's progress bars are plain text, so the warning only adds noise
warnings.filterwarnings("ignore", message="IProgress not found")

if os.environ.get("ONNX_LAB_KERNELS"):
    from labsupport.course import kernels

    kernels.install_from_environment()
