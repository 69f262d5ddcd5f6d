"""The course's data sets: shipped under ``data/``, loaded offline, verified against ``data/MANIFEST``.

Introduced in notebook 00 and used from notebook 02 on. The digits set is scikit-learn's bundled
8x8 handwritten digits (1,797 images, UCI ML hand-written digits, via
``sklearn.datasets.load_digits``), split once, stratified and seeded, into train / calibration / test.
The calibration split is what the quantization notebook (06) calibrates on; the test split is
never trained or calibrated on.

Rebuild the shipped files (bit for bit, the checksums do not change) with
``python -m labsupport.maintain.data_files rebuild``; verify them with ``python -m labsupport.maintain.data_files verify``.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labsupport.course.paths import data_dir

MANIFEST_NAME = "MANIFEST"
DIGITS_FILES = ("digits/images.npy", "digits/labels.npy", "digits/split.npy")
SPLIT_CODES = {"train": 0, "calibration": 1, "test": 2}
SPLIT_SEED = 0
TEST_FRACTION = 0.30
CALIBRATION_FRACTION = 0.10
PIXEL_MAX = 16.0
REBUILD_HINT = "regenerate it with `python -m labsupport.maintain.data_files rebuild` (or `git checkout data/`)"


class DataIntegrityError(RuntimeError):
    """A shipped data file is missing or does not match its checksum in data/MANIFEST."""


def sha256_of(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks: the course's one file hash (notebook 00's data checks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(root: Path | None = None) -> dict[str, str]:
    """``{relative path: sha256}`` from ``data/MANIFEST`` (lines ``<sha256>  <path>``, ``#`` comments)."""
    manifest = (root or data_dir()) / MANIFEST_NAME
    if not manifest.is_file():
        raise DataIntegrityError(f"{manifest.name} is missing from data/; {REBUILD_HINT}")
    entries: dict[str, str] = {}
    for line in manifest.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            checksum, name = line.split(maxsplit=1)
            entries[name] = checksum
    return entries


def verified_path(name: str, root: Path | None = None) -> Path:
    """The path of a shipped data file after checking it against data/MANIFEST; raises DataIntegrityError."""
    root = root or data_dir()
    expected = read_manifest(root).get(name)
    if expected is None:
        raise DataIntegrityError(f"data/{name} is not listed in data/{MANIFEST_NAME}")
    path = root / name
    if not path.is_file():
        raise DataIntegrityError(f"data/{name} is missing (expected sha256 {expected}); {REBUILD_HINT}")
    actual = sha256_of(path)
    if actual != expected:
        raise DataIntegrityError(f"data/{name} is corrupted: sha256 {actual}, expected {expected}; {REBUILD_HINT}")
    return path


@dataclass(frozen=True)
class Split:
    """One split of the digits: ``images`` (N, 1, 8, 8) float32 in [0, 1] and ``labels`` (N,) int64."""

    images: np.ndarray
    labels: np.ndarray

    @property
    def flat(self) -> np.ndarray:
        """The images as (N, 64) float32 rows, for models that take a feature vector."""
        return self.images.reshape(len(self.images), -1)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Digits:
    """The course's digits data set, split into ``train``, ``calibration`` and ``test``."""

    train: Split
    calibration: Split
    test: Split

    def __repr__(self) -> str:
        return (
            f"Digits(train={len(self.train)}, calibration={len(self.calibration)}, "
            f"test={len(self.test)}, image shape (1, 8, 8), 10 classes)"
        )


def load_digits(root: Path | None = None) -> Digits:
    """The digits split that every notebook shares, verified against data/MANIFEST (notebook 00)."""
    images, labels, split = (np.load(verified_path(name, root)) for name in DIGITS_FILES)
    pixels = (images.astype(np.float32) / PIXEL_MAX)[:, None, :, :]
    labels = labels.astype(np.int64)

    def take(code: int) -> Split:
        mask = split == code
        return Split(np.ascontiguousarray(pixels[mask]), labels[mask])

    return Digits(*(take(SPLIT_CODES[name]) for name in ("train", "calibration", "test")))


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def build_digits() -> dict[str, bytes]:
    """The digits files' exact bytes, made from scikit-learn's bundled copy (deterministic)."""
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    bunch = sklearn_digits()
    images = bunch.images.astype(np.uint8)
    labels = bunch.target.astype(np.uint8)
    indices = np.arange(len(labels))
    rest, test = train_test_split(indices, test_size=TEST_FRACTION, stratify=labels, random_state=SPLIT_SEED)
    _, calibration = train_test_split(
        rest, test_size=CALIBRATION_FRACTION / (1 - TEST_FRACTION), stratify=labels[rest], random_state=SPLIT_SEED
    )
    split = np.zeros(len(labels), dtype=np.uint8)
    split[calibration] = SPLIT_CODES["calibration"]
    split[test] = SPLIT_CODES["test"]
    arrays = {"digits/images.npy": images, "digits/labels.npy": labels, "digits/split.npy": split}
    return {name: _npy_bytes(array) for name, array in arrays.items()}
