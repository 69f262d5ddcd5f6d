import shutil

import numpy as np
import pytest

from labsupport.course import data, paths
from labsupport.maintain import data_files


@pytest.fixture
def data_copy(tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(paths.data_dir(), copy)
    return copy


def test_digits_split_is_fixed_disjoint_and_stratified():
    digits = data.load_digits()
    assert (len(digits.train), len(digits.calibration), len(digits.test)) == (1077, 180, 540)
    for split in (digits.train, digits.calibration, digits.test):
        assert split.images.dtype == np.float32 and split.images.shape[1:] == (1, 8, 8)
        assert split.images.min() >= 0 and split.images.max() <= 1
        assert split.labels.dtype == np.int64 and set(np.unique(split.labels)) == set(range(10))
        assert split.flat.shape == (len(split), 64)
    assert np.bincount(digits.test.labels).min() >= 52


def test_shipped_files_match_the_manifest_and_rebuild_bit_for_bit(data_copy):
    manifest = data.read_manifest()
    assert set(manifest) == set(data.DIGITS_FILES)
    for name in manifest:
        assert data.verified_path(name).is_file()
    data_files.rebuild(data_copy)
    assert data.read_manifest(data_copy) == manifest


def test_corrupted_file_names_file_checksum_and_fix(data_copy):
    target = data_copy / "digits" / "images.npy"
    payload = bytearray(target.read_bytes())
    payload[-1] ^= 0xFF  # one damaged pixel
    target.write_bytes(bytes(payload))
    expected = data.read_manifest(data_copy)["digits/images.npy"]
    with pytest.raises(data.DataIntegrityError) as error:
        data.load_digits(data_copy)
    message = str(error.value)
    assert "data/digits/images.npy is corrupted" in message
    assert expected in message and "python -m labsupport.maintain.data_files rebuild" in message


def test_missing_file_and_missing_manifest(data_copy):
    (data_copy / "digits" / "labels.npy").unlink()
    with pytest.raises(data.DataIntegrityError, match=r"labels\.npy is missing"):
        data.load_digits(data_copy)
    (data_copy / "MANIFEST").unlink()
    with pytest.raises(data.DataIntegrityError, match="MANIFEST is missing"):
        data.read_manifest(data_copy)


def test_unlisted_file_is_refused(data_copy):
    with pytest.raises(data.DataIntegrityError, match="not listed"):
        data.verified_path("digits/other.npy", data_copy)


def test_command_line_verify_and_usage(capsys):
    assert data_files.main(["verify"]) == 0
    assert "ok  data/digits/images.npy" in capsys.readouterr().out
    assert data_files.main(["nonsense"]) == 2


def test_sha256_of_matches_the_manifest_and_hashlib(tmp_path):
    import hashlib

    path = tmp_path / "blob.bin"
    path.write_bytes(b"x" * (3 << 20))  # three 1 MiB blocks
    assert data.sha256_of(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    for name, digest in data.read_manifest().items():
        assert data.sha256_of(paths.data_dir() / name) == digest, name
