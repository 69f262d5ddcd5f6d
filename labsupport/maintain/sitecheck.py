"""The course website's two additions to Sphinx (used by docs/conf.py and tests/integration/test_docs.py).

``landing_page`` turns the README into the landing page: pictures from other sites become plain
links (the site loads nothing from outside) and the course map becomes the navigation.
``broken_references`` lists every internal link, anchor or picture of the built site that points
nowhere, and every page resource (picture, script, style sheet) that would load from another site;
``check_built_site`` reports them as Sphinx warnings, which ``make docs`` (``-W``) turns into a failure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

REMOTE_BADGE = re.compile(r"\[!\[([^\]]*)\]\((?:https?:)?//[^)]+\)\]\(([^)]+)\)")
REMOTE_IMAGE = re.compile(r"!\[([^\]]*)\]\(((?:https?:)?//[^)\s]+)\)")
# what the browser fetches with the page (an <a href> is only followed on a click)
LOADED_SRC = {"img", "script", "source", "iframe", "audio", "video", "embed"}
LOADED_LINK_RELS = {"stylesheet", "icon", "preload", "modulepreload", "manifest", "prefetch"}


def landing_page(readme: str, course: Sequence[tuple[str, str, str]]) -> str:
    """The README as the site's landing page: remote pictures become links, the course map a hidden toctree."""
    text = REMOTE_IMAGE.sub(r"[\1](\2)", REMOTE_BADGE.sub(r"[\1](\2)", readme))
    entries = "\n".join(f"notebooks/{Path(name).stem}" for _, name, _ in course)
    return f"{text}\n\n```{{toctree}}\n:hidden:\n:caption: Course map\n\n{entries}\n```\n"


class _Page(HTMLParser):
    """The ids of one HTML page, the URLs it links to and the URLs it loads."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.loads: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value for name, value in attrs if value is not None}
        self.ids.update(values[name] for name in ("id", "name") if values.get(name))
        rels = set(values.get("rel", "").split())
        if "src" in values:
            (self.loads if tag in LOADED_SRC else self.links).append(values["src"])
        if "href" in values:
            (self.loads if tag == "link" and rels & LOADED_LINK_RELS else self.links).append(values["href"])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _is_remote(url: str) -> bool:
    """A URL with a scheme or a host (another site, mailto:, javascript:), except inline data."""
    parts = urlsplit(url)
    return bool(parts.scheme or parts.netloc) and parts.scheme != "data"


def _missing(site: Path, page: Path, url: str, pages: dict[Path, _Page]) -> str | None:
    """Why the relative ``url`` on ``page`` points nowhere, or None when it resolves."""
    parts = urlsplit(url)
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file() or site not in target.parents:
        return "no such file in the site"
    fragment = unquote(parts.fragment)
    if fragment and target.suffix == ".html" and fragment not in pages.get(target, _Page()).ids:
        return f"no anchor #{fragment} in {target.relative_to(site).as_posix()}"
    return None


def broken_references(site: Path) -> list[str]:
    """Every broken internal link, anchor or picture of the built site, and every resource loaded from elsewhere."""
    site = Path(site).resolve()
    pages = {path: _parse(path) for path in sorted(site.rglob("*.html"))}
    problems: dict[str, None] = {}
    for path, page in pages.items():
        name = path.relative_to(site).as_posix()
        for url in page.loads:
            if _is_remote(url):
                problems[f"{name}: loads {url} from another site (the site must work offline)"] = None
            elif reason := _missing(site, path, url, pages):
                problems[f"{name}: {url}: {reason}"] = None
        for url in page.links:
            if url not in {"", "#"} and not _is_remote(url) and (reason := _missing(site, path, url, pages)):
                problems[f"{name}: link {url}: {reason}"] = None
    return list(problems)


def check_built_site(app, exception: Exception | None) -> None:
    """Sphinx ``build-finished``: a warning (an error under ``-W``) for each broken reference of the site."""
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    for problem in broken_references(Path(app.outdir)):
        logger.warning(problem, type="onnx_lab", subtype="site")
