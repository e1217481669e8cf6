"""A tiny Chrome DevTools Protocol client for the report's browser tests.

Starts the Debian ``chromium`` headless with a fresh profile and ``--remote-debugging-port=0``,
reads the port Chromium picked from ``DevToolsActivePort``, and talks to the page target over a
WebSocket (``websocket-client``). It records what a page does while it loads: console messages,
uncaught exceptions, log entries (CSP violations, failed loads), every network request and every
JavaScript dialog (an ``alert`` means injected script ran).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
)


def chromium_binary() -> str | None:
    """The chromium executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, binary: str, *, width: int = 1360, height: int = 900, timeout: float = 30):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="bwdiag-chromium-")
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
             "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self._id = 0
        self.events: list[dict] = []
        try:
            port = self._port()
            self.ws = websocket.create_connection(self._page_ws(port), timeout=timeout,
                                                  suppress_origin=True)
            for domain in ("Page", "Runtime", "Network", "Log"):
                self.call(f"{domain}.enable")
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    def _port(self) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if marker.exists():
                text = marker.read_text().split()
                if text:
                    return int(text[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited early with status {self.proc.returncode}")
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def _page_ws(self, port: int) -> str:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                targets = json.load(resp)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.05)
        raise TimeoutError("chromium has no page target")

    # ------------------------------------------------------------------ protocol
    def _receive(self) -> dict:
        msg = json.loads(self.ws.recv())
        if "method" in msg:
            self.events.append(msg)
            if msg["method"] == "Page.javascriptDialogOpening":  # never leave the page blocked
                self._send("Page.handleJavaScriptDialog", accept=False)
        return msg

    def _send(self, method: str, **params) -> int:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        return self._id

    def call(self, method: str, **params) -> dict:
        """Send one command and return its result; events that arrive meanwhile are recorded."""
        want = self._send(method, **params)
        while True:
            msg = self._receive()
            if msg.get("id") == want:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def wait_for(self, method: str) -> dict:
        """The first recorded event named ``method``, waiting for it if needed."""
        deadline = time.monotonic() + self.timeout
        seen = 0
        while True:
            for msg in self.events[seen:]:
                if msg["method"] == method:
                    return msg
            seen = len(self.events)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {self.timeout} s")
            self._receive()

    # ------------------------------------------------------------------ page
    def open(self, path: Path) -> None:
        """Load a local file and wait for its load event; clears the recorded events first."""
        self.events.clear()
        self.call("Page.navigate", url=Path(path).resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression evaluated in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page JS failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path, *, full_page: bool = False) -> None:
        """A PNG of the viewport (or the whole page) written to ``path``."""
        params = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            metrics = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": metrics["width"],
                              "height": metrics["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", **params)["data"]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(base64.b64decode(data))

    # ------------------------------------------------------------------ what the page did
    def problems(self) -> list[str]:
        """Console errors/warnings, uncaught exceptions, error log entries and dialogs."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(
                    str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif m == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
                out.append(f"log.{p['entry']['level']}: {p['entry'].get('text')}")
            elif m == "Page.javascriptDialogOpening":
                out.append(f"dialog ({p.get('type')}): {p.get('message')}")
        return out

    def requests(self) -> list[str]:
        """URLs of every network request the page made (the page itself included)."""
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"]

    def dialogs(self) -> list[str]:
        return [e["params"].get("message", "") for e in self.events
                if e["method"] == "Page.javascriptDialogOpening"]

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            try:
                self._send("Browser.close")
            except (OSError, websocket.WebSocketException):
                pass
            ws.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_standalone(html: Path, png: Path) -> None:  # pragma: no cover - a debugging aid
    binary = chromium_binary()
    if binary is None:
        raise SystemExit("chromium is not installed")
    with Browser(binary) as b:
        b.open(html)
        print("rendered:", b.evaluate("document.documentElement.getAttribute('data-rendered')"))
        print("problems:", b.problems())
        print("requests:", b.requests())
        b.screenshot(png, full_page=True)


if __name__ == "__main__":  # python tests/browser_cdp.py page.html out.png
    import sys

    run_standalone(Path(sys.argv[1]), Path(sys.argv[2]))
    os.sys.exit(0)
