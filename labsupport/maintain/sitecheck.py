"""The course website's additions to Sphinx (used by docs/conf.py and tests/integration/test_docs.py).

``landing_page`` turns the README into the landing page: pictures from other sites become plain
links (the site loads nothing from outside), links to this machine (``<http://127.0.0.1:8000>``, which
a reader of the website cannot open) become code, and the course map becomes the navigation.
``notebook_page`` does the same to a notebook's links and drops nbval's test markers from its code cells.
``Launch`` and ``launch_bar`` put on each notebook's page the links that run it (Binder, a JupyterHub
through nbgitpuller), download it and show its source.
``broken_references`` lists every internal link, anchor or picture of the built site that points
nowhere, every link to this machine, and every page resource (picture, script, style sheet) that
would load from another site; ``check_built_site`` reports them as Sphinx warnings, which
``make docs`` (``-W``) turns into a failure.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote, urlencode, urlsplit

REMOTE_BADGE = re.compile(r"\[!\[([^\]]*)\]\((?:https?:)?//[^)]+\)\]\(([^)]+)\)")
REMOTE_IMAGE = re.compile(r"!\[([^\]]*)\]\(((?:https?:)?//[^)\s]+)\)")
# what the browser fetches with the page (an <a href> is only followed on a click)
LOADED_SRC = {"img", "script", "source", "iframe", "audio", "video", "embed"}
LOADED_LINK_RELS = {"stylesheet", "icon", "preload", "modulepreload", "manifest", "prefetch"}
LOOPBACK_AUTOLINK = re.compile(r"<(https?://(?:127\.0\.0\.1|localhost)(?::\d+)?(?:/[^>\s]*)?)>")
LOOPBACK_HOSTS = {"127.0.0.1", "localhost"}
TEST_MARKER = re.compile(r"^\s*# NBVAL_[A-Z_]+\s*$")


def _loopback_as_code(markdown: str) -> str:
    """``<http://127.0.0.1:8000>`` becomes `` `http://127.0.0.1:8000` ``: an address to type on one's own machine, not a link."""
    return LOOPBACK_AUTOLINK.sub(r"`\1`", markdown)


def landing_page(readme: str, course: Sequence[tuple[str, str, str]]) -> str:
    """The README as the site's landing page: remote pictures become links, the course map and CONTRIBUTING.md hidden toctrees."""
    text = _loopback_as_code(REMOTE_IMAGE.sub(r"[\1](\2)", REMOTE_BADGE.sub(r"[\1](\2)", readme)))
    entries = "\n".join(f"notebooks/{Path(name).stem}" for _, name, _ in course)
    guide = "```{toctree}\n:hidden:\n:caption: Changing the course\n\nCONTRIBUTING\n```"
    return f"{text}\n\n{guide}\n\n```{{toctree}}\n:hidden:\n:caption: Course map\n\n{entries}\n```\n"


def notebook_page(notebook_json: str) -> str:
    """A notebook as its page shows it: no nbval markers (``# NBVAL_IGNORE_OUTPUT``) in code, no links to this machine."""
    notebook = json.loads(notebook_json)
    for cell in notebook["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code":
            source = "\n".join(line for line in source.split("\n") if not TEST_MARKER.match(line))
        elif cell["cell_type"] == "markdown":
            source = _loopback_as_code(source)
        cell["source"] = source
    return json.dumps(notebook)


@dataclass(frozen=True)
class Launch:
    """Where a notebook page sends its reader: the course's ``repository`` (its URL; GitHub gets the richest links),
    the ``branch`` to run, and the address of a JupyterHub with nbgitpuller (``hub``; no hub link when empty)."""

    repository: str = "https://github.com/onnx-lab/onnx-lab"
    branch: str = "main"
    hub: str = ""

    @property
    def _github(self) -> str | None:
        match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?/?", self.repository)
        return match.group(1) if match else None

    @property
    def folder(self) -> str:
        """The folder a hub's nbgitpuller clones the course into."""
        return self.repository.rstrip("/").split("/")[-1].removesuffix(".git")

    def links(self, notebook: str) -> list[tuple[str, str]]:
        """``(label, href)`` of each link on the page of ``notebooks/<notebook>``, in the order they are shown."""
        path = f"notebooks/{notebook}"
        if self._github:
            binder = f"https://mybinder.org/v2/gh/{self._github}/{quote(self.branch, safe='')}"
            source = f"https://github.com/{self._github}/blob/{quote(self.branch, safe='')}/{path}"
        else:
            binder = f"https://mybinder.org/v2/git/{quote(self.repository, safe='')}/{quote(self.branch, safe='')}"
            source = self.repository
        links = [("Launch on Binder", f"{binder}?{urlencode({'urlpath': f'lab/tree/{path}'}, safe='/')}")]
        if self.hub:
            pull = {"repo": self.repository, "branch": self.branch, "targetpath": self.folder, "urlpath": f"lab/tree/{self.folder}/{path}"}
            links.append(("Open on the class JupyterHub", f"{self.hub.rstrip('/')}/hub/user-redirect/git-pull?{urlencode(pull, safe='/')}"))
        return [*links, ("Download the .ipynb", notebook), ("View the source", source)]


def launch_bar(launch: Launch, notebook: str) -> str:
    """The links of ``launch`` for one notebook page, as the HTML that opens the page."""
    items = "".join(
        f'<a class="onnx-lab-launch-link" href="{html.escape(href)}"{" download" if href == notebook else ""}>{html.escape(label)}</a>'
        for label, href in launch.links(notebook)
    )
    note = '<span class="onnx-lab-launch-note">the notebook runs inside the course repository (its data and labsupport)</span>'
    return f'<nav class="onnx-lab-launch" aria-label="Run this notebook">{items}{note}</nav>'


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
    """Every broken internal link, anchor or picture of the built site, every link to this machine, and every resource loaded from elsewhere."""
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
            if urlsplit(url).hostname in LOOPBACK_HOSTS:
                problems[f"{name}: link {url}: this machine's address, which a reader of the website cannot open"] = None
            elif url not in {"", "#"} and not _is_remote(url) and (reason := _missing(site, path, url, pages)):
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
