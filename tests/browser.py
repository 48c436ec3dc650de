"""Debian's Chromium (/usr/bin/chromium) driven by Playwright, for the browser tests
(never ``playwright install``: it downloads a browser build)."""

import contextlib
import html.parser

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


class _Iframes(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcdocs = []

    def handle_starttag(self, tag, attrs):
        if tag == "iframe":
            self.srcdocs.append(dict(attrs)["srcdoc"])


def iframe_pages(fragment: str) -> list[str]:
    """The pages (``srcdoc``) of the iframes in an HTML fragment, as an HTML parser
    reads the attribute (the character references resolved)."""
    parser = _Iframes()
    parser.feed(fragment)
    parser.close()
    return parser.srcdocs
