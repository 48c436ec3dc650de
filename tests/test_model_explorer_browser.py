"""Model Explorer's own page, served by its own server (a child process with a deadline:
tests/model_explorer_server.py), on the files ``si.explore(..., model_explorer=DIR)``
wrote, in a real browser (Debian's Chromium driven by Playwright).

What the page shows is read from its "Node data" table: each row is a node of the
graph on screen, by its position in Model Explorer's graph JSON (the ``#`` column),
its label, and one column per overlay. A row's value must be the one NumPy computes
from the values the op it labels made (a real Flax model: tests/zoo/), and the NaN's
origin must be marked on the op that made it.
"""

import os

import numpy as np
import pytest

from browser import CHROMIUM, chromium

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no Chromium at /usr/bin/chromium")
pytest.importorskip("playwright.sync_api")
pytest.importorskip("model_explorer", reason="Model Explorer is not installed (the model-explorer extra)")

import jax   # noqa: E402 - after the importorskips above (a clear skip without the extra)
import jax.numpy as jnp   # noqa: E402 - after the importorskips above (a clear skip without the extra)

import stablehlo_interp as si   # noqa: E402 - after the importorskips above (a clear skip without the extra)
from model_explorer_server import ModelExplorerServer   # noqa: E402 - after the importorskips above (a clear skip without the extra)
from stablehlo_interp.tools.model_explorer import model_explorer_graphs   # noqa: E402 - after the importorskips above (a clear skip without the extra)
from stablehlo_interp.tools.model_explorer.graphs import graphs_by_id   # noqa: E402 - after the importorskips above (a clear skip without the extra)

PAGE_SECONDS = 120


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


def node_data_table(browser, files, node_filter: str) -> tuple[list[str], list[list[str]]]:
    """Model Explorer's page on ``files``: the overlays' names and the rows of its Node
    data table (``#``, label, one value per overlay) for the nodes ``node_filter`` matches."""
    with ModelExplorerServer(files.module, files.overlays.values()) as server:
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(server.url)
        page.wait_for_selector("table.results tbody tr", timeout=PAGE_SECONDS * 1000)
        page.locator("input[placeholder='regex to filter nodes']").last.fill(node_filter)
        page.wait_for_timeout(500)
        shown = table(page)
        page.close()
        assert errors == []
    return shown


def table(page) -> tuple[list[str], list[tuple[list[str], list[str]]]]:
    """The Node data table: the overlays' names, and per row its cells' texts and colours."""
    names = [text.strip() for text in page.eval_on_selector_all(
        "table.results th .stat-label", "labels => labels.map(l => l.textContent)")]
    rows = page.eval_on_selector_all(
        "table.results tbody tr", "rows => rows.map(r => [...r.children].map(c => c.textContent.trim()))")
    colours = page.eval_on_selector_all(
        "table.results tbody tr", "rows => rows.map(r => [...r.children].map(c => c.style.backgroundColor))")
    return names, list(zip(rows, colours))


def largest_finite(values) -> float | None:
    magnitudes = np.concatenate([np.abs(np.asarray(v, np.float64)).ravel() for v in values])
    finite = magnitudes[np.isfinite(magnitudes)]
    return float(finite.max()) if finite.size else None


def test_a_flax_models_max_values_are_on_the_nodes_of_their_ops(browser, tmp_path):
    from zoo import PROGRAMS

    zoo = PROGRAMS["flax_linen_mlp"]()
    exploration = si.explore(zoo.function, *zoo.args, model_explorer=tmp_path)
    files = exploration.model_explorer
    made = {}                     # id(step) -> every value the op made (the explorer's trace keeps them)
    for record in exploration.trace.records:
        made.setdefault(id(record.step), []).extend(v for v in record.values if np.asarray(v).dtype.kind in "fiu")
    step_of = {(graph, node): key for key, (graph, node, _) in files.nodes.items()}
    main = graphs_by_id(model_explorer_graphs(files.module))["main"]["nodes"]

    labels = ("stablehlo.dot_general", "stablehlo.rsqrt")
    names, rows = node_data_table(browser, files, "|".join(labels))
    column = names.index("max |value|") + 2
    for row, _ in rows:
        position, label, shown = int(row[0]), row[1], row[column]
        drawn = main[position]                                  # the node this row is
        assert drawn["label"] == label and label in labels
        key = step_of[("main", drawn["id"])]
        assert files.nodes[key][2].info.name == label
        assert float(shown) == largest_finite(made[key])
    # a row for each such node: three Dense layers forward and backward, two LayerNorms
    assert len(rows) == sum(node["label"] in labels for node in main) >= 8


