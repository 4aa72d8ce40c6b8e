"""Check the built documentation in a real browser (headless Chromium), offline.

Builds the site (``mkdocs build --strict``), serves it on 127.0.0.1 and loads its pages in headless
Chromium driven by Selenium, with the window of a laptop screen (1400 x 900). A page fails when

- a formula is left as raw TeX in the rendered page (``\\(``, ``\\[``, ``$$``, ``$x$`` or a
  ``\\command`` in text outside code), or MathJax reports a TeX error;
- the page requests any host other than 127.0.0.1, or a local file that is missing;
- the browser console logs an error;
- a table is wider than the page's content column (a column behind a scrollbar), or a code
  block's longest line is cut off.

Concepts, PiT and the ``meshop.nn`` API page are always checked; ``--all`` checks every page.
Screenshots go to ``--shots`` (default ``site-check/``). Run by ``make docs-check``, which installs
Debian's ``chromium`` and ``chromium-driver`` first.

    python scripts/docs_check.py [--all] [--site DIR] [--shots DIR]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["concepts/", "pit/", "api/nn/"]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,900",
]

# In the page: wait until MathJax has typeset every formula, then report what is wrong.
WAIT_JS = """
const done = arguments[arguments.length - 1];
const t0 = Date.now();
(function poll() {
  const mj = window.MathJax;
  const pending = [...document.querySelectorAll('.arithmatex')]
    .filter((el) => !el.querySelector('mjx-container')).length;
  if (mj && mj.startup && mj.startup.promise && pending === 0) {
    mj.startup.promise.then(() => done({ok: true, waited: Date.now() - t0}));
  } else if (Date.now() - t0 > 20000) {
    done({ok: false, pending: pending, mathjax: typeof mj});
  } else {
    setTimeout(poll, 100);
  }
})();
"""

INSPECT_JS = r"""
const skip = new Set(['CODE', 'PRE', 'SCRIPT', 'STYLE', 'MJX-ASSISTIVE-MML', 'TEXTAREA']);
const texLike = [/\\\(|\\\)|\\\[|\\\]/, /\$\$/, /(^|[^\w$])\$[^$\s][^$]*\$(?!\w)/,
                 /\\(frac|sum|int|mathrm|mathcal|lVert|operatorname|begin|left|right)\b/];
const raw = [];
const walker = document.createTreeWalker(document.querySelector('article') || document.body,
                                         NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  let el = node.parentElement, inSkip = false;
  for (; el; el = el.parentElement) if (skip.has(el.tagName)) { inSkip = true; break; }
  if (inSkip) continue;
  const text = node.textContent;
  if (texLike.some((re) => re.test(text))) raw.push(text.trim().slice(0, 120));
}
const errors = [...document.querySelectorAll('mjx-merror, [data-mjx-error]')]
  .map((el) => (el.getAttribute('data-mjx-error') || el.textContent).slice(0, 120));
const formulas = document.querySelectorAll('mjx-container').length;
const content = document.querySelector('article');
const width = content ? content.clientWidth : window.innerWidth;
const wide = [...document.querySelectorAll('article table')]
  .filter((t) => t.scrollWidth > width + 1 || t.parentElement.scrollWidth >
               t.parentElement.clientWidth + 1)
  .map((t) => (t.querySelector('th') || t).textContent.trim().slice(0, 60) +
              ` (${t.scrollWidth} px > ${width} px)`);
const cut = [...document.querySelectorAll('article pre > code')]
  .filter((c) => c.scrollWidth > c.clientWidth + 1)
  .map((c) => c.textContent.split('\n').reduce((a, b) => (b.length > a.length ? b : a))
               .slice(0, 90) + ` (${c.scrollWidth} px > ${c.clientWidth} px)`);
return {raw: raw, errors: errors, formulas: formulas, wide: wide, cut: cut};
"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the check prints its own report
        pass


