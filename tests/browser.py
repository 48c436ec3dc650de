"""Debian's Chromium (/usr/bin/chromium) driven by Playwright, for the browser tests
(never ``playwright install``: it downloads a browser build)."""

import contextlib

CHROMIUM = "/usr/bin/chromium"


@contextlib.contextmanager
def chromium():
    """A headless Chromium, closed on exit."""
    from playwright import sync_api

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield browser
        browser.close()
