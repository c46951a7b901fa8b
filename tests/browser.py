"""A real headless Chromium for tests, driven over the DevTools protocol on a pipe (stdlib only):
load a page, collect its console errors, exceptions and failed loads, measure it with JavaScript
at several widths, take screenshots."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
NO_BROWSER = "no headless Chromium on PATH (scripts/test.sh installs Debian's chromium-headless-shell as root)"


def find_browser() -> str | None:
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


class _Pipe:
    """CDP over --remote-debugging-pipe: JSON messages separated by NUL bytes, fd 3 in, fd 4 out."""

    def __init__(self, write_fd: int, read_fd: int):
        self.write_fd, self.read_fd, self.buffer, self.next_id = write_fd, read_fd, b"", 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _read(self) -> dict:
        while b"\0" not in self.buffer:
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed the pipe")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def wait_for(self, method: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(method)
            self.events.append(self._read())


class Page:
    """One loaded page in its own browser: resize it, evaluate JavaScript in it, shoot it."""

    def __init__(self, cdp: _Pipe, session: str, height: int):
        self.cdp, self.session, self.height = cdp, session, height

    def set_width(self, width: int) -> None:
        """Lay the page out for a viewport this wide (as a window that wide would)."""
        self.cdp.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": self.height, "deviceScaleFactor": 1, "mobile": False}, session=self.session)
        self.evaluate("document.body.offsetHeight")  # wait for the new layout

    def evaluate(self, expression: str):
        """The value of a JavaScript expression (JSON-serializable) in the page."""
        reply = self.cdp.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=self.session)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails'].get('text')}")
        return reply["result"].get("value")

    def screenshot(self, full_page: bool = False) -> bytes:
        """A PNG of the viewport, or of the whole page."""
        params: dict = {"format": "png"}
        if full_page:
            size = self.cdp.send("Page.getLayoutMetrics", session=self.session)["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        return base64.b64decode(self.cdp.send("Page.captureScreenshot", params, session=self.session)["data"])

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed resource loads so far."""
        errors = []
        for e in self.cdp.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e.get("method") == "Runtime.exceptionThrown":
                errors.append("exception: " + p.get("exceptionDetails", {}).get("text", ""))
            elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append("log: " + p["entry"].get("text", "") + " " + p["entry"].get("url", ""))
        return errors


@contextlib.contextmanager
def open_page(page: Path, width: int = 1280, height: int = 2400, timeout: float = 60) -> Iterator[Page]:
    """A page loaded in a fresh headless Chromium, closed on leaving."""
    browser = find_browser()
    if browser is None:
        raise FileNotFoundError(NO_BROWSER)
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    profile = tempfile.mkdtemp(prefix="chromium-profile-")

    def child_fds():  # the browser reads commands on fd 3 and writes replies on fd 4
        # Copy both ends out of the way first (the pipes may themselves be fds 3 and 4); dup2
        # makes the copies inheritable, every other descriptor here is close-on-exec.
        read_end, write_end = os.dup(to_browser_r), os.dup(from_browser_w)
        os.dup2(read_end, 3)
        os.dup2(write_end, 4)

    proc = subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", f"--user-data-dir={profile}",
         f"--window-size={width},{height}", "--hide-scrollbars", "about:blank"],
        close_fds=False, preexec_fn=child_fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_browser_r)
    os.close(from_browser_w)
    cdp = _Pipe(to_browser_w, from_browser_r)
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            cdp.send(f"{domain}.enable", session=session)
        shown = Page(cdp, session, height)
        shown.set_width(width)
        cdp.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        cdp.wait_for("Page.loadEventFired", timeout)
        yield shown
    finally:
        proc.kill()
        proc.wait()
        os.close(to_browser_w)
        os.close(from_browser_r)
        shutil.rmtree(profile, ignore_errors=True)


def load(page: Path, width: int = 1280, height: int = 2400, timeout: float = 60) -> tuple[list[str], bytes]:
    """Errors the page caused (console errors, uncaught exceptions, failed resource loads) and a
    PNG screenshot of its first screen."""
    with open_page(page, width, height, timeout) as shown:
        return shown.errors, shown.screenshot()
