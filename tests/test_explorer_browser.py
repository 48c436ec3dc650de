"""The explorer page in a real browser: Debian's Chromium (/usr/bin/chromium) driven by
Playwright. Skipped without them (.ci/run installs Chromium as root, best effort).

One browser per module; each test opens a page from disk, as a user would.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from browser import CHROMIUM, chromium
from oracles import run_xla

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no Chromium at /usr/bin/chromium")
sync_api = pytest.importorskip("playwright.sync_api")

X = (np.arange(12, dtype=np.float32).reshape(3, 4) - 6) / 10
Y = (np.arange(20, dtype=np.float32).reshape(4, 5) - 10) / 10


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture
def open_page(browser, tmp_path):
    """Opens the explorer page of ``target`` on ``args`` from disk; on teardown, checks
    that the page logged no error."""
    pages = []

    def opener(target, *args, **kwargs):
        path = tmp_path / f"page{len(pages)}.html"
        si.explore(target, *args, path=path, **kwargs)
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        errors = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        pages.append((page, errors))
        return page

    yield opener
    for page, errors in pages:
        assert errors == []
        page.close()


def texts(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "nodes => nodes.map(n => n.textContent)")


def op_names(page, selector: str) -> set[str]:
    return set(texts(page, f"{selector} > .opname"))


def hlo_lines(page, selector: str) -> list[int]:
    return [int(n) for n in page.eval_on_selector_all(f"#stablehlo {selector}", "rows => rows.map(r => r.dataset.hlo)")]


def test_the_readme_example_links_source_ops_and_values(open_page):
    f = jax.jit(lambda x, y: {"h": jnp.tanh(x @ y).sum(0)})
    page = open_page(f, X, Y)
    page.locator("#python .line", has_text="jnp.tanh(x @ y)").click()
    # the line became these ops (the reduction's add in its body): nodes and module lines light up
    assert op_names(page, ".node.hl") == {"stablehlo.dot_general", "stablehlo.tanh", "stablehlo.constant",
                                          "stablehlo.reduce", "stablehlo.add"}
    assert hlo_lines(page, ".line.hl") == [3, 4, 5, 6]
    assert [t.strip() for t in texts(page, "#jaxpr .line.hl")] == [
        "c:f32[3,5] = dot_general[", "dimension_numbers=(([1], [0]), ([], []))", "preferred_element_type=float32",
        "] a b", "d:f32[3,5] = tanh c", "e:f32[5] = reduce_sum[axes=(0,) out_sharding=None] d"]
    assert "became 5 op(s)" in page.inner_text("#details")
    # the other way round: the tanh node selects its module line and its source line, and shows its values
    page.locator(".node", has=page.locator(".opname", has_text="stablehlo.tanh")).click()
    assert op_names(page, ".node.selected") == {"stablehlo.tanh"}
    assert hlo_lines(page, ".line.selected") == [4]
    assert [t.strip() for t in texts(page, "#python .line.hl .text")] == ['f = jax.jit(lambda x, y: {"h": jnp.tanh(x @ y).sum(0)})']
    details = page.inner_text("#details")
    assert "stablehlo.tanh" in details and "result #0: f32[3,5]" in details
    dot = run_xla(lambda x, y: x @ y, X, Y)[0]
    assert f"operand #0: f32[3,5]\n{si.tools.summarize(dot)}" in details   # the dot's result, consumed
    page.click("#details .show-full")
    shown = page.inner_text("#details pre.full")
    values = np.array(shown.replace("[", " ").replace("]", " ").split(), np.float32).reshape(3, 5)
    np.testing.assert_allclose(values, run_xla(lambda x, y: jnp.tanh(x @ y), X, Y)[0], rtol=1e-5)


def two_lines(x, w):
    h = x @ w
    return jnp.tanh(h)


def test_each_line_selects_its_own_ops_and_search_finds_them(open_page):
    page = open_page(two_lines, X, Y)
    page.locator("#python .line", has_text="h = x @ w").click()
    assert op_names(page, ".node.hl") == {"stablehlo.dot_general"} and hlo_lines(page, ".line.hl") == [3]
    assert texts(page, "#jaxpr .line.hl")[0].strip().startswith("c:f32[3,5] = dot_general[")
    page.locator("#stablehlo .line", has_text="stablehlo.tanh").click()
    assert op_names(page, ".node.selected") == {"stablehlo.tanh"} and op_names(page, ".node.hl") == set()
    assert [t.strip() for t in texts(page, "#python .line.hl .text")] == ["return jnp.tanh(h)"]
    assert [t.strip() for t in texts(page, "#jaxpr .line.hl")] == ["d:f32[3,5] = tanh c"]
    # search by op name, then by line
    page.fill("#search", "DOT")
    assert page.inner_text("#search-count") == "1 match" and op_names(page, ".node.match") == {"stablehlo.dot_general"}
    page.press("#search", "Enter")
    assert op_names(page, ".node.selected") == {"stablehlo.dot_general"}
    line = two_lines.__code__.co_firstlineno + 2
    page.fill("#search", str(line))
    assert op_names(page, ".node.match") == {"stablehlo.tanh"}


def test_loop_iterations_are_browsable(open_page):
    def doubling(x):
        return jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))

    page = open_page(doubling, np.float32(0.5))
    body = page.locator('.region:has(> .region-head .toggle:text("body"))')
    multiply = body.locator(".node", has=page.locator(".opname", has_text="stablehlo.multiply"))
    carried = body.locator("> .canvas > .node.input", has=page.locator(".opname", has_text="%arg1"))
    shown = []
    for _ in range(3):
        shown.append((body.locator("> .region-head .call-text").inner_text().strip(),
                      carried.locator(".value").inner_text(), multiply.locator(".value").inner_text()))
        body.locator("> .region-head .next").click()
    # 0.5 doubled in iterations 0, 1, 2: each iteration gets what the one before returned
    assert shown == [("iteration 0 (1 of 3)", "f32[] 0.5", "f32[] 1"), ("iteration 1 (2 of 3)", "f32[] 1", "f32[] 2"),
                     ("iteration 2 (3 of 3)", "f32[] 2", "f32[] 4")]
    # after the last, the first again; a collapsed region hides its ops
    assert body.locator("> .region-head .call-text").inner_text().strip() == "iteration 0 (1 of 3)"
    body.locator("> .region-head .toggle").click()
    assert page.locator('.region:has(> .region-head .toggle:text("body")) .node').count() == 0


def running_log_sum(xs):
    def step(total, x):
        total = total + jnp.log(x)
        return total, total
    return jax.lax.scan(step, 0.0, xs)


def scaled_sum(x, y):
    z = x * 2.0 + y
    return jnp.where(z > 0, z, 0.0).sum()


def test_the_nonfinite_banner_opens_the_iteration_where_the_nan_appeared(open_page):
    page = open_page(running_log_sum, np.array([1.0, 2.0, -3.0, 4.0], np.float32))
    page.click("#banners .nonfinite")
    selected = page.locator(".node.selected")
    assert op_names(page, ".node.selected") == {"stablehlo.log"}
    assert selected.locator(".value").inner_text() == "f32[] nan" and "nonfinite" in selected.get_attribute("class")
    body = page.locator('.region:has(> .region-head .toggle:text("body"))')
    assert body.locator("> .region-head .call-text").inner_text().strip() == "iteration 2 (3 of 4)"
    assert "inside stablehlo.while" in page.inner_text("#details .report")
    # its operand, the scan's element of that iteration, comes from the calling op
    assert "operand #0: f32[]\nf32[] -3" in page.inner_text("#details")


GEOMETRY = """() => {
  const problems = [];
  const box = n => n.getBoundingClientRect();
  const overlap = (a, b, margin) => a.left + margin < b.right && b.left + margin < a.right &&
                                    a.top + margin < b.bottom && b.top + margin < a.bottom;
  const inside = (p, r) => p.x > r.left + 2 && p.x < r.right - 2 && p.y > r.top + 2 && p.y < r.bottom - 2;
  for (const canvas of document.querySelectorAll(".canvas")) {
    const nodes = [...canvas.children].filter(n => n.classList.contains("node"));
    const byId = new Map(nodes.map(n => [n.dataset.step || n.dataset.node, n]));
    const labels = [...canvas.querySelectorAll(":scope > svg > text")];
    for (let i = 0; i < nodes.length; i++) {
      for (let j = i + 1; j < nodes.length; j++)
        if (overlap(box(nodes[i]), box(nodes[j]), 0)) problems.push("nodes overlap: " + nodes[i].innerText + " / " + nodes[j].innerText);
      for (const label of labels)
        if (overlap(box(nodes[i]), box(label), 1)) problems.push("label on node: " + label.textContent + " / " + nodes[i].innerText);
    }
    for (let i = 0; i < labels.length; i++)
      for (let j = i + 1; j < labels.length; j++)
        if (overlap(box(labels[i]), box(labels[j]), 1)) problems.push("labels overlap: " + labels[i].textContent);
    const origin = box(canvas);
    for (const path of canvas.querySelectorAll(":scope > svg > path.edge")) {
      const length = path.getTotalLength();
      for (let d = 0; d <= length; d += 3) {
        const point = path.getPointAtLength(d);
        const p = {x: origin.left + point.x, y: origin.top + point.y};
        for (const node of nodes) {
          const id = node.dataset.step || node.dataset.node;
          if (id !== path.dataset.from && id !== path.dataset.to && inside(p, box(node)))
            problems.push("edge " + path.dataset.from + "->" + path.dataset.to + " through " + node.innerText.split("\\n")[0]);
        }
      }
    }
  }
  return [...new Set(problems)];
}"""

TRUNCATED = """() => [...document.querySelectorAll(".node")].filter(
  n => n.scrollWidth > n.clientWidth + 1 || [...n.children].some(c => c.scrollWidth > c.clientWidth + 1)
).map(n => n.innerText)"""


@pytest.mark.parametrize("example", ["scaled_sum", "running_log_sum"])
def test_docs_examples_have_no_overlaps_no_edges_through_nodes_and_whole_names(open_page, example):
    if example == "scaled_sum":
        page = open_page(scaled_sum, np.array([1.0, -2.0], np.float32), np.float32(1.0))
        assert "stablehlo.broadcast_in_dim" in op_names(page, ".node")
    else:
        page = open_page(running_log_sum, np.array([1.0, 2.0, -3.0, 4.0, 5.0], np.float32))
        assert "stablehlo.dynamic_update_slice" in op_names(page, ".node")
    assert page.evaluate(GEOMETRY) == []
    assert page.evaluate(TRUNCATED) == []
    # each op of the program is drawn once, with its whole name
    names = texts(page, ".node.op > .opname")
    assert len(names) == len(page.evaluate("Object.keys(explorer.data.steps)"))
    assert sorted(names) == sorted(page.evaluate("Object.values(explorer.data.steps).map(s => s.name)"))


def test_a_large_program_opens_collapsed_and_search_finds_ops_inside_regions(open_page):
    def long_program(x):
        for i in range(60):          # 4 ops a line, 60 times
            x = jnp.sin(x) * 1.01 + i
        return jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, jnp.cos(c[1])), (0, x))

    page = open_page(long_program, np.float32(0.5))
    assert page.evaluate("Object.keys(explorer.data.steps).length") > 200
    # op regions start collapsed: the loop's regions show their size, not their ops
    assert [t.strip() for t in texts(page, ".region-head .toggle")] == ["▸ cond", "▸ body"]
    assert op_names(page, ".node") >= {"stablehlo.sine", "stablehlo.while"}
    assert "stablehlo.cosine" not in op_names(page, ".node")
    page.fill("#search", "cosine")
    assert page.inner_text("#search-count") == "1 match"
    page.press("#search", "Enter")
    # the region holding it opens, and the op is selected
    assert op_names(page, ".node.selected") == {"stablehlo.cosine"}
    assert [t.strip() for t in texts(page, ".region-head .toggle")] == ["▸ cond", "▾ body"]
