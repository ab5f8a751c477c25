"""Check a built documentation site: internal links and anchors, then every page in headless Chromium.

Run: ``python3 tools/check_docs_site.py docs/_build/html [--screenshot PNG]`` (``.ci/docs`` does,
after building).  Exit status 0 when everything holds, 1 otherwise, with one line per problem.

1. Links: every ``href``/``src`` of every HTML page that points inside the site must name a file
   that exists, and its ``#fragment`` an ``id`` (or ``name``) in that page.  (Sphinx's
   ``linkcheck`` builder checks external links, over the network; this is the internal half.)
2. Images: every image file of the site must decode (Pillow; SVG is parsed as XML).
3. Browser: the site is served on 127.0.0.1 and one Chromium process (``--headless --dump-dom``)
   opens a probe page that loads every HTML page in turn in an iframe and records, on its ``load``
   event, the title, whether the theme's article element and stylesheets are there, and for every
   ``<img>`` whether it completed with a decoded size (``naturalWidth`` is 0 for an image the
   browser could not decode).
4. ``--screenshot PNG``: a screenshot of the landing page (palette-quantized, to stay small).
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".ico"}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]
PROBE_NAME = "_fp8emu_site_check.html"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.refs = []          # (attribute, value)

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if v is None:
                continue
            if k in ("id", "name") and (k == "id" or tag == "a"):
                self.ids.add(v)
            elif (k == "href" and tag in ("a", "link", "area")) or (k == "src" and tag in ("img", "script", "iframe", "source")):
                self.refs.append((f"<{tag} {k}>", v))


def pages(root: Path) -> list:
    """Every HTML page of the site (the probe page and the theme's template files in _static excluded)."""
    return sorted(p for p in root.rglob("*.html")
                  if p.name != PROBE_NAME and "_static" not in p.relative_to(root).parts)


def check_links(root: Path) -> list:
    """Broken internal links and anchors, one message each."""
    parsed = {}
    for p in pages(root):
        parser = _Page()
        parser.feed(p.read_text(encoding="utf-8", errors="replace"))
        parsed[p.resolve()] = parser
    problems = []
    for page, parser in parsed.items():
        for attr, ref in parser.refs:
            url = urlsplit(ref)
            if url.scheme or ref.startswith("//") or ref.startswith("mailto:"):
                continue              # external: sphinx-build -b linkcheck's business
            target = page if not url.path else (page.parent / unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            rel = page.relative_to(root.resolve())
            if not target.exists():
                problems.append(f"{rel}: {attr} {ref!r}: no such file")
                continue
            if root.resolve() not in target.parents:
                problems.append(f"{rel}: {attr} {ref!r}: points outside the site")
                continue
            frag = unquote(url.fragment)
            if frag and target.suffix == ".html":
                ids = parsed.get(target)
                if ids is not None and frag not in ids.ids:
                    problems.append(f"{rel}: {attr} {ref!r}: no anchor #{frag} in {target.name}")
    return problems


def check_images(root: Path) -> tuple:
    """(count, problems): every image file of the site decoded."""
    from PIL import Image
    files = [p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()]
    problems = []
    for p in files:
        try:
            if p.suffix.lower() == ".svg":
                ET.parse(p)
            else:
                with Image.open(p) as im:
                    im.load()
                    if im.width == 0 or im.height == 0:
                        raise ValueError("empty image")
        except Exception as exc:     # noqa: BLE001 -- any failure to decode is the finding
            problems.append(f"{p.relative_to(root)}: does not decode: {exc}")
    return len(files), problems


def chromium() -> str:
    """The Chromium executable."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("check_docs_site: chromium is not installed (Debian: apt-get install chromium)")


_PROBE = """<!doctype html><html><head><meta charset="utf-8"><title>site check</title></head><body>
<iframe id="f" style="width:1280px;height:900px"></iframe><pre id="fp8emu-site-check"></pre>
<script>
const pages = %s;
const out = [];
const frame = document.getElementById("f");
function done() { document.getElementById("fp8emu-site-check").textContent = JSON.stringify(out); }
function next(i) {
  if (i >= pages.length) { done(); return; }
  const timer = setTimeout(() => { out.push({page: pages[i], loaded: false}); next(i + 1); }, 30000);
  frame.onload = () => {
    clearTimeout(timer);
    let r = {page: pages[i], loaded: true};
    try {
      const d = frame.contentDocument;
      r.ready = d.readyState;
      r.title = d.title;
      r.article = !!d.querySelector("main, article, .bd-article");
      r.styles = d.styleSheets.length;
      r.images = Array.from(d.images).map(im => ({src: im.getAttribute("src"), complete: im.complete,
                                                   width: im.naturalWidth, height: im.naturalHeight}));
    } catch (e) { r.error = String(e); }
    out.push(r);
    setTimeout(() => next(i + 1), 0);
  };
  frame.src = pages[i];
}
next(0);
</script></body></html>
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def check_in_browser(root: Path, exe: str, timeout: int = 900) -> tuple:
    """(pages checked, problems) from one headless Chromium run over every page."""
    names = [p.relative_to(root).as_posix() for p in pages(root)]
    probe = root / PROBE_NAME
    probe.write_text(_PROBE % json.dumps(names), encoding="utf-8")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory() as profile:
            url = f"http://127.0.0.1:{server.server_address[1]}/{PROBE_NAME}"
            run = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                  "--virtual-time-budget=3600000", "--dump-dom", url],
                                 capture_output=True, text=True, timeout=timeout)
    finally:
        server.shutdown()
        server.server_close()
        probe.unlink()
    m = re.search(r'<pre id="fp8emu-site-check">(.*?)</pre>', run.stdout, re.S)
    if run.returncode or not m or not m.group(1).strip():
        return 0, [f"chromium did not finish the probe: exit {run.returncode}, {run.stderr[-800:]}"]
    results = json.loads(html.unescape(m.group(1)))
    problems = []
    for r in results:
        where = r["page"]
        if not r.get("loaded") or r.get("error") or r.get("ready") != "complete":
            problems.append(f"{where}: did not load in Chromium ({r})")
            continue
        if not r.get("title") or not r.get("article") or not r.get("styles"):
            problems.append(f"{where}: loaded without a title, an article element or stylesheets ({r})")
        for im in r["images"]:
            if not (im["complete"] and im["width"] > 0 and im["height"] > 0):
                problems.append(f"{where}: image {im['src']!r} did not decode in Chromium")
    if len(results) != len(names):
        problems.append(f"chromium reported {len(results)} of {len(names)} pages")
    return len(results), problems


