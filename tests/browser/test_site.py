"""The built book as a reader sees it, checked in a real headless browser (Debian's chromium).

Runs after the book is built (`make test`: `jupyter-book build .` into `_build/html`), on its
own: `pytest tests/browser` (the unit run `pytest tests` leaves this folder out). Every page that
`_toc.yml` lists, plus the search and index pages, is served over http from 127.0.0.1 and opened
once; the tests below check what each visit recorded:

- no console error and no uncaught script error; no local resource answered 4xx/5xx;
- no request left 127.0.0.1 (the book must work offline: MathJax comes from `_static/mathjax`);
- every image has loaded; every formula was typeset by MathJax, without a TeX error, and no raw
  `$$`, `\\(` or `\\[` is left in the article's text;
- no display formula is wider than the text column (at 1280 px it would be cut off);
- the left navigation lists every page of `_toc.yml` under the title that page carries;
- the search page finds each chapter by a word of its title;
- every link into the site reaches a file that exists, and its `#fragment` names an id there.

`visits.json` in `_build/screenshots/` records what each visit saw (errors, blocked requests, image
sizes, ...). With BOOK_SCREENSHOTS=1, a full-page screenshot of each page (1280x900 viewport) goes
beside it, for a person to review; make test takes none (they asserted nothing and cost about a
minute of its two CPU slots).

Environment: BOOK_HTML (built site, default `_build/html`) and BOOK_TOC (default `_toc.yml`) let a
chapter author check a private build, e.g. `BOOK_HTML=/tmp/jb_me/_build/html
BOOK_TOC=/tmp/me_toc.yml pytest tests/browser`. Without /usr/bin/chromium the tests skip, with the
reason, except under CI (tests/ci.py) where they fail.
"""

from __future__ import annotations

import dataclasses
import functools
import html.parser
import http.server
import json
import os
import pathlib
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import pytest
import yaml

from tests.ci import missing
from tests.toc_notebooks import ROOT, toc_files

CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-proxy-server",
]
VIEWPORT = {"width": 1280, "height": 900}
TIMEOUT_MS = 20_000
# A full-page screenshot of the package reference (the longest page, about 50 modules) took over
# 20 s in a clean-clone run while notebooks ran beside it; the screenshot is for a person to
# review, so it gets more time than a page load.
SCREENSHOT_TIMEOUT_MS = 180_000

SITE = pathlib.Path(
    os.environ.get("BOOK_HTML", ROOT / "_build" / "html")
).resolve()
TOC = pathlib.Path(os.environ.get("BOOK_TOC", ROOT / "_toc.yml")).resolve()
SCREENSHOTS = SITE.parent / "screenshots"
TAKE_SCREENSHOTS = os.environ.get("BOOK_SCREENSHOTS") == "1"

TOC_DOCS: list[str] = toc_files(
    yaml.safe_load(TOC.read_text())
)  # "book/intro", ...
PAGES: list[str] = [f"{doc}.html" for doc in TOC_DOCS] + [
    "search.html",
    "genindex.html",
]

# What MathJax leaves behind when it did not run: display/inline delimiters and TeX commands
# between single dollars. Code (pre, code) is taken out of the text before looking.
RAW_MATH = re.compile(
    r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\n]*\\[A-Za-z]+[^$\n]*\$"
)
STOPWORDS = {
    "with",
    "from",
    "that",
    "this",
    "what",
    "your",
    "their",
    "into",
    "over",
}


# ----------------------------------------------------------------------------- local web server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(
        self, format, *args
    ):  # one line per request would drown pytest's output
        pass


@pytest.fixture(scope="session")
def site() -> pathlib.Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(
            f"no built book at {SITE}: run `jupyter-book build .` first"
        )
    return SITE


