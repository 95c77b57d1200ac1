"""Headless Chromium for the dashboard tests: Debian's binary, helpers, screenshot rules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Screenshots go to the docs only when asked (QLESS_SAVE_SCREENSHOTS=1), so a test run never
# rewrites tracked files; otherwise they are taken (and checked) in a temp dir.
DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SCREEN_VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("", {}), ("-dark", {"color_scheme": "dark"}),
    ("-390", {"viewport": {"width": 390, "height": 844}}),
)
PROBE = "<img src=x onerror=alert(1)>"


def shots_dir(tmp_path: Path) -> Path:
    """Return where screenshots are written: docs/screenshots when asked, else `tmp_path`."""
    target = DOCS_SHOTS if os.environ.get("QLESS_SAVE_SCREENSHOTS") == "1" else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    return target


def wait_live(page: Any) -> None:
    """Wait until the static script has refreshed the page from the JSON API once."""
    page.wait_for_function(
        "() => (document.querySelector('[data-live-status]') || {}).textContent"
        ".startsWith('live \\u00b7')")


def save_screens(page: Any, shots: Path, pages: tuple[tuple[str, str], ...],
                 prefix: str = "") -> None:
    """Screenshot each page light, dark and 390 px wide (each must answer 200)."""
    cookies = page.context.cookies()
    for suffix, options in SCREEN_VARIANTS:
        context = page.context.browser.new_context(
            **{"viewport": {"width": 1280, "height": 900}, **options})
        context.add_cookies(cookies)
        tab = context.new_page()
        for name, path in pages:
            response = tab.goto(page.base + path)
            assert response is not None and response.status == 200, path
            if tab.locator("[data-live-src]").count():
                wait_live(tab)
            target = shots / f"{prefix}{name}{suffix}.png"
            tab.screenshot(path=str(target), full_page=True)
            assert target.stat().st_size > 5_000
        context.close()
