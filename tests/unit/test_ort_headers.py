"""labsupport.maintain.ort_headers unpacks the headers of a Debian package (an ar archive) and nothing else."""

from __future__ import annotations

import hashlib
import io
import lzma
import tarfile

import pytest

from labsupport.maintain import ort_headers


def _tar_xz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return lzma.compress(buffer.getvalue())


def _ar_member(name: str, body: bytes) -> bytes:
    header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode()
    return header + body + (b"\n" if len(body) % 2 else b"")


def _deb(tmp_path, members):
    path = tmp_path / "package.deb"
    path.write_bytes(b"!<arch>\n" + b"".join(_ar_member(name, body) for name, body in members))
    return path


def test_extracts_only_the_onnxruntime_headers(tmp_path):
    data = _tar_xz({"./usr/include/onnxruntime/onnxruntime_c_api.h": b"#define ORT_API_VERSION 21\n", "./usr/share/doc/x": b"doc"})
    deb = _deb(tmp_path, [("debian-binary", b"2.0\n"), ("control.tar.xz", b"odd"), ("data.tar.xz", data)])
    include = ort_headers.extract_headers(deb, tmp_path / "out")
    assert sorted(p.relative_to(include).as_posix() for p in include.rglob("*") if p.is_file()) == ["onnxruntime_c_api.h"]
    assert "ORT_API_VERSION 21" in (include / "onnxruntime_c_api.h").read_text()


def test_a_package_without_data_is_an_error(tmp_path):
    deb = _deb(tmp_path, [("debian-binary", b"2.0\n")])
    with pytest.raises(RuntimeError, match=r"no data\.tar\.xz"):
        ort_headers.extract_headers(deb, tmp_path / "out")


def test_fetch_does_nothing_when_the_headers_are_there(tmp_path, monkeypatch):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "onnxruntime_lite_custom_op.h").write_text("")
    monkeypatch.setattr(ort_headers, "download_deb", lambda workdir: pytest.fail("must not download"))
    assert ort_headers.fetch(tmp_path) == tmp_path / "include"


def test_download_refuses_a_file_with_another_sha256(tmp_path):
    served = tmp_path / "served" / "libonnxruntime-dev_tampered.deb"
    served.parent.mkdir()
    served.write_bytes(b"!<arch>\nnot the pinned package")
    with pytest.raises(RuntimeError, match=r"has SHA-256 [0-9a-f]{64}, expected " + ort_headers.DEB_SHA256):
        ort_headers.download_deb(tmp_path, (served.as_uri(),))


def test_an_unreachable_archive_names_the_address(tmp_path):
    missing = (tmp_path / "nowhere.deb").as_uri()
    with pytest.raises(RuntimeError, match=r"could not download file:"):
        ort_headers.download_deb(tmp_path / "work", (missing,))


def test_the_second_address_serves_when_the_first_fails(tmp_path, monkeypatch):
    served = tmp_path / "snapshot-file"
    served.write_bytes(b"!<arch>\nthe package")
    monkeypatch.setattr(ort_headers, "DEB_SHA256", hashlib.sha256(served.read_bytes()).hexdigest())
    tampered = tmp_path / "tampered.deb"
    tampered.write_bytes(b"!<arch>\nsomething else")
    work = tmp_path / "work"
    work.mkdir()
    for first in ((tmp_path / "gone.deb").as_uri(), tampered.as_uri()):  # removed from the pool, or not the pinned file
        deb = ort_headers.download_deb(work, (first, served.as_uri()))
        assert deb.read_bytes() == served.read_bytes() and deb.name == ort_headers.DEB_NAME
    with pytest.raises(RuntimeError, match=r"could not download .*gone\.deb.*; .*tampered\.deb has SHA-256"):
        ort_headers.download_deb(work, ((tmp_path / "gone.deb").as_uri(), tampered.as_uri()))


def test_the_pinned_addresses_are_https_and_name_the_pinned_file():
    assert all(url.startswith("https://") for url in ort_headers.DEB_URLS) and len(ort_headers.DEB_URLS) == 2
    assert ort_headers.DEB_URLS[0].endswith("/" + ort_headers.DEB_NAME)