def screenshot(root: Path, exe: str, out: Path, width=1280, height=900, timeout=120) -> None:
    """Screenshot of the landing page, palette-quantized."""
    from PIL import Image
    with tempfile.TemporaryDirectory() as d:
        shot = Path(d) / "shot.png"
        run = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={d}/profile", f"--window-size={width},{height}",
                              "--virtual-time-budget=10000", f"--screenshot={shot}", (root / "index.html").as_uri()],
                             capture_output=True, text=True, timeout=timeout)
        if run.returncode or not shot.is_file():
            raise SystemExit(f"check_docs_site: chromium could not take the screenshot: {run.stderr[-800:]}")
        out.parent.mkdir(parents=True, exist_ok=True)
        Image.open(shot).convert("RGB").quantize(colors=128).save(out, optimize=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", type=Path, help="the built HTML folder (docs/_build/html)")
    ap.add_argument("--screenshot", type=Path, help="write a screenshot of the landing page here")
    ap.add_argument("--no-browser", action="store_true", help="links and images only")
    args = ap.parse_args(argv)
    root = args.site.resolve()
    if not (root / "index.html").is_file():
        print(f"check_docs_site: error: {root} has no index.html (build the docs first)", file=sys.stderr)
        return 2
    problems = check_links(root)
    print(f"check_docs_site: {len(pages(root))} pages, internal links and anchors: "
          f"{len(problems)} broken")
    n_img, bad = check_images(root)
    print(f"check_docs_site: {n_img} image files, {len(bad)} that do not decode")
    problems += bad
    if not args.no_browser:
        exe = chromium()
        n, bad = check_in_browser(root, exe)
        print(f"check_docs_site: Chromium loaded {n} pages; {len(bad)} problems")
        problems += bad
        if args.screenshot:
            screenshot(root, exe, args.screenshot)
            print(f"check_docs_site: landing page screenshot {args.screenshot}")
    for p in problems:
        print(f"check_docs_site: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
