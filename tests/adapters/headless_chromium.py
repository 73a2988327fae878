"""A real headless Chromium driven over the DevTools protocol, for the episode viewer's tests.

Debian's ``chromium`` package (``scripts/setup.sh --test`` installs it; no browser is downloaded)
is started with ``--remote-debugging-port=0``; the test talks to its page over the protocol's
WebSocket (the ``websockets`` package of the ``serve`` extra): navigate, wait for the page to say
it is ready, evaluate expressions, collect console errors, uncaught exceptions and log errors
(Content-Security-Policy violations included), and take screenshots.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


class Chromium:
    """One headless browser with one page (a context manager)."""

    def __init__(self, width: int = 1300, height: int = 1000, timeout_s: float = 60.0) -> None:
        exe = find_chromium()
        if exe is None:
            raise RuntimeError("no chromium on PATH (apt-get install chromium)")
        self.timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="mas-chromium-")
        args = [
            exe,
            "--headless",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-port=0",
            f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        if os.geteuid() == 0:  # Chromium refuses to run as root inside its own sandbox
            args.insert(1, "--no-sandbox")
        self._proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        ws_url = self._devtools_url()
        port = re.search(r":(\d+)/", ws_url).group(1)  # type: ignore[union-attr]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        from websockets.sync.client import connect

        self._stack = contextlib.ExitStack()
        self._ws = self._stack.enter_context(
            connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        )
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _devtools_url(self) -> str:
        found: list[str] = []

        def read() -> None:
            assert self._proc.stderr is not None
            for line in self._proc.stderr:
                m = re.search(r"DevTools listening on (ws://\S+)", line)
                if m and not found:
                    found.append(m.group(1))
            # keep draining so that the browser never blocks on a full pipe

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + self.timeout_s
        while not found:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.05)
        return found[0]

    # ---------------------------------------------------------------------------------------
    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (events that arrive meanwhile are kept)."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout_s
        while True:
            msg = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self.events.append(msg)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        res = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression!r} threw: {res['exceptionDetails']}")
        return res["result"].get("value")

    def open(self, url: str, ready: str = "document.body && document.body.dataset.ready") -> Any:
        """Navigate to ``url`` and wait until the expression ``ready`` is truthy; returns it."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(ready)
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"{url} did not become ready")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        self.call("Runtime.evaluate", expression="0")  # flush the events sent before now
        out = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif method == "Runtime.exceptionThrown":
                out.append(str(p["exceptionDetails"]))
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"{p['entry'].get('source')}: {p['entry'].get('text')}")
        return out

    def screenshot(self, clip: dict[str, float] | None = None) -> bytes:
        """A PNG of the page, or of ``clip`` (``x, y, width, height`` in page pixels)."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        return base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])

    def rect(self, selector: str) -> dict[str, float]:
        """The page-coordinate box of the first element matching ``selector``."""
        return dict(
            self.evaluate(
                "(() => { const r = document.querySelector("
                + json.dumps(selector)
                + ").getBoundingClientRect(); return {x: r.left + scrollX, y: r.top + scrollY, "
                "width: r.width, height: r.height}; })()"
            )
        )

    def close(self) -> None:
        stack = getattr(self, "_stack", None)
        if stack is not None:
            stack.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
