"""The course website (`make docs`): it builds without a warning, and Chromium shows every notebook.

The site is built once per module, exactly as `make docs SITE_REPOSITORY=... SITE_BRANCH=... SITE_HUB=...`
builds it (docs/build.py), into a temporary folder. The browser test serves it on 127.0.0.1 and refuses
every request to another host: the site must work offline. The launch links (Binder, the hub, the source)
are clicked too: their targets are answered by the test itself, so what is checked is where they lead.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from labsupport.course.paths import repo_root
from labsupport.maintain import navigation, sitecheck

ROOT = repo_root()

NOTEBOOKS = [name for _, name, _ in navigation.course_map()]
LAUNCH = sitecheck.Launch("https://github.com/example-school/onnx-lab-class", "spring", "https://hub.example-school.edu")
CLICKED = "06_quantization.ipynb"  # the page whose launch links the browser follows


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("docs") / "site"
    settings = ["--repository", LAUNCH.repository, "--branch", LAUNCH.branch, "--hub-url", LAUNCH.hub]
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "build.py"), str(folder), *settings], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"make docs failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert "WARNING" not in done.stdout + done.stderr, done.stderr[-5000:]
    return folder


def _notebook(name: str) -> dict:
    return json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))


def _title(name: str) -> str:
    first = next(cell for cell in _notebook(name)["cells"] if cell["cell_type"] == "markdown")
    return "".join(first["source"]).lstrip().splitlines()[0].removeprefix("# ").strip()


def _pictures(name: str) -> int:
    """How many pictures (PNG plots, SVG graph drawings) the notebook's outputs hold (each becomes one <img> of its page)."""
    outputs = [output for cell in _notebook(name)["cells"] for output in cell.get("outputs", [])]
    return sum(1 for output in outputs if {"image/png", "image/svg+xml"} & set(output.get("data", {})))


def test_the_site_has_a_landing_page_and_a_page_per_notebook(site):
    landing = (site / "index.html").read_text(encoding="utf-8")
    assert "url=README.html" in landing
    readme = (site / "README.html").read_text(encoding="utf-8")
    assert "Two commands" in readme and "mybinder.org/badge_logo.svg" not in readme
    for name in NOTEBOOKS:
        page = site / "notebooks" / name.replace(".ipynb", ".html")
        assert page.is_file(), f"no page for {name}"
        assert f'href="notebooks/{page.name}"' in readme, f"{name} is missing from the navigation"
    assert (site / "search.html").is_file() and (site / "searchindex.js").is_file()
    assert 'href="CONTRIBUTING.html"' in readme and "Add a notebook" in (site / "CONTRIBUTING.html").read_text(encoding="utf-8")
    assert sitecheck.broken_references(site) == []
    assert (
        'href="http://127.0.0.1' not in readme
        and '<code class="docutils literal notranslate"><span class="pre">http://127.0.0.1:8000</span>' in readme
    )


def _launch_hrefs(page: str) -> list[str]:
    bar = re.search(r'<nav class="onnx-lab-launch".*?</nav>', page, re.S)
    assert bar, "no launch links on the page"
    return [html.unescape(href) for href in re.findall(r'href="([^"]+)"', bar.group(0))]


def test_each_notebook_page_runs_downloads_and_shows_its_notebook_without_test_markers(site):
    for name in NOTEBOOKS:
        page = (site / "notebooks" / name.replace(".ipynb", ".html")).read_text(encoding="utf-8")
        assert _launch_hrefs(page) == [href for _, href in LAUNCH.links(name)], name
        assert (site / "notebooks" / name).read_bytes() == (ROOT / "notebooks" / name).read_bytes(), (
            "the download is the committed notebook"
        )
        assert "NBVAL_" not in page, f"{name}: a test marker is shown"
    assert any("NBVAL_IGNORE_OUTPUT" in (ROOT / "notebooks" / name).read_text() for name in NOTEBOOKS), "the notebooks do hold markers"


def test_going_deeper_parts_are_collapsed_on_the_site(site):
    parts = {
        name: sum("".join(cell["source"]).lstrip("# ").startswith("Going deeper") for cell in _notebook(name)["cells"])
        for name in NOTEBOOKS
    }
    assert sum(parts.values()) > 0, "no notebook has a Going deeper part"
    for name, count in parts.items():
        page = (site / "notebooks" / name.replace(".ipynb", ".html")).read_text(encoding="utf-8")
        assert page.count('<details class="going-deeper">') == count, name
        assert page.count("</details>") >= count, name


