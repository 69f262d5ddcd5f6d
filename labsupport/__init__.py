"""labsupport: the helper package that the ONNX Lab notebooks import.

Each public helper says in its docstring which notebook introduces it. Imports run one way, up from
``course`` (which imports no other part of labsupport): ``onnxutil`` uses ``course``,
``models`` uses both, ``topics`` uses the models, ``bench`` and ``exercises`` use everything below them
(not each other), ``maintain`` uses ``exercises``. Any layer may use the installed deploy packages
(``onnx_service``, ``onnx_web_demo``). ``tests/unit/test_layers.py`` fails on an import against this order.

The modules of each subpackage are listed once, in the README's table "How the course works"
(tests/unit/test_module_list.py checks it against the folders).
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
