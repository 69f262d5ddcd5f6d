"""Build the course website from the committed notebooks: ``make docs`` (tests/integration/test_docs.py runs it too).

    .venv/bin/python docs/build.py [SITE]      # default build/site; open SITE/index.html or `make docs-serve`

A fresh build every time (``-E``): any warning fails it (``-W``, after reporting all of them), as
does a broken internal link, a missing picture or a resource loaded from another site
(labsupport/maintain/sitecheck.py). Sphinx's caches go next to SITE (``doctrees/``, ``jupyter_execute/``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sphinx.cmd.build import build_main

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SITE = ROOT / "build" / "site"


def build(site: Path = DEFAULT_SITE) -> int:
    """Build the site into ``site``; returns Sphinx's exit status (0: no warning at all)."""
    site = Path(site).resolve()
    flags = ["-W", "--keep-going", "-n", "-E", "-q", "-b", "html", "-c", str(ROOT / "docs"), "-d", str(site.parent / "doctrees")]
    return build_main([*flags, str(ROOT), str(site)])


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python docs/build.py [SITE]", file=sys.stderr)
        return 2
    site = Path(argv[0]) if argv else DEFAULT_SITE
    start = time.perf_counter()
    status = build(site)
    if status == 0:
        print(f"site built in {time.perf_counter() - start:.0f} s: {site / 'index.html'} (serve it: make docs-serve)")
    else:
        print("the site has warnings (above): fix them, a warning fails the build", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