def test_the_nan_origin_and_the_backend_verdict_are_shown_on_their_nodes(browser, tmp_path):
    def f(x, w):
        return jnp.exp(jnp.log(x @ w)).sum()

    x = np.array([[1.0, -3.0], [2.0, 0.5]], np.float32)
    w = np.ones((2, 2), np.float32)
    with np.errstate(invalid="ignore"):
        exploration = si.explore(f, x, w, backend="cpu", model_explorer=tmp_path)
    names, rows = node_data_table(browser, exploration.model_explorer, "stablehlo")
    by_label = {row[1]: (row, colour) for row, colour in rows}
    origin = names.index("where the NaN or inf of a result was made") + 2
    count = names.index("NaN and inf count") + 2
    verdict = names.index("vs cpu: 0 same, 1 rounding noise, 2 unbounded, 3 beyond its bound") + 2
    log, log_colours = by_label["stablehlo.log"]
    assert log[origin] == "2" and log_colours[origin] == "rgb(213, 0, 0)"        # log(-2) twice: x @ w = [-2, -2]
    assert log[count] == "2" and log[verdict] == "0"
    exp, _ = by_label["stablehlo.exponential"]
    assert exp[origin] == "-" and exp[count] == "2"                               # passed on, not made
    assert [row[origin] for row, _ in rows].count("-") == len(rows) - 1


def test_the_extension_runs_the_opened_module_on_inputs_picked_in_model_explorer(browser, tmp_path):
    lowered = jax.jit(lambda x: jnp.log(x) * 2).lower(np.ones(3, np.float32))
    module = tmp_path / "f.mlir"
    module.write_text(lowered.as_text(debug_info=True))
    np.savez(tmp_path / "inputs.npz", np.array([4.0, -1.0, 0.5], np.float32))
    with ModelExplorerServer(module, extensions=["stablehlo_interp.tools.model_explorer"]) as server:
        page = browser.new_page(viewport={"width": 1500, "height": 860})
        page.goto(server.url)
        page.wait_for_selector("canvas.main", timeout=PAGE_SECONDS * 1000)
        page.get_by_text("Add per-node data").click()
        page.locator(".cdk-overlay-container").get_by_text("stablehlo-interp: run").click()
        dialog = page.locator("mat-dialog-container")
        dialog.locator("input").nth(3).wait_for(timeout=PAGE_SECONDS * 1000)   # the dialog draws its editors late
        assert dialog.locator("input").count() == 4      # the run's name, then the provider's editors in order
        dialog.locator("input").nth(1).fill(str(tmp_path / "inputs.npz"))
        dialog.get_by_text("Run", exact=True).click()
        page.wait_for_selector("table.results tbody tr", timeout=PAGE_SECONDS * 1000)
        names, rows = table(page)
        page.close()
    graph = graphs_by_id(model_explorer_graphs(module))["main"]["nodes"]
    assert [row[1] for row, _ in rows] == [node["label"] for node in graph]      # each row is the node drawn there
    shown = {row[1]: dict(zip(names, row[2:])) for row, _ in rows}
    log4 = np.log(np.float32(4))
    assert float(shown["stablehlo.log"]["max |value|"]) == float(log4)
    assert float(shown["stablehlo.multiply"]["max |value|"]) == float(log4 * np.float32(2))
    assert shown["stablehlo.log"]["NaN and inf count"] == shown["stablehlo.multiply"]["NaN and inf count"] == "1"
    assert [label for label, values in shown.items()
            if values["where the NaN or inf of a result was made"] != "-"] == ["stablehlo.log"]
