"""Fetch ONNX Runtime's C/C++ headers into ``build/ort-headers/`` (notebook 10 compiles a custom op against them).

    python -m labsupport.maintain.ort_headers [--dest build/ort-headers]

The onnxruntime wheel ships no headers. Debian packages them as ``libonnxruntime-dev``; this downloads that
one package file from Debian's archive (any OS: the headers are the same for every architecture), checks it
against the SHA-256 pinned here and unpacks ``usr/include/onnxruntime`` with the standard library. The
headers are ONNX Runtime 1.21's; ORT's C API is versioned and backward compatible, so a library built with
them loads into the course's newer ONNX Runtime (it asks for API version ``ORT_API_VERSION`` 21). Standard
library only: ``make`` runs it once, before the tests, with the venv's Python or any other.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import lzma
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from labsupport.topics.custom_ops import headers_dir

DEB_NAME = "libonnxruntime-dev_1.21.0+dfsg-1_amd64.deb"
DEB_SHA256 = "14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08"
# Debian's pool drops a version once a newer one replaces it; snapshot.debian.org keeps every file ever published,
# addressed by its SHA-1 (24211608...), so the second address outlives the first. Either must give the pinned SHA-256.
DEB_URLS = (
    f"https://deb.debian.org/debian/pool/main/o/onnxruntime/{DEB_NAME}",
    "https://snapshot.debian.org/file/24211608c53cf623c58ab2b2f9d4157ed06b3a76",
)
INCLUDE = "usr/include/onnxruntime/"


def _download(url: str, deb: Path) -> str | None:
    """Download ``url`` into ``deb``; None when its SHA-256 is the pinned one, else what went wrong."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            deb.write_bytes(response.read())
    except OSError as error:
        return f"could not download {url}: {error}"
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    return None if digest == DEB_SHA256 else f"{url} has SHA-256 {digest}, expected {DEB_SHA256}"


def download_deb(workdir: Path, urls: tuple[str, ...] = DEB_URLS) -> Path:
    """Download the pinned ``libonnxruntime-dev`` .deb into ``workdir`` from the first address that gives its SHA-256."""
    deb = workdir / DEB_NAME
    problems = []
    for url in urls:
        problem = _download(url, deb)
        if problem is None:
            return deb
        problems.append(problem)
    raise RuntimeError("; ".join(problems))


def _data_tar(deb: bytes) -> tarfile.TarFile:
    """The ``data.tar.xz`` member of a .deb (an ``ar`` archive)."""
    position = 8  # after the "!<arch>\n" magic
    while position < len(deb):
        name, size = deb[position : position + 16].decode().strip(), int(deb[position + 48 : position + 58])
        body = deb[position + 60 : position + 60 + size]
        if name.rstrip("/") == "data.tar.xz":
            return tarfile.open(fileobj=io.BytesIO(lzma.decompress(body)))
        position += 60 + size + size % 2
    raise RuntimeError("no data.tar.xz in the package")


def extract_headers(deb: Path, dest: Path) -> Path:
    """Unpack the package's ``usr/include/onnxruntime`` into ``dest/include``; returns that folder."""
    include = dest / "include"
    shutil.rmtree(include, ignore_errors=True)
    include.mkdir(parents=True)
    with _data_tar(deb.read_bytes()) as archive:
        for member in archive.getmembers():
            relative = member.name.removeprefix("./")
            if member.isfile() and relative.startswith(INCLUDE):
                member.name = relative.removeprefix(INCLUDE)
                archive.extract(member, include, filter="data")
    return include


def fetch(dest: Path | None = None) -> Path:
    """Download and unpack the headers into ``dest/include`` unless they are already there; returns that folder."""
    dest = dest or headers_dir().parent
    include = dest / "include"
    if (include / "onnxruntime_lite_custom_op.h").is_file():
        return include
    with tempfile.TemporaryDirectory() as workdir:
        return extract_headers(download_deb(Path(workdir)), dest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=None, help="folder for include/ (default: build/ort-headers)")
    include = fetch(parser.parse_args().dest)
    print(f"ONNX Runtime headers in {include}")


if __name__ == "__main__":
    main()
