"""Fetch ONNX Runtime's C/C++ headers into ``build/ort-headers/`` (notebook 10 compiles a custom op against them).

    python -m labsupport.maintain.ort_headers [--dest build/ort-headers]

The onnxruntime wheel ships no headers. Debian packages them as ``libonnxruntime-dev``; this downloads that one
package with ``apt-get download`` through a private apt configuration (its own sources list, state and cache
in a temporary folder, pointing at Debian trixie, so the host's apt is not touched and root is not needed),
checks its SHA-256 and unpacks ``usr/include/onnxruntime`` with the standard library. The headers are for
ONNX Runtime 1.21; ORT's C API is versioned and backward compatible, so a library built with them loads into
the course's newer ONNX Runtime (it asks for API version ``ORT_API_VERSION`` 21). Needs ``apt-get`` (any
Debian or Ubuntu host) and the Debian archive; stdlib only, so CI can run it before the course's venv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import lzma
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from labsupport.topics.custom_ops import headers_dir

PACKAGE = "libonnxruntime-dev=1.21.0+dfsg-1"
DEB_SHA256 = "14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08"
SOURCES = "deb http://deb.debian.org/debian trixie main\n"
INCLUDE = "usr/include/onnxruntime/"


def _apt_options(apt_dir: Path) -> list[str]:
    for sub in ("state/lists/partial", "cache/archives/partial", "etc/apt.conf.d", "etc/preferences.d"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    (apt_dir / "etc" / "sources.list").write_text(SOURCES)
    settings = {
        "Dir::Etc": apt_dir / "etc",
        "Dir::Etc::sourcelist": apt_dir / "etc" / "sources.list",
        "Dir::Etc::sourceparts": "-",
        "Dir::State": apt_dir / "state",
        "Dir::State::status": apt_dir / "state" / "status",
        "Dir::Cache": apt_dir / "cache",
        "Dir::Etc::trusted": "/usr/share/keyrings/debian-archive-keyring.gpg",
        "Dir::Etc::trustedparts": "/etc/apt/trusted.gpg.d",
        "APT::Sandbox::User": "root" if os.geteuid() == 0 else "",
    }
    (apt_dir / "state" / "status").touch()
    return [arg for key, value in settings.items() if value != "" for arg in ("-o", f"{key}={value}")]


def download_deb(workdir: Path) -> Path:
    """Download the pinned ``libonnxruntime-dev`` .deb into ``workdir`` and check its SHA-256."""
    if shutil.which("apt-get") is None:
        raise RuntimeError("apt-get not found: fetching ONNX Runtime's headers needs a Debian or Ubuntu host")
    options = _apt_options(workdir / "apt")
    for command in (["update", "-qq"], ["download", "-qq", PACKAGE]):
        done = subprocess.run(["apt-get", *options, *command], cwd=workdir, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"apt-get {command[0]} failed ({done.returncode}): {done.stderr.strip()}")
    (deb,) = workdir.glob("libonnxruntime-dev_*.deb")
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    if digest != DEB_SHA256:
        raise RuntimeError(f"{deb.name} has SHA-256 {digest}, expected {DEB_SHA256}")
    return deb


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
