"""Regenerate the explorer screenshots of the documentation's examples.

    python docs/screenshots.py          # needs Chromium (/usr/bin/chromium) and playwright

Runs each document below as tests/test_docs.py does (a fresh process in a
scratch directory that links to the repository), opens each explorer page its
examples write in Chromium, acts on it as a reader would (selects a line,
follows the NaN banner) and saves a screenshot in docs/images/. The files an
example writes for Model Explorer (``model_explorer=DIR``) are opened in Model
Explorer's own page, served by its own server (tests/model_explorer_server.py),
with every layer expanded and one overlay shown. The pages' fingerprints
(SHA-256 of all but the whole arrays kept for "show all values", whose last
digits depend on the machine; of Model Explorer's node data, to 5 digits) go
to docs/images/explorer_pages.json: tests/test_docs.py regenerates the pages
and fails when one no longer matches its screenshot.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
MANIFEST = IMAGES / "explorer_pages.json"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1500, "height": 860}

# document -> (page its examples write, screenshot, what the reader does first)
PAGES = {
    "README.md": [("tour.html", "readme_tour.png", ("line", "jnp.tanh(x @ y)"))],
    "docs/tutorial.md": [("tutorial_lowering.html", "tutorial_lowering.png", ("line", "jnp.sin(x) * y")),
                         ("tutorial_xla.html", "tutorial_xla.png", ("line", "return y + jnp.sin(x) * 2.0")),
                         ("tutorial_xla.html", "tutorial_xla_passes.png", ("banner", "xla")),
                         ("tutorial_devices.html", "tutorial_devices.png", ("device", 4)),
                         ("tutorial_devices.html", "tutorial_xla_collectives.png", ("banner", "xla-collectives"))],
    "docs/tools.md": [("running_log_sum.html", "tools_nonfinite.png", ("banner", "nonfinite")),
                      ("scaled_sum.html", "tools_explore.png", ("line", "z = x * 2.0 + y")),
                      ("log_exp_and_product.html", "tools_xla_graph.png", ("fusion", "%bitcast_add_fusion"))],
    "docs/sharding.md": [("sharded_matmul.html", "sharding_per_device.png", ("device", 2))],
}
# document -> (directory its example writes with model_explorer=, screenshot, the overlay shown)
MODEL_EXPLORER_PAGES = {
    "docs/tools.md": [("standardize_me", "tools_model_explorer.png", "where the NaN or inf of a result was made")],
}


def act(page, action) -> None:
    """Do what the screenshot shows: click the source line holding a text, or a banner;
    or choose a device of a per-device page and open its collectives panel; or open an
    XLA fusion of the graph of XLA's optimized program."""
    kind, what = action
    if kind == "line":
        page.locator("#python .line", has_text=what).first.click()
    elif kind == "fusion":
        page.locator("#xla-graph .node.fusion", has_text=what).first.click()
    elif kind == "device":
        page.select_option("#device", str(what))
        page.click("#banners .collectives")
    else:
        page.click(f"#banners .{what}")
    page.wait_for_timeout(100)


def model_explorer_screenshot(browser, directory: pathlib.Path, overlay: str, image: pathlib.Path) -> None:
    """Model Explorer's page on the files in ``directory``, every layer expanded and
    ``overlay`` colouring the graph."""
    from model_explorer_server import ModelExplorerServer

    overlays = sorted(directory.glob("*.json"))
    with ModelExplorerServer(directory / "module.mlir", overlays) as server:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(server.url)
        page.wait_for_selector("table.results tbody tr", timeout=120_000)
        page.locator("mat-icon", has_text="unfold_more_double").first.click()
        shown = page.get_by_text(overlay, exact=True).first          # the overlay's row among the providers
        shown.locator("xpath=..").locator("mat-icon", has_text="visibility_off").first.click()
        page.mouse.move(0, VIEWPORT["height"] - 1)          # no tooltip over the graph
        page.wait_for_timeout(1500)
        page.screenshot(path=str(image))
        page.close()


def main() -> None:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "tests"))
    from test_docs import explorer_page_fingerprint, model_explorer_fingerprint

    manifest = []
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        scratch = pathlib.Path(scratch)
        for entry in ROOT.iterdir():
            if not entry.name.startswith("."):
                (scratch / entry.name).symlink_to(entry)
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for document in dict.fromkeys([*PAGES, *MODEL_EXPLORER_PAGES]):
            pages = PAGES.get(document, [])
            report = scratch / "report.json"
            subprocess.run([sys.executable, str(ROOT / "tests" / "test_docs.py"), str(ROOT / document), str(report)],
                           cwd=scratch, check=True)
            failed = [result for result in json.loads(report.read_text()) if result["error"]]
            if failed:
                raise SystemExit(f"{document}: an example fails:\n{failed[0]['error']}")
            for page_name, image, action in pages:
                page_path = scratch / page_name
                page = browser.new_page(viewport=VIEWPORT)
                page.goto(page_path.as_uri())
                act(page, action)
                page.screenshot(path=str(IMAGES / image))
                page.close()
                manifest.append({"document": document, "page": page_name,
                                 "sha256": explorer_page_fingerprint(page_path),
                                 "screenshot": f"docs/images/{image}"})
                print(f"{document}: {page_name} -> docs/images/{image}")
            for directory, image, overlay in MODEL_EXPLORER_PAGES.get(document, []):
                model_explorer_screenshot(browser, scratch / directory, overlay, IMAGES / image)
                manifest.append({"document": document, "model_explorer": directory,
                                 "sha256": model_explorer_fingerprint(scratch / directory),
                                 "screenshot": f"docs/images/{image}"})
                print(f"{document}: {directory} -> docs/images/{image}")
        browser.close()
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