def build(site: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    cmd = [str(mkdocs) if mkdocs.exists() else "mkdocs", "build", "--strict", "-q", "-d", str(site)]
    print("[docs-check]", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def browser(profile: Path):
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        sys.exit(
            "docs-check: Chromium and its driver are missing; install Debian's packages with "
            "`apt-get install chromium chromium-driver` (make docs-check does it)."
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(driver), options=options)
    drv.set_script_timeout(60)  # the page's own wait (WAIT_JS) gives up after 20 s
    drv.set_page_load_timeout(60)
    return drv


def check_page(drv, base: str, page: str, shots: Path) -> list[str]:
    drv.get_log("performance")  # drop the previous page's requests
    drv.get(base + page)
    waited = drv.execute_async_script(WAIT_JS)
    found = drv.execute_script(INSPECT_JS)
    name = page.strip("/").replace("/", "_") or "index"
    drv.save_screenshot(str(shots / f"{name}.png"))
    height = drv.execute_script("return document.body.scrollHeight")
    drv.set_window_size(1400, min(max(height, 900), 16000))
    drv.save_screenshot(str(shots / f"{name}_full.png"))
    drv.set_window_size(1400, 900)

    problems = []
    if not waited.get("ok"):
        problems.append(f"MathJax did not finish: {waited}")
    problems += [f"raw TeX in the page: {t!r}" for t in found["raw"]]
    problems += [f"MathJax error: {e!r}" for e in found["errors"]]
    problems += [f"table wider than the page: {w}" for w in found["wide"]]
    problems += [f"code line cut off: {c!r}" for c in found["cut"]]
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        params = msg.get("params", {})
        if msg["method"] == "Network.requestWillBeSent":
            url = params["request"]["url"]
            parsed = urlparse(url)
            # the browser's own chrome:// pages are not the site's requests
            if parsed.scheme not in ("data", "blob", "about", "chrome") and (
                parsed.hostname != "127.0.0.1"
            ):
                problems.append(f"request to an external host: {url}")
        elif msg["method"] == "Network.responseReceived":
            status = params["response"]["status"]
            if status >= 400:
                problems.append(f"HTTP {status} for {params['response']['url']}")
    for entry in drv.get_log("browser"):
        if entry["level"] == "SEVERE":
            problems.append(f"console error: {entry['message'][:200]}")
    print(
        f"[docs-check] {page or '/':<28} {found['formulas']:4d} formulas rendered, "
        f"{len(problems)} problem(s), MathJax done after {waited.get('waited', '?')} ms",
        flush=True,
    )
    for p in problems:
        print(f"    {p}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", type=Path, help="an already built site (default: build one)")
    ap.add_argument("--shots", type=Path, default=ROOT / "site-check", help="screenshot folder")
    ap.add_argument("--all", action="store_true", help="check every page, not only three")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="meshop-docs-check-") as tmp:
        site = args.site or Path(tmp) / "site"
        if args.site is None:
            build(site)
        pages = PAGES
        if args.all:
            pages = sorted(
                str(p.parent.relative_to(site)).replace(".", "") + "/"
                for p in site.glob("**/index.html")
                if "assets" not in p.parts and "search" not in p.parts
            )
            pages = [p.lstrip("/") for p in pages]
        args.shots.mkdir(parents=True, exist_ok=True)
        server, base = serve(site)
        print(f"[docs-check] serving {site} at {base}", flush=True)
        drv = browser(Path(tmp) / "chromium-profile")
        try:
            print(f"[docs-check] {drv.capabilities.get('browserVersion')} headless", flush=True)
            problems = [x for p in pages for x in check_page(drv, base, p, args.shots)]
        finally:
            drv.quit()
            server.shutdown()
    print(f"[docs-check] screenshots in {args.shots}")
    if problems:
        print(f"[docs-check] FAILED: {len(problems)} problem(s) on {len(pages)} page(s)")
        return 1
    print(f"[docs-check] passed: {len(pages)} page(s), no raw TeX, no external request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
