"""labsupport: the small helper package that the ONNX Lab notebooks import.

Each public helper says in its docstring which notebook introduces it. Modules, by notebook:

- ``paths``: the repo root, ``data/`` and ``artifacts/`` from any working directory (00)
- ``data``: the course's data sets, offline and checksum-verified (00)
- ``env``: version check (``require``), report, ``python -m labsupport doctor`` (00)
- ``exercises``: the exercise API (``check`` / ``hint`` / ``solution``), one ``nbNN`` module per notebook (00)
- ``compare``: numerical parity between two sets of outputs (00, 01)
- ``display``: errors that teach (``expect_error``) and tables (01)
- ``graph``: summarize / op_histogram / draw an ONNX graph (01)
- ``models``: the course's PyTorch digits CNN, its training and export, ``ensure_digits_cnn`` (02)
- ``keras_models``, ``sklearn_models``: the same task in Keras and scikit-learn (03, 04)
- ``runtime``, ``profiling``, ``bench``, ``runtime_bench``: sessions, providers, profiles, benchmarks (05)
- ``quantization``, ``quantization_bench``: INT8/INT4 variants measured on size, accuracy, latency (06)
- ``optimize``: ORT's graph optimizer levels, made visible (07)
- ``serve``, ``service_bench``: start and load-test the inference service of ``deploy/service``; batching bench (08)
- ``edge``: the model in a browser, in Node.js and in the ``.ort`` format (09)
- ``transformer``: a tiny decoder-only transformer with and without a KV cache (11)
- ``hf``: Hugging Face models built locally, Optimum export, onnxruntime-genai generation (12)
- ``lifecycle``: model versions in MLflow, the promotion gate, aliases pushed to the service (13)
- ``kernels``: a second ONNX Runtime kernel path (``ONNX_LAB_KERNELS``) to prove outputs CPU-independent (tests, 06)
"""

import os
import warnings

__version__ = "0.1.0"

# transformers, optimum and onnxruntime-extensions import tqdm.auto, which warns in a notebook kernel
# without ipywidgets; the course's progress bars are plain text, so the warning only adds noise
warnings.filterwarnings("ignore", message="IProgress not found")

if os.environ.get("ONNX_LAB_KERNELS"):
    from labsupport import kernels

    kernels.install_from_environment()
