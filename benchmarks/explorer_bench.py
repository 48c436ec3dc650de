"""The explorer page at real size, in a real browser (Chromium driven by Playwright).

For each program: the ops in its module, the time ``si.explore`` takes to run it and
write the page, the page's size, and in Chromium (opened from disk, as a user would)
the time from the start of the navigation to the first graph on screen, and to the
text panels drawn (the page is usable for selection from then on), by the page's own
clock, and the wall time Playwright waited. Programs: the
docs' ``scaled_sum`` (15 ops), the zoo's Flax NNX transformer LM training step with 2
and with 12 decoder blocks, and a flat 20,000-op function (no name stack, no module:
the worst case for grouping). The target (issue 22): the first node within 2 s.

Issue 41's views, each on the line under its program's default page, with the page's
extra weight (its bytes beyond the default page's): the 12-layer LM with
``xla_stages=True`` (XLA CPU's optimized program, its graph and its passes, stepped
through: what each weighs on a line of its own), and the zoo's Flax NNX
LM Adam step on a 2x4 data x model mesh (8 host CPU devices) with ``per_device=True``
(the per-device program, each device's values and the collectives' bytes).

    python benchmarks/explorer_bench.py [--programs NAME ...] [--repeat R] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time
import warnings

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):     # the mesh's 8 devices
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))   # this checkout's package
import stablehlo_interp as si
from stablehlo_interp.sharding.per_device import PerDeviceWarning
from stablehlo_interp.tools.explorer import values_path

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from timing import format_time

CHROMIUM = "/usr/bin/chromium"


def scaled_sum(x, y):
    z = x * 2.0 + y
    return jnp.where(z > 0, z, 0.0).sum()


def flat(x):
    for i in range(5000):           # 4 ops a line (sine, constant, multiply, add... ), 5000 times
        x = jnp.sin(x) * 1.01 + i
    return x


def transformer_lm(depth: int):
    from zoo import flax_nnx

    program = flax_nnx.transformer_lm(depth=depth)
    return jax.jit(program.function), program.args


def sharded_lm_step():
    from zoo import SHARDED

    return SHARDED["sharded_flax_nnx_lm"]().sharded("cpu")


PROGRAMS = {
    "scaled_sum": lambda: (scaled_sum, (np.array([1.0, -2.0], np.float32), np.float32(1.0))),
    "lm_2_layers": lambda: transformer_lm(2),
    "lm_12_layers": lambda: transformer_lm(12),
    "flat_20000_ops": lambda: (flat, (np.float32(0.5),)),
    "mesh_2x4_lm": sharded_lm_step,
}

# program -> the explorer options measured beside its default page (issue 41)
VIEWS = {"lm_12_layers": {"xla_stages": True}, "mesh_2x4_lm": {"per_device": True}}


def open_times(browser, path: pathlib.Path) -> tuple[float, float, float]:
    """Seconds from the start of navigation (the page's own clock, ``performance.now()``)
    to the first graph on screen and to the text panels on screen (each: the page's
    first task after the frame that drew it); and the wall time Playwright waited for
    the page to say it is ready."""
    page = browser.new_page(viewport={"width": 1500, "height": 900})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    start = time.perf_counter()
    page.goto(path.as_uri(), wait_until="commit")
    page.wait_for_selector("body[data-ready]", state="attached", timeout=300_000)
    wall = time.perf_counter() - start
    page.wait_for_function("explorer.timings.textsPainted !== undefined", timeout=300_000)
    timings = page.evaluate("explorer.timings")
    assert page.locator("#graphs .node").first.is_visible()
    page.close()
    if errors:
        raise RuntimeError(f"{path.name}: {errors}")
    return timings.get("painted", timings["graph"]) / 1000, timings["textsPainted"] / 1000, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS), choices=list(PROGRAMS))
    parser.add_argument("--repeat", type=int, default=3, help="page openings per program (best kept)")
    parser.add_argument("--keep", help="write the pages to this directory (default: a temporary one)")
    options = parser.parse_args()
    from playwright.sync_api import sync_playwright

    warnings.simplefilter("ignore", PerDeviceWarning)   # the sharded LM's float order: its own tests judge it

    folder = pathlib.Path(options.keep or tempfile.mkdtemp(prefix="explorer_bench_"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{'program':<16} {'view':<16} {'ops':>7} {'explore':>10} {'page':>9} {'extra':>9} {'first node':>11} "
          f"{'ready':>10} {'wall':>10}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        for name in options.programs:
            function, args = PROGRAMS[name]()
            default_size = None
            views = [("default", {})] + ([(_view_name(VIEWS[name]), VIEWS[name])] if name in VIEWS else [])
            for view, view_options in views:
                path = folder / f"{name}{'' if view == 'default' else '.' + view}.html"
                start = time.perf_counter()
                exploration = si.explore(function, *args, path=path, **view_options)
                written = time.perf_counter() - start
                data = exploration.html.split('id="explorer-data">', 1)[1].split("</script>", 1)[0]
                ops = len(json.loads(data)["steps"])
                size = _page_bytes(path)
                default_size = size if default_size is None else default_size
                extra = f"+{(size - default_size) / 1e6:.2f}MB" if view != "default" else ""
                opened = [open_times(browser, path) for _ in range(options.repeat)]
                first, ready, wall = (min(t[k] for t in opened) for k in range(3))
                print(f"{name:<16} {view:<16} {ops:>7} {format_time(written):>10} {size / 1e6:>7.2f}MB {extra:>9} "
                      f"{format_time(first):>11} {format_time(ready):>10} {format_time(wall):>10}", flush=True)
                if "graph" in exploration.data.get("xla", {}):
                    print(" " * 34 + _xla_weights(exploration.data["xla"]), flush=True)
        browser.close()
    print(f"(pages in {folder}; page: the page and its values file; extra: beyond the default page's; "
          f"explore: run and write; first node, ready: the page's clock from the start "
          f"of navigation; wall: Playwright's wait for ready; best of {options.repeat} openings from disk)")


def _xla_weights(xla: dict) -> str:
    """What XLA's stages weigh in the page: the optimized program's text (its lines, linked),
    its graph, and the passes' steps back (kept apart, read on first use)."""
    parts = {"text": xla["lines"], "graph": xla["graph"], "stages": xla["back"]}
    weights = {part: len(json.dumps(value, separators=(",", ":"))) for part, value in parts.items()}
    return "of which XLA's " + ", ".join(f"{part} {weight / 1e6:.2f}MB" for part, weight in weights.items())


def _view_name(view_options: dict) -> str:
    return " ".join(f"{key}=True" for key in view_options)


def _page_bytes(path: pathlib.Path) -> int:
    """The page's bytes and those of its whole values' file beside it (what a user keeps)."""
    return path.stat().st_size + values_path(path).stat().st_size


if __name__ == "__main__":
    main()