@pytest.fixture(scope="session")
def server(site):
    """Base URL, e.g. http://127.0.0.1:PORT/, of an http server for the built site."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


# ----------------------------------------------------------------------------- browser


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.is_file():
        reason = f"chromium not installed: {CHROMIUM} is missing (run tests/browser/install_chromium.sh)"
        missing(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Debian's chromium, never a downloaded one (`playwright install` is not used here).
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@dataclass
class Visit:
    """What one page load recorded."""

    url: str
    final_url: str = ""
    status: int | None = None
    error: str = ""  # the load itself failed (timeout, navigation error)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)
    bad_responses: list[str] = field(default_factory=list)
    mathjax: str = ""  # "absent", "typeset" or what went wrong
    mathjax_src: str = ""
    info: dict = field(default_factory=dict)  # filled by COLLECT_JS
    # the full-page screenshot, for a person to review, failed twice (Chromium's capture of a
    # tall page can fail under load); no test reads it: the page itself loaded
    screenshot_error: str = ""


COLLECT_JS = r"""
() => {
  const text = (node, drop) => {
    const copy = node.cloneNode(true);
    copy.querySelectorAll(drop).forEach((n) => n.remove());
    return copy.textContent.replace(/\s+/g, " ").trim();
  };
  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const h1 = article.querySelector("h1");
  const nav = document.querySelector("nav.bd-docs-nav");
  const mathItems = window.MathJax && MathJax.startup && MathJax.startup.document
    ? MathJax.startup.document.getMathItemsWithin(article) : [];  // their .math is the TeX source
  const navBox = nav ? nav.getBoundingClientRect() : null;
  return {
    title: h1 ? text(h1, ".headerlink") : "",
    article_text: text(article, "pre, code, script, style, textarea, mjx-container, .headerlink"),
    images: [...document.images].map((img) => ({
      src: img.currentSrc || img.src, complete: img.complete, width: img.naturalWidth,
      shown_width: img.getBoundingClientRect().width,
    })),
    math_elements: article.querySelectorAll(".math").length,
    math_untypeset: [...article.querySelectorAll(".math")]
      .filter((m) => !m.querySelector("mjx-container")).map((m) => m.textContent.slice(0, 80)),
    mjx_containers: article.querySelectorAll("mjx-container").length,
    mjx_errors: [...document.querySelectorAll("mjx-merror")]
      .map((e) => e.getAttribute("data-mjx-error") || e.textContent),
    // A display formula wider than the text column is cut off at its right edge (it scrolls).
    wide_formulas: [...article.querySelectorAll('mjx-container[display="true"]')]
      .filter((c) => c.scrollWidth > c.clientWidth + 1)
      .map((c) => `${c.scrollWidth}px in ${c.clientWidth}px: ` +
        (mathItems.find((item) => item.typesetRoot === c) || {math: c.textContent}).math
          .replace(/\s+/g, " ").trim().slice(0, 80)),
    code_blocks: article.querySelectorAll("pre").length,
    code_blocks_scrolling: [...article.querySelectorAll("pre")].filter((p) => p.scrollWidth > p.clientWidth + 1).length,
    nav_visible: !!navBox && navBox.width > 0 && navBox.height > 0,
    nav_links: nav ? [...nav.querySelectorAll("a[href]")].map((a) => ({
      href: a.href, text: a.textContent.replace(/\s+/g, " ").trim() })) : [],
    links: [...document.querySelectorAll("a[href]")].map((a) => a.href),
  };
}
"""

WAIT_MATHJAX_JS = """
async (timeoutMs) => {
  const script = document.querySelector('script[src*="mathjax" i]');
  if (!script) return ["absent", ""];
  const start = Date.now();
  while (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
    if (Date.now() - start > timeoutMs) return ["MathJax never started", script.src];
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const timeout = new Promise((resolve) => setTimeout(() => resolve("timeout"), timeoutMs));
  const done = await Promise.race([MathJax.startup.promise.then(() => "typeset"), timeout]);
  return [done === "typeset" ? done : "MathJax typesetting did not finish", script.src];
}
"""

WAIT_IMAGES_JS = """
async (timeoutMs) => {
  const images = [...document.images];
  images.forEach((img) => { img.loading = "eager"; });
  const loaded = Promise.all(images.map((img) => img.complete ? null
      : new Promise((resolve) => { img.addEventListener("load", resolve); img.addEventListener("error", resolve); })));
  await Promise.race([Promise.all([loaded, document.fonts.ready]),
                      new Promise((resolve) => setTimeout(resolve, timeoutMs))]);
}
"""


def _is_local(url: str, base: str) -> bool:
    return url.startswith(base) or url.startswith(("data:", "blob:", "about:"))


def open_page(
    browser,
    base: str,
    path: str,
    screenshot: pathlib.Path | None = None,
    inspect: bool = True,
) -> tuple[Visit, object]:
    """Load base+path in a fresh context that lets no request leave 127.0.0.1; return the record
    (with what COLLECT_JS finds once MathJax and the images are done, if `inspect`) and the open
    page (the caller closes its context)."""
    visit = Visit(url=base + path)
    context = browser.new_context(viewport=VIEWPORT, service_workers="block")
    context.set_default_timeout(TIMEOUT_MS)

    def route(request_route):
        url = request_route.request.url
        if _is_local(url, base):
            request_route.continue_()
        else:
            visit.external_requests.append(url)
            request_route.abort("blockedbyclient")

    context.route("**/*", route)
    page = context.new_page()
    page.on(
        "console",
        lambda msg: (
            msg.type == "error"
            and visit.console_errors.append(
                f"{msg.text} (at {msg.location.get('url', '?')}:{msg.location.get('lineNumber', '?')})"
            )
        ),
    )
    page.on("pageerror", lambda exc: visit.page_errors.append(str(exc)))
    page.on(
        "response",
        lambda response: (
            response.status >= 400
            and visit.bad_responses.append(f"{response.status} {response.url}")
        ),
    )
    try:
        response = page.goto(visit.url, wait_until="load")
        visit.status = response.status if response else None
        if not inspect:
            return visit, page
        visit.mathjax, visit.mathjax_src = page.evaluate(
            WAIT_MATHJAX_JS, TIMEOUT_MS
        )
        page.evaluate(
            WAIT_IMAGES_JS, TIMEOUT_MS
        )  # an image still loading then fails its test
        visit.info = page.evaluate(COLLECT_JS)
        visit.final_url = page.url
    except (
        Exception
    ) as exc:  # recorded, so that one broken page fails its own tests only
        visit.error = f"{type(exc).__name__}: {exc}"
        return visit, page
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                page.screenshot(
                    path=str(screenshot),
                    full_page=True,
                    timeout=SCREENSHOT_TIMEOUT_MS,
                )
                visit.screenshot_error = ""
                break
            except Exception as exc:  # Playwright's errors: the capture only
                visit.screenshot_error = f"{type(exc).__name__}: {exc}"
    return visit, page


@pytest.fixture(scope="session")
def visits(browser, server) -> dict[str, Visit]:
    """Every page of PAGES opened once (with a screenshot under BOOK_SCREENSHOTS=1)."""
    for stale in [
        *SCREENSHOTS.glob("**/*.png"),
        SCREENSHOTS / "visits.json",
    ]:  # pages since removed
        stale.unlink(missing_ok=True)
    recorded = {}
    for path in PAGES:
        visit, page = open_page(
            browser,
            server,
            path,
            SCREENSHOTS / path.replace(".html", ".png")
            if TAKE_SCREENSHOTS
            else None,
        )
        page.context.close()
        recorded[path] = visit
    # What each visit saw, beside the screenshots, for a person reviewing the book.
    summary = {
        path: {
            **dataclasses.asdict(v),
            "info": {
                k: x
                for k, x in v.info.items()
                if k not in ("article_text", "links")
            },
        }
        for path, v in recorded.items()
    }
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / "visits.json").write_text(json.dumps(summary, indent=1))
    return recorded


def problems(visit: Visit) -> list[str]:
    """Everything a reader's browser would complain about during a visit."""
    return (
        [f"uncaught script error: {e}" for e in visit.page_errors]
        + [f"console error: {e}" for e in visit.console_errors]
        + [f"failed resource: {r}" for r in visit.bad_responses]
        + [
            f"request outside the site (blocked): {u}"
            for u in visit.external_requests
        ]
    )


def loaded(visits, path: str) -> Visit:
    visit = visits[path]
    assert not visit.error, f"{path} did not load: {visit.error}"
    assert visit.status == 200, (
        f"{path}: HTTP {visit.status} (is it missing from the build?)"
    )
    return visit


# ----------------------------------------------------------------------------- every page


@pytest.mark.parametrize("path", PAGES)
def test_page_loads_without_errors(visits, path):
    visit = loaded(visits, path)
    found = [
        p for p in problems(visit) if not p.startswith("request outside")
    ]  # see offline test
    assert not found, f"{path}: {found}"


@pytest.mark.parametrize("path", PAGES)
def test_page_works_offline(visits, path):
    visit = loaded(visits, path)
    assert not visit.external_requests, (
        f"{path} asked for resources outside the site (blocked; the book must work offline): "
        f"{sorted(set(visit.external_requests))}"
    )
    if visit.mathjax != "absent":
        assert urllib.parse.urlparse(visit.mathjax_src).path.startswith(
            "/_static/mathjax/"
        ), (
            f"{path} loads MathJax from {visit.mathjax_src}, not from the site's _static/mathjax"
        )


@pytest.mark.parametrize("path", PAGES)
def test_images_loaded(visits, path):
    visit = loaded(visits, path)
    broken = [
        img["src"]
        for img in visit.info["images"]
        if not (img["complete"] and img["width"] > 0)
    ]
    assert not broken, f"images on {path} that did not load: {broken}"


@pytest.mark.parametrize("path", PAGES)
def test_math_typeset(visits, path):
    visit = loaded(visits, path)
    info = visit.info
    if info["math_elements"]:
        assert visit.mathjax == "typeset", (
            f"{path} has {info['math_elements']} formulas but MathJax: {visit.mathjax}"
        )
        assert info["mjx_containers"] >= info["math_elements"]
    assert not info["math_untypeset"], (
        f"formulas MathJax left as TeX on {path}: {info['math_untypeset']}"
    )
    assert not info["mjx_errors"], (
        f"TeX errors on {path}: {info['mjx_errors']}"
    )
    raw = sorted(
        {m.group(0)[:60] for m in RAW_MATH.finditer(info["article_text"])}
    )
    assert not raw, f"raw TeX left in the text of {path}: {raw}"


@pytest.mark.parametrize("path", PAGES)
def test_display_formulas_fit_the_column(visits, path):
    visit = loaded(visits, path)
    wide = visit.info["wide_formulas"]
    assert not wide, (
        f"display formulas on {path} wider than the text column at {VIEWPORT['width']}px "
        f"(the reader sees them cut off; split them over lines): {wide}"
    )


@pytest.mark.parametrize("path", PAGES)
def test_navigation_lists_every_toc_page(visits, path):
    visit = loaded(visits, path)
    assert visit.info["nav_visible"], (
        f"the left navigation is not shown on {path} at {VIEWPORT}"
    )
    in_nav = {
        urllib.parse.urlparse(link["href"]).path.lstrip("/"): link["text"]
        for link in visit.info["nav_links"]
    }
    for doc in TOC_DOCS:
        target = f"{doc}.html"
        assert target in in_nav, (
            f"the navigation of {path} has no link to {target}; it has {sorted(in_nav)}"
        )
        title = visits[target].info.get("title")
        if title:
            assert in_nav[target] == title, (
                f"{path}: nav says {in_nav[target]!r}, {target} is titled {title!r}"
            )


def test_site_root_opens_the_book(browser, server, visits):
    visit, page = open_page(browser, server, "", inspect=False)
    try:
        assert not visit.error, visit.error
        # index.html is a redirect (meta refresh) to the root page of _toc.yml.
        page.wait_for_url(f"{server}{TOC_DOCS[0]}.html")
        page.wait_for_load_state("load")
    finally:
        page.context.close()
    failed = visit.bad_responses + visit.external_requests
    assert not failed, (
        f"opening the site root, requests that failed or left the site: {failed}"
    )


# ----------------------------------------------------------------------------- search


def search_word(doc: str, visits) -> str:
    """The word of the page's title that the fewest other pages use (ties: the longest)."""
    visit = loaded(visits, f"{doc}.html")
    texts = {
        p: v.info.get("article_text", "").lower()
        for p, v in visits.items()
        if p != f"{doc}.html"
    }
    words = [
        w
        for w in re.findall(r"[a-z]{4,}", visit.info["title"].lower())
        if w not in STOPWORDS
    ]
    if (
        not words
    ):  # a title without a usable word: fall back on the page's own long words
        words = re.findall(r"[a-z]{7,}", visit.info["article_text"].lower())
    assert words, f"{doc}: no word to search for"
    return min(
        words, key=lambda w: (sum(w in t for t in texts.values()), -len(w), w)
    )


@pytest.mark.parametrize("doc", TOC_DOCS)
def test_search_finds_page(browser, server, visits, doc):
    word = search_word(doc, visits)
    visit, page = open_page(
        browser, server, f"search.html?q={urllib.parse.quote(word)}"
    )
    try:
        assert not visit.error, visit.error
        page.wait_for_function(
            "() => (document.querySelector('#search-results .search-summary') || {}).textContent"
        )
        summary = page.text_content("#search-results .search-summary")
        hits = page.eval_on_selector_all(
            "#search-results ul.search li a", "links => links.map(a => a.href)"
        )
    finally:
        page.context.close()
    found = {urllib.parse.urlparse(h).path.lstrip("/") for h in hits}
    assert f"{doc}.html" in found, (
        f"searching {word!r}: {summary!r}; results {sorted(found)}"
    )
    # The result snippets are fetched from the site (console errors: see the search.html tests).
    failed = visit.bad_responses + visit.external_requests
    assert not failed, (
        f"searching {word!r}, requests that failed or left the site: {failed}"
    )


# ----------------------------------------------------------------------------- internal links


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)


