"""Where things live: the repo root, ``data/`` and ``artifacts/``, from any working directory.

Introduced in notebook 00. Notebooks, tests and the command line all resolve paths through here,
so that a notebook opened from ``notebooks/`` and a test run from the repo root agree.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT_ENV_VAR = "ONNX_LAB_ROOT"
ARTIFACTS_ENV_VAR = "ONNX_LAB_ARTIFACTS"
_MARKER = "pyproject.toml"
_PROJECT_NAME = 'name = "onnx-lab"'


def _is_repo_root(path: Path) -> bool:
    marker = path / _MARKER
    return marker.is_file() and _PROJECT_NAME in marker.read_text(encoding="utf-8")


def repo_root() -> Path:
    """The course's root folder (holding ``pyproject.toml``), from $ONNX_LAB_ROOT, the cwd or this file."""
    override = os.environ.get(ROOT_ENV_VAR)
    if override:
        root = Path(override).expanduser().resolve()
        if not _is_repo_root(root):
            raise FileNotFoundError(f"${ROOT_ENV_VAR}={override} is not the ONNX Lab folder (no {_MARKER} of onnx-lab there)")
        return root
    for start in (Path.cwd().resolve(), Path(__file__).resolve().parent):
        for candidate in (start, *start.parents):
            if _is_repo_root(candidate):
                return candidate
    raise FileNotFoundError(
        f"cannot find the ONNX Lab folder (a {_MARKER} of onnx-lab) above {Path.cwd()}; "
        f"run from inside the repository or set ${ROOT_ENV_VAR}"
    )


def data_dir() -> Path:
    """The shipped data sets, ``<root>/data``."""
    return repo_root() / "data"


def artifacts_dir() -> Path:
    """The git-ignored folder for everything generated (models, profiles, plots), created on demand.

    ``<root>/artifacts`` unless $ONNX_LAB_ARTIFACTS names another folder: the unit tests and
    ``make portability``'s lanes use an empty one, so that they regenerate every model themselves.
    """
    override = os.environ.get(ARTIFACTS_ENV_VAR)
    path = Path(override).expanduser().resolve() if override else repo_root() / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


def artifact(name: str) -> Path:
    """Path of a generated file under ``artifacts/`` (sub-folders are created); see ``ARTIFACTS`` for the names."""
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"artifact name must be a relative path inside artifacts/, got {name!r}")
    path = artifacts_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def relative(path: os.PathLike[str] | str) -> str:
    """A path shown relative to the repo root (notebook outputs never show this machine's paths).

    Generated files show as ``artifacts/...`` wherever $ONNX_LAB_ARTIFACTS puts them.
    """
    resolved = Path(path).resolve()
    for base, shown in ((artifacts_dir(), "artifacts"), (repo_root(), "")):
        if resolved.is_relative_to(base):
            return (Path(shown) / resolved.relative_to(base)).as_posix()
    return resolved.name


# The stable names of the artifacts that one notebook writes and later ones load.
# A later notebook regenerates a missing one with the helper named here instead of asking the
# learner to re-run the earlier notebook.
ARTIFACTS: dict[str, str] = {
    "digits_cnn.onnx": "02: the digits CNN exported with torch.onnx (labsupport.models.digits_cnn.ensure_digits_cnn)",
    "digits_cnn.pt": "02: its PyTorch weights (labsupport.models.digits_cnn.ensure_digits_cnn)",
    "digits_keras.onnx": "03: the Keras digits CNN converted with tf2onnx, NCHW input (labsupport.models.digits_keras.ensure_digits_keras)",
    "digits_sklearn.onnx": (
        "04: scaler + logistic regression via skl2onnx, no ZipMap (labsupport.models.digits_sklearn.ensure_digits_sklearn)"
    ),
    "bench_runtime.json": "05: `make bench` / python -m labsupport.bench runtime",
    "profiles/": "05: ONNX Runtime profiler traces",
    "digits_mlp.onnx": "06: the wide MLP 64-2048-2048-10 (labsupport.models.wide_mlp.ensure_digits_mlp)",
    "digits_cnn_int8.onnx": (
        "06: the static INT8 (QDQ, per-channel) CNN, used by 09 (labsupport.topics.quantization.ensure_digits_cnn_int8)"
    ),
    "bench_quantization.json": "06: python -m labsupport.bench quantization",
    "bench_service.json": "08: python -m labsupport.bench service (dynamic batching vs one inference per request)",
    "08_heavy_classifier.onnx": (
        "08: the heavy stand-in model of the load tests (labsupport.models.heavy_classifier.write_heavy_classifier)"
    ),
    "lifecycle/": "13: the MLflow registry (mlflow.db, mlruns/) and the builds registered as versions (labsupport.topics.lifecycle)",
    "edge/page_images.json": "09: the test images of the web demo's picker (labsupport.topics.web.page_images; make web)",
    "web_demo.png": "09: the browser demo's screenshot (labsupport.topics.web, tests/integration/test_web.py)",
    "mobile/": "09: .ort files and their operator configs",
    "tiny_transformer.pt": "11: weights of the tiny decoder (labsupport.models.tiny_transformer.ensure_tiny_transformer)",
    "tiny_transformer.onnx": "11: the decoder exported without a KV cache",
    "tiny_transformer_kv.onnx": "11: the decoder exported with a KV cache (past_*/present_*)",
    "tiny_transformer_kv_int4.onnx": "11: the KV-cache export with INT4 MatMulNBits weights",
}
# Notebook-private outputs go to artifacts/nbNN/ (e.g. nb07/ for the optimized models of notebook 07).
