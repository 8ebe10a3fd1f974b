"""Headless Chromium for the report's tests: open a page offline, dump the DOM it built
or take a screenshot, and leave none of its processes behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((path for name in BROWSERS if (path := shutil.which(name))), None)
NO_BROWSER = f"no Chromium to open the report in ({', '.join(BROWSERS)} on PATH)"
PNG = b"\x89PNG\r\n\x1a\n"


def open_in_browser(page: Path, profile: Path, *extra: str) -> str:
    """Chromium headless on the page, offline: every host name fails to resolve."""
    assert BROWSER is not None, NO_BROWSER
    command = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        *extra,
        page.as_uri(),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        # Its helper processes (zygote, renderer) are in the session it leads: none may outlive the test.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    return out


def screenshot(page: Path, profile: Path, shot: Path, width: int = 1400, height: int = 3000) -> bytes:
    """The page as Chromium paints it (a PNG)."""
    open_in_browser(page, profile, f"--screenshot={shot}", f"--window-size={width},{height}")
    return shot.read_bytes()