@functools.cache
def fetch(url: str) -> tuple[int, frozenset[str]]:
    """HTTP status of a site URL and, for HTML, the ids it defines."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({})
    )  # never through a proxy
    try:
        with opener.open(url, timeout=10) as response:
            body = response.read()
            status = response.status
            kind = response.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        return exc.code, frozenset()
    ids = _Ids()
    if kind == "text/html":
        ids.feed(body.decode("utf-8", "replace"))
    return status, frozenset(ids.ids)


@pytest.mark.parametrize("path", PAGES)
def test_internal_links_resolve(visits, server, path):
    visit = loaded(visits, path)
    broken = []
    for href in sorted(set(visit.info["links"])):
        if not href.startswith(server):
            continue
        parts = urllib.parse.urlsplit(href)
        target = urllib.parse.urlunsplit(parts._replace(query="", fragment=""))
        status, ids = fetch(target)
        if status != 200:
            broken.append(f"{href} -> HTTP {status}")
            continue
        fragment = urllib.parse.unquote(parts.fragment)
        if fragment and fragment != "top" and fragment not in ids:
            broken.append(f"{href} -> no id {fragment!r} in {parts.path}")
    assert not broken, f"broken links on {path}: {broken}"


@pytest.mark.parametrize("path", PAGES)
def test_markdown_tables_render_as_tables(site, path):
    """A Markdown table, in the prose or in a cell's Markdown output (the
    claims tables, glued tables), becomes an HTML table: a renderer without
    tables (commonmark, myst-nb's default) printed the rows as text, pipes
    and separator dashes included (a separator row, "|---|", outside code)."""
    text = (site / path).read_text(encoding="utf-8")
    outside_code = re.sub(r"<pre.*?</pre>", "", text, flags=re.S)
    separators = re.findall(r"\|\s*(?:-{3,}|—)\s*\|", outside_code)
    assert not separators, (
        f"{path}: a Markdown table printed as text "
        f"({len(separators)} separator cells outside code)"
    )