def test_landing_page_drops_remote_pictures_and_adds_the_course_map():
    readme = "# ONNX Lab\n\n[![Binder](https://example.org/badge.svg)](https://example.org/launch)\n![plot](https://example.org/p.png)\n"
    page = sitecheck.landing_page(readme, [("00", "00_start_here.ipynb", "x"), ("01", "01_graphs_by_hand.ipynb", "y")])
    assert "[Binder](https://example.org/launch)" in page and "[plot](https://example.org/p.png)" in page and "![" not in page
    assert page.endswith(":hidden:\n:caption: Course map\n\nnotebooks/00_start_here\nnotebooks/01_graphs_by_hand\n```\n")


def test_site_check_finds_broken_links_missing_pictures_and_remote_resources(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "pic.png").write_bytes(b"\x89PNG")
    (tmp_path / "index.html").write_text(
        '<h1 id="top">Home</h1><a href="sub/page.html#part">ok</a><img src="pic.png"><a href="#top">top</a>'
        '<a href="https://onnx.ai">an outside link is fine</a><link rel="next" href="sub/page.html">'
    )
    (tmp_path / "sub" / "page.html").write_text(
        '<p id="part"></p><a href="../missing.html">x</a><img src="../gone.png"><a href="../index.html#nowhere">y</a>'
        '<script src="https://cdn.example.org/lib.js"></script><link rel="stylesheet" href="//cdn.example.org/a.css">'
        '<a href="../../outside.html">z</a>'
    )
    (tmp_path.parent / "outside.html").write_text("<p>outside the site</p>")
    problems = sitecheck.broken_references(tmp_path)
    assert sorted(problems) == sorted(
        [
            "sub/page.html: link ../missing.html: no such file in the site",
            "sub/page.html: ../gone.png: no such file in the site",
            "sub/page.html: loads https://cdn.example.org/lib.js from another site (the site must work offline)",
            "sub/page.html: loads //cdn.example.org/a.css from another site (the site must work offline)",
            "sub/page.html: link ../index.html#nowhere: no anchor #nowhere in index.html",
            "sub/page.html: link ../../outside.html: no such file in the site",
        ]
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(site):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
@pytest.mark.slow
def test_chromium_shows_each_notebook_with_its_title_outputs_and_pictures(served, require_tool):
    from labsupport.course.paths import artifact
    from labsupport.topics import web

    require_tool(web.CHROMIUM, "the site test drives Debian's Chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    outside: list[str] = []
    errors: list[str] = []
    launch_hosts = {urlsplit(href).hostname for _, href in LAUNCH.links(CLICKED)} - {None}

    def only_loopback(route):
        host = urlsplit(route.request.url).hostname
        if host == "127.0.0.1":
            route.continue_()
        elif host in launch_hosts and route.request.resource_type == "document":  # a click on a launch link, answered here
            route.fulfill(status=200, content_type="text/html", body="<title>launch target</title>")
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = web.launch_chromium(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)
            page.route("**/*", only_loopback)
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))

            page.goto(served)  # the landing page forwards to the README, whose navigation is the course map
            page.wait_for_url("**/README.html")
            assert page.locator("h1").first.evaluate("h => h.firstChild.textContent") == "ONNX Lab"
            assert page.locator(".sidebar-tree a.reference").count() >= len(NOTEBOOKS)

            for name in NOTEBOOKS:
                page.goto(served + "notebooks/" + name.replace(".ipynb", ".html"))
                assert page.locator("article h1").first.evaluate("h => h.firstChild.textContent") == _title(name), name
                assert page.locator(".cell_output").count() >= 1, f"{name}: no output on its page"
                pictures = page.locator(".cell_output img")
                assert pictures.count() == _pictures(name), f"{name}: pictures on the page differ from the notebook's"
                unloaded = pictures.evaluate_all("imgs => imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)")
                assert unloaded == [], f"{name}: pictures that did not load: {unloaded}"
                if name.startswith("06_"):
                    page.screenshot(path=str(artifact("docs_site.png")))

            page.goto(served + "notebooks/" + CLICKED.replace(".ipynb", ".html"))
            for label, href in LAUNCH.links(CLICKED):
                link = page.get_by_role("link", name=label, exact=True)
                if href == CLICKED:
                    with page.expect_download() as download:
                        link.click()
                    assert Path(download.value.path()).read_bytes() == (ROOT / "notebooks" / CLICKED).read_bytes()
                    assert download.value.suggested_filename == CLICKED
                    continue
                link.click()
                page.wait_for_url(href)
                assert page.title() == "launch target", label
                page.go_back()

            page.goto(served + "search.html?q=quantization")
            page.wait_for_selector("#search-results li a")
            found = page.locator("#search-results li a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
            assert any("06_quantization" in href for href in found), found
        finally:
            browser.close()
    assert outside == [], f"the site asked for other hosts: {outside}"
    assert errors == [], errors
