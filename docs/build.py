"""Build the course website from the committed notebooks: ``make docs`` (tests/integration/test_docs.py runs it too).

    .venv/bin/python docs/build.py [SITE] [--repository URL] [--branch NAME] [--hub-url URL]
    # default build/site; open SITE/index.html or `make docs-serve`

The options set the notebook pages' launch links (docs/conf.py): the repository that Binder, a hub's
nbgitpuller and "view the source" use (default the course's own), its branch, and a JupyterHub's address.

A fresh build every time (``-E``): any warning fails it (``-W``, after reporting all of them), as
does a broken internal link, a missing picture or a resource loaded from another site
(labsupport/maintain/sitecheck.py). Sphinx's caches go next to SITE (``doctrees/``, ``jupyter_execute/``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sphinx.cmd.build import build_main

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SITE = ROOT / "build" / "site"


def build(site: Path = DEFAULT_SITE, settings: dict[str, str] | None = None) -> int:
    """Build the site into ``site``; ``settings`` overrides docs/conf.py's values; returns Sphinx's exit status (0: no warning)."""
    site = Path(site).resolve()
    flags = ["-W", "--keep-going", "-n", "-E", "-q", "-b", "html", "-c", str(ROOT / "docs"), "-d", str(site.parent / "doctrees")]
    flags += [f"-D{name}={value}" for name, value in (settings or {}).items()]
    return build_main([*flags, str(ROOT), str(site)])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", type=Path, default=DEFAULT_SITE)
    parser.add_argument("--repository", help="the course's repository for Binder, nbgitpuller and the source links")
    parser.add_argument("--branch", help="its branch (default main)")
    parser.add_argument("--hub-url", help="a JupyterHub with nbgitpuller: each page gets a link that opens the notebook there")
    options = parser.parse_args(argv)
    settings = {"onnx_lab_repository": options.repository, "onnx_lab_branch": options.branch, "onnx_lab_hub_url": options.hub_url}
    start = time.perf_counter()
    status = build(options.site, {name: value for name, value in settings.items() if value})
    if status == 0:
        print(f"site built in {time.perf_counter() - start:.0f} s: {options.site / 'index.html'} (serve it: make docs-serve)")
    else:
        print("the site has warnings (above): fix them, a warning fails the build", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
