"""Headless Chromium on a local copy of an asv site: what a person opening it would see.

Helpers for tests/test_asv_publish.py: a local http server for the site (asv's page reads its
data with XHR, which Chromium refuses from file://), and a page that records every console
error, script exception, failed request and request to any other host (all refused, so a
page that still needs the network fails here, not later on an offline runner).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import need_tool

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-dev-shm-usage",  # containers often give /dev/shm 64 MB
                  "--disable-component-update", "--no-first-run"]
WAIT_MS = 30_000  # every wait on the page is bounded by this


def chromium_path() -> str:
    """The system Chromium, or a skip naming the package (a failure under
    PERFGATE_REQUIRE_TOOLS=1)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        need_tool("chromium not installed: apt-get install -y --no-install-recommends "
                  "chromium fonts-dejavu-core")
    assert found is not None
    return found


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 (a free port) for the block; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@dataclass
class PageLog:
    """What went wrong while the page loaded and ran."""

    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failures
    outside: list[str] = field(default_factory=list)  # requests to any other host (refused)


@contextlib.contextmanager
def browser_page(base: str, width: int = 1280, height: int = 800) -> Iterator[tuple[Any, PageLog]]:
    """A fresh Chromium page whose requests may reach only ``base``."""
    sync_api = _playwright()
    log = PageLog()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=CHROMIUM_FLAGS, timeout=WAIT_MS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(WAIT_MS)
            page.on("console", lambda m: log.errors.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning", "assert") else None)
            page.on("pageerror", lambda e: log.errors.append(f"exception: {e}"))
            page.on("requestfailed", lambda r: log.errors.append(
                f"request failed: {r.url} ({r.failure})") if r.url.startswith(base) else None)

            def only_local(route: Any) -> None:
                if route.request.url.startswith(base):
                    route.continue_()
                else:
                    log.outside.append(route.request.url)
                    route.abort()

            page.route("**/*", only_local)
            yield page, log
        finally:
            browser.close()


def _playwright() -> Any:
    try:
        from playwright import sync_api
    except ImportError:
        need_tool("playwright (python) not installed: pip install -e '.[dev]'")
    return sync_api
