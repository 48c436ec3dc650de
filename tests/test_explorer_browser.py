"""The explorer page in a real browser: Debian's Chromium (/usr/bin/chromium) driven by
Playwright. Skipped without them (.ci/run installs Chromium as root, best effort).

One browser per module; each test opens a page from disk, as a user would.
"""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from browser import CHROMIUM, chromium
from stablehlo_interp.tools import JaxBackend
from oracles import run_xla
from divergent_on_a_device import doubled_and_off_on_device_2

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
    line = running_log_sum.__code__.co_firstlineno + 2
    assert page.inner_text("#banners .nonfinite") == f"non-finite result from: stablehlo.log at test_explorer_browser.py:{line}"
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


def sixty_steps(x, then=lambda x: x):
    for i in range(60):          # 4 ops a line, 60 times
        x = jnp.sin(x) * 1.01 + i
    return then(x)


def test_a_large_program_opens_collapsed_and_search_finds_ops_inside_regions(open_page):
    def long_program(x):
        return jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, jnp.cos(c[1])), (0, sixty_steps(x)))

    page = open_page(long_program, np.float32(0.5))
    page.wait_for_selector("body[data-ready]", state="attached")
    steps = page.evaluate("Object.keys(explorer.data.steps).length")
    assert steps > 200
    # the call of sixty_steps, drawn collapsed with its size; the loop beside it, its regions collapsed
    assert texts(page, "#section-main > .canvas > .node.group > .opname") == ["▸ sixty_steps"]
    size = int(re.match(r"(\d+) ops", page.inner_text("#section-main > .canvas > .node.group > .where"))[1])
    main_ops = page.evaluate("explorer.data.regions[explorer.data.sections[0]].steps.length")
    assert size + page.locator("#section-main > .canvas > .node.op").count() == main_ops
    assert "stablehlo.cosine" not in op_names(page, ".node")
    assert [t.strip() for t in texts(page, ".region-head .toggle")] == ["▸ cond", "▸ body"]
    # opened: its ops of one flat function in consecutive parts of at most 40
    page.click("#section-main > .canvas > .node.group")
    parts = texts(page, "#section-main > .canvas > .node.group > .canvas > .node.group > .opname")
    assert len(parts) > 1 and all(re.fullmatch(r"▸ part \d+ of \d+", part) for part in parts)
    page.click("#section-main > .canvas > .node.group > .opname")      # closed again
    page.fill("#search", "cosine")
    assert page.inner_text("#search-count") == "1 match"
    assert op_names(page, ".node.match") == {"stablehlo.while"}    # the op whose collapsed body holds it
    page.press("#search", "Enter")
    # the part and the loop's body open, and the op is selected
    assert op_names(page, ".node.selected") == {"stablehlo.cosine"}
    assert [t.strip() for t in texts(page, ".region-head .toggle")] == ["▸ cond", "▾ body"]
    assert page.evaluate(GEOMETRY) == []
    # its iterations are browsable: cos of what the iteration before gave
    body = page.locator('.region:has(> .region-head .toggle:text("body"))')
    cosine = body.locator(".node", has=page.locator(".opname", has_text="stablehlo.cosine"))
    carried = body.locator("> .canvas > .node.input", has=page.locator(".opname", has_text="%arg1"))
    first = (carried.locator(".value").inner_text(), cosine.locator(".value").inner_text())
    body.locator("> .region-head .next").click()
    assert body.locator("> .region-head .call-text").inner_text().strip() == "iteration 1 (2 of 2)"
    assert carried.locator(".value").inner_text() == first[1]
    before_loop = run_xla(sixty_steps, np.float32(0.5))[0]
    assert first == (str(si.tools.summarize(before_loop)), str(si.tools.summarize(np.cos(before_loop))))


def test_the_nonfinite_banner_opens_the_group_where_the_nan_appeared(open_page):
    def long_program(x):
        return sixty_steps(x, lambda x: jnp.log(x - 100.0)) + 1.0        # below 100: NaN

    page = open_page(long_program, np.float32(0.5))
    assert page.locator(".node.op", has=page.locator(".opname", has_text="stablehlo.log")).count() == 0
    page.click("#banners .nonfinite")
    assert op_names(page, ".node.selected") == {"stablehlo.log"}
    selected = page.locator(".node.selected")
    assert selected.locator(".value").inner_text() == "f32[] nan" and "nonfinite" in selected.get_attribute("class")


def test_the_divergence_banner_opens_the_group_of_the_first_divergent_op(open_page):
    def long_program(x):
        return sixty_steps(x, jnp.tanh) * 2.0

    def xla_with_a_bug(module_text, args):
        return JaxBackend("cpu")(module_text.replace("stablehlo.tanh", "stablehlo.sine"), args)

    page = open_page(long_program, np.float32(0.5), backend=xla_with_a_bug)
    assert op_names(page, ".node.op") & {"stablehlo.tanh"} == set()     # inside a collapsed part
    page.click("#banners .divergence")
    assert op_names(page, ".node.selected") == {"stablehlo.tanh"}
    assert "divergent" in page.locator(".node.selected").get_attribute("class")


def zoo_page(open_page, name):
    """The page of zoo program ``name`` (tests/zoo/), opened and drawn."""
    from zoo import PROGRAMS

    x64 = jax.config.jax_enable_x64      # on for the session (conftest): the zoo is written for 32 bits
    jax.config.update("jax_enable_x64", False)
    try:
        program = PROGRAMS[name]()
        page = open_page(jax.jit(program.function), *program.args)
    finally:
        jax.config.update("jax_enable_x64", x64)
    page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
    return page


def check_overview(page, line_text: str):
    """The overview of a real model: every op drawn or inside a collapsed group, nothing
    overlapping, no edge through a node; a source line marks the groups holding its ops."""
    data_steps = page.evaluate("Object.keys(explorer.data.steps).length")
    assert data_steps > 200 and page.locator("#graphs .node.group").count() >= 2
    # each graph drawn holds at most 40 ops and groups (groups.MAX_ITEMS)
    sizes = page.eval_on_selector_all("#graphs .canvas", "canvases => canvases.map(c => c.querySelectorAll("
                                      "':scope > .node.op, :scope > .node.group').length)")
    assert sizes and max(sizes) <= 40
    assert page.evaluate(GEOMETRY) == []
    assert page.evaluate(TRUNCATED) == []
    # a line of the model that calls a layer: the calls made there are listed, their groups marked
    page.locator("#python .line", has_text=line_text).first.click()
    calls = page.evaluate("""() => { const key = document.querySelector('#python .line.selected').dataset.key;
        return Object.values(explorer.data.groups).filter(g => g.where && g.where.file + ':' + g.where.line === key)
                                                  .map(g => g.id); }""")
    assert calls and f"made {len(calls)} call(s)" in page.inner_text("#details")
    # marked: groups that hold (maybe in a loop's body) a call made there, or an op of the line
    marked = page.eval_on_selector_all("#graphs .node.group.hl", "nodes => nodes.map(n => n.dataset.node)")
    around = page.evaluate("""calls => {
        const {groups, steps, regions} = explorer.data;
        const key = document.querySelector('#python .line.selected').dataset.key;
        const around = new Set();
        for (let id of calls.concat(Object.keys(steps).filter(sid => steps[sid].file + ':' + steps[sid].line === key)))
          while (id !== null) {
            if (groups[id]) around.add(id);
            const item = steps[id] || groups[id], parent = steps[id] ? item.group : item.parent;
            id = parent !== null ? parent : regions[item.region].owner;
          }
        return [...around]; }""", calls)
    assert marked and set(marked) <= set(around)
    # the first call opens into its ops
    page.locator("#details li.link").first.click()
    assert page.locator(f'.node.group.open[data-node="{calls[0]}"] > .canvas > .node').count() >= 2
    # a group opens into its own graph, as readable
    page.locator("#section-main > .canvas > .node.group").first.click()
    assert page.locator("#section-main > .canvas > .node.group.open > .canvas > .node").count() >= 2
    assert page.evaluate(GEOMETRY) == []


def test_a_flax_linen_model_overview(open_page):
    page = zoo_page(open_page, "flax_linen_mlp")
    check_overview(page, "x = nn.Dense(width)(x)")


def test_search_finds_functions_groups_scopes_and_files(open_page):
    """A Flax Linen classifier's Optax AdamW step (tests/zoo/): the names the page shows
    (functions, groups, Flax's module scopes, files) are what its search finds."""
    import inspect

    import optax
    from test_tools_trace import flax_optax_step

    with jax.enable_x64(False):        # the zoo is written for 32 bits
        program = flax_optax_step()
        page = open_page(program.function, *program.args)
    page.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)

    def found(query):
        page.fill("#search", query)
        titles = page.evaluate("explorer.state.matches.map(id => (explorer.data.groups[id] || explorer.data.steps[id])"
                               "[explorer.data.groups[id] ? 'title' : 'name'])")
        return page.inner_text("#search-count"), titles

    loss = "softmax_cross_entropy_with_integer_labels"
    assert found("softmax") == ("2 matches (2 groups)", [loss, loss])
    # marked: the collapsed groups of the two passes, which hold them
    assert [t.split(" ›")[0] for t in texts(page, ".node.group.match > .opname")] == ["▸ forward (jvp)",
                                                                                   "▸ backward (transpose)"]
    page.press("#search", "Enter")            # the first opens, selected: what it is, where, which pass
    assert texts(page, ".node.group.selected > .opname") == [f"▾ {loss}"]
    details = page.inner_text("#details")
    assert "pass\nforward pass" in details and "function in\n" + inspect.getsourcefile(optax.losses._classification) in details
    page.press("#search", "Enter")
    assert "pass\nbackward pass" in page.inner_text("#details")
    assert found("adam") == ("1 match (1 group)", ["scale_by_adam.update_fn"])
    page.press("#search", "Enter")
    assert texts(page, ".node.group.selected > .opname") == ["▾ scale_by_adam.update_fn"]
    assert "function in\n" + inspect.getsourcefile(optax.scale_by_adam) in page.inner_text("#details")
    count, titles = found("transform.py")          # the functions of optax/_src/transform.py
    assert "scale_by_adam.update_fn" in titles and all("update_fn" in title for title in titles)
    assert found("Dense_0") == ("2 matches (2 groups)", ["Dense.__call__ › Dense_0"] * 2)     # a Flax module's scope
    # an op's name: 3 matmuls forward, 5 backward (no gradient for the inputs)
    assert found("dot_general") == ("8 matches", ["stablehlo.dot_general"] * 8)
    # FILE:LINE: the line that calls jax.nn.silu, a nested jit: its calls forward, then its derivative's
    from zoo import flax_linen

    source, first = inspect.getsourcelines(flax_linen.Classifier.__call__)
    silu_line = first + next(k for k, text in enumerate(source) if "nn.silu(x)" in text)
    assert found(f"zoo/flax_linen.py:{silu_line}") == ("4 matches", ["func.call @silu"] * 2 + ["func.call @silu_4"] * 2)
    # the line that takes the gradient made two calls of the loss: which is which
    page.fill("#search", "")
    page.locator("#python .line", has_text="jax.value_and_grad(loss_fn").click()
    calls = texts(page, "#details li.link")
    assert [re.sub(r" \(\d+ ops\)$", "", call) for call in calls] == ["forward (jvp) › … › loss_fn",
                                                                     "backward (transpose) › … › loss_fn"]
    page.locator("#python .line", has_text="x = nn.Dense(width)(x)").click()
    calls = [re.sub(r" \(\d+ ops\)$", "", call) for call in texts(page, "#details li.link")]
    assert calls == ["Dense.__call__ › Dense_0, forward pass", "Dense.__call__ › Dense_1, forward pass",
                     "Dense.__call__ › Dense_1, backward pass", "Dense.__call__ › Dense_0, backward pass"]
    # the 34 arguments: what they are, by their pytree's roots
    assert texts(page, "#section-main > .canvas > .node.input > .value") == [
        "params, opt_state, dropout_key, inputs, labels"]
    assert page.evaluate(GEOMETRY) == [] and page.evaluate(TRUNCATED) == []


@pytest.mark.slow
def test_a_flax_nnx_transformer_lm_overview(open_page):
    page = zoo_page(open_page, "flax_nnx_transformer_lm")
    # the top: the forward pass (jvp), the backward pass (transpose), the optimizer
    titles = texts(page, "#section-main > .canvas > .node.group > .opname")
    assert any(title.startswith("▸ forward (jvp)") for title in titles)
    assert any(title.startswith("▸ backward (transpose)") for title in titles)
    check_overview(page, "h = block(h, mask)")


@pytest.mark.slow
def test_an_equinox_neural_ode_overview(open_page):
    page = zoo_page(open_page, "equinox_diffrax_neural_ode")
    check_overview(page, "self.mlp(y)")


def test_a_per_device_run_shows_each_devices_values_and_bytes(open_page):
    """``per_device=True`` on a matmul whose contracting dimension is sharded over 8 devices
    (XLA CPU's devices): the page draws the per-device program; choosing a device shows
    its own partial product (NumPy's product of its shards), the all-reduce's node gives
    that device's bytes, and the collectives panel each device's (a f32[4, 8] partial:
    128 bytes each way, 1024 in all)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from stablehlo_interp.judge.summary import summarize

    mesh = Mesh(np.array(jax.devices("cpu")[:8]), ("x",))
    a_value = (np.arange(64, dtype=np.float32).reshape(4, 16) - 30) / 8
    b_value = (np.arange(128, dtype=np.float32).reshape(16, 8) % 7 - 3) / 4
    a = jax.device_put(a_value, NamedSharding(mesh, P(None, "x")))
    b = jax.device_put(b_value, NamedSharding(mesh, P("x", None)))
    page = open_page(jax.jit(lambda a, b: a @ b), a, b, per_device=True)
    assert texts(page, "#device option") == [f"device {d}" for d in range(8)]
    assert "tensor<4x2xf32>" in page.inner_text("#stablehlo")     # the per-device program's local types
    for device in (0, 5):
        page.select_option("#device", str(device))
        page.locator(".node.op", has=page.locator(".opname", has_text="stablehlo.dot_general")).click()
        columns = slice(2 * device, 2 * device + 2)
        partial = str(summarize(a_value[:, columns] @ b_value[columns]))
        assert page.locator(".node.selected .value").inner_text() == partial
        assert "ran\n1 time on device " + str(device) in page.inner_text("#details")
        page.locator(".node.op > .opname", has_text="stablehlo.all_reduce").click()
        assert f"device {device} sent 128, received 128" in page.inner_text("#details")
        assert page.locator(".node.selected > .value").inner_text() == str(summarize(a_value @ b_value))
    assert "all devices\nsent 1024, received 1024 in 8 runs" in page.inner_text("#details")
    assert page.inner_text("#banners .collectives") == "collectives: 1 · 1024 bytes sent"
    page.click("#banners .collectives")
    summary = page.eval_on_selector_all("#details table.summary tr", "rows => rows.map(r => r.innerText)")
    assert summary == ["collective\truns\tsent\treceived", "stablehlo.all_reduce\t8\t1024\t1024",
                       "in all\t8\t1024\t1024"]
    rows = page.eval_on_selector_all("#details table.traffic:not(.summary) tr", "rows => rows.map(r => r.innerText)")
    assert rows[1:] == [f"{d}\t128\t128" for d in range(8)] + ["in all\t1024\t1024"]
    page.locator("#details table.traffic tr[data-device='3']").click()
    assert page.input_value("#device") == "3"


def test_a_per_device_nonfinite_banner_switches_to_the_device_that_made_it(open_page):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices("cpu")[:4]), ("x",))
    x = jax.device_put(np.array([4.0, 1.0, -1.0, 9.0], np.float32), NamedSharding(mesh, P("x")))
    page = open_page(jax.jit(lambda v: jnp.sqrt(v).sum()), x, per_device=True)
    assert page.input_value("#device") == "0"
    page.click("#banners .nonfinite")
    assert page.input_value("#device") == "2"
    assert op_names(page, ".node.selected") == {"stablehlo.sqrt"}
    assert page.locator(".node.selected .value").inner_text() == "f32[1] [nan]"
    assert "operand #0: f32[1]\nf32[1] [-1]" in page.inner_text("#details")


def test_a_per_device_comparison_banner_names_the_device_that_differs(open_page):
    """With a backend whose global x * 2 is off at row 0, column 5 (columns over 8
    devices: device 2 holds columns 4-5), the banner names device 2 and shows it."""
    function, x, off_by_one = doubled_and_off_on_device_2()
    page = open_page(function, x, per_device=True, backend=off_by_one)
    assert page.inner_text("#banners .divergence") == "differs on device 2"
    # the op that made the result is marked with the device where it differs, in every device's graph
    marked = page.locator(".node.op.divergent")
    assert marked.count() == 1 and marked.locator(".marker").inner_text() == "⚠ differs on device 2"
    page.click("#banners .divergence")
    assert page.input_value("#device") == "2"
    assert page.locator(".node.selected").get_attribute("data-step") == marked.get_attribute("data-step")
    assert "differs on device 2\nresult #0: 1 of 16 elements differ; largest at [0, 1]: 10 (interpreter) vs 11" \
        in page.inner_text("#details")
    assert "device 2: differs" in page.inner_text("#details .report")
    assert "device 1: agrees" in page.inner_text("#details .report")
    assert hlo_lines(page, ".line.divergent")        # and its StableHLO line


def log_exp_and_product(x, w):
    y = jnp.log(jnp.exp(x))
    return y + x @ w


def test_xla_stages_a_line_lights_up_the_fusion_computing_it_and_algsimp_is_marked(open_page):
    x, w = np.array([[1.0, 50.0, 100.0]], np.float32), np.ones((3, 3), np.float32)
    page = open_page(log_exp_and_product, x, w, xla_stages=True)
    assert page.inner_text("#xla-panel h2") == "XLA CPU: the optimized program ◀▶"   # (◀▶: the stages)
    page.locator("#python .line", has_text="return y + x @ w").click()
    lit = [text.strip() for text in texts(page, "#xla .line.hl .text")]
    # the fusion at the program's root computes the line, and so do the instructions it fused (the add among them)
    assert any(text.startswith("ROOT %") and " fusion(" in text for text in lit)
    assert any(" add(" in text for text in lit) and not any(" parameter(" in text for text in lit)
    assert hlo_lines(page, ".line.hl")                    # the StableHLO panel lights up as before
    computing = texts(page, "#details ul.xla-instructions li")
    assert len(computing) == len(lit) and any("_fusion" in name for name in computing)
    # log(exp(x)): its StableHLO ops light up, and nothing of XLA's program (algsimp made it x)
    page.locator("#python .line", has_text="jnp.log(jnp.exp(x))").click()
    assert hlo_lines(page, ".line.hl") and texts(page, "#xla .line.hl") == []
    assert "nothing in XLA's optimized program computes it" in page.inner_text("#details")
    # an XLA line selects the Python line it computes
    page.locator("#xla .line", has_text="ROOT %").filter(has_text=" fusion(").click()
    assert [t.strip() for t in texts(page, "#python .line.selected .text")] == ["return y + x @ w"]
    # the banner opens the passes that changed the program; algsimp is marked as the one that changed the values
    banner = page.locator("#banners .xla")
    assert banner.inner_text() == f"XLA: {page.evaluate('explorer.data.xla.passes.length')} passes · values changed by algsimp"
    banner.click()
    marked = texts(page, "#details li.changes-values")
    assert len(marked) == 1 and marked[0].startswith("pass algsimp (pipeline simplification): −")
    assert "(values other than the original's)" in marked[0]
    page.click("#details li.changes-values")
    removed = texts(page, "#details .xla-change.removed")
    assert any(" exponential(%x.1)" in text and f"test_explorer_browser.py:{log_exp_and_product.__code__.co_firstlineno + 1}"
               in text for text in removed)


def test_xla_graph_fusions_open_to_their_instructions_linked_to_lines_text_and_values(open_page):
    """XLA's optimized program as a graph: each fusion of the entry computation a closed node
    (as JAX's own compile makes them); the return line lights up the fusion computing it;
    opened, the fusion shows its fused computation's instructions; selected, its XLA line and
    Python line. Its value is XLA's program's as the interpreter runs it (JAX's result: algsimp
    made log(exp(x)) into x), and beside it that of the StableHLO op it computes,
    stablehlo.add, in the original program (by hand: log(exp(x)) is [1, 50, inf] in f32,
    x @ ones is 151 each: [152, 201, inf])."""
    from test_tools_explorer import hlo_computations

    x, w = np.array([[1.0, 50.0, 100.0]], np.float32), np.ones((3, 3), np.float32)
    page = open_page(log_exp_and_product, x, w, xla_stages=True)
    compiled = hlo_computations(jax.jit(log_exp_and_product).lower(x, w).compile().as_text())
    entry = next(name for name in compiled if name.startswith("main"))
    fusions = {f"%{name}": re.search(r"calls=%([\w.\-]+)", text)[1] for name, text in compiled[entry] if " fusion(" in text}
    assert sorted(texts(page, "#xla-graph .node.fusion > .opname")) == sorted(f"▸ {name}" for name in fusions)
    page.locator("#python .line", has_text="return y + x @ w").click()
    root = next(name for name, text in compiled[entry] if text.startswith("ROOT"))
    assert texts(page, "#xla-graph .node.fusion.hl > .opname") == [f"▸ %{root}"]
    fusion = page.locator("#xla-graph .node.fusion", has_text=f"%{root}")
    expected = np.asarray(jax.jit(log_exp_and_product)(x, w))
    assert expected.tolist() == [[152, 201, 251]]
    assert fusion.locator("> .value").inner_text() == "f32[1,3] [[152 201 251]]"
    fusion.click()
    opened = page.locator("#xla-graph .node.fusion.open")
    inside = [where.split(" · ")[0] for where in opened.locator(".node.op > .where").all_inner_texts()]
    assert inside == [f"%{name}" for name, text in compiled[fusions[f"%{root}"]] if " parameter(" not in text]
    assert page.inner_text("#xla .line.selected .text").strip().startswith(f"ROOT %{root} = ")
    assert [t.strip() for t in texts(page, "#python .line.hl .text")] == ["return y + x @ w"]
    details = page.inner_text("#details")
    assert "XLA's program, run on the interpreter:\n\nf32[1,3]\nf32[1,3] [[152 201 251]]" in details
    assert ("the StableHLO op it computes, stablehlo.add (StableHLO line 6), in the original program:\n\n"
            "f32[1,3]\nf32[1,3] [[152 201 inf]]") in details
    assert "⚠ pass algsimp (pipeline simplification) changed" in details
    # the dot (no metadata in XLA's program), found by its name: no value, and why
    page.fill("#search", "%dot.")
    assert page.inner_text("#search-count") == "1 match"
    page.press("#search", "Enter")
    assert "f32[1,3] [[151 151 151]]" in page.inner_text("#details")      # x @ ones, by hand
    assert "no StableHLO op's value: its metadata names no JAX op and no source line" in page.inner_text("#details")
    assert " dot(" in page.inner_text("#xla .line.selected")


def test_xla_stages_step_through_the_passes_with_the_lines_each_added_marked(open_page):
    """The passes list's algsimp shows the program after it, log(exp(x)) gone and the add
    of x marked as added; one stage back, the program before any pass, with the
    exponential and the log; forward to the end, the optimized program, linked again."""
    x, w = np.array([[1.0, 50.0, 100.0]], np.float32), np.ones((3, 3), np.float32)
    page = open_page(log_exp_and_product, x, w, xla_stages=True)
    count = page.evaluate("explorer.data.xla.passes.length")
    page.click("#banners .xla")
    page.click("#details li.changes-values")
    assert page.inner_text("#xla-panel h2 .stage-text") == f"after pass algsimp (pipeline simplification) (stage 1 of {count})"
    after = texts(page, "#xla-stage .line .text")
    added = texts(page, "#xla-stage .line.added .text")
    assert any(" add(%x" in line for line in added) and set(added) <= set(after)
    assert not any(" exponential(" in line or " log(" in line for line in after)
    page.click("#xla-panel h2 .prev")
    assert page.inner_text("#xla-panel h2 .stage-text") == f"the program before any pass (stage 0 of {count})"
    before = texts(page, "#xla-stage .line .text")
    assert any(" exponential(" in line for line in before) and any(" log(" in line for line in before)
    for _ in range(count):
        page.click("#xla-panel h2 .next")
    assert page.inner_text("#xla-panel h2 .stage-text") == "the optimized program"
    assert page.is_visible("#xla") and not page.is_visible("#xla-stage")


def test_xla_stages_of_a_sharded_program_list_its_collectives_and_their_bytes(open_page):
    """XLA's per-device program of test_tools_explorer's ``every_collective`` on 4 devices:
    the banner counts its 6 collective instructions and the bytes all devices send (by hand:
    the all-reduce 4 x 32 and the loop's 3 times 4 x 32, the all-gather, reduce-scatter and
    all-to-all 4 x 32 each, the permute 3 x 32: 992; received: 128 + 384 + 4 x 128 + 4 x 8
    + 128 + 96 = 1280); the summary's row of the permute scrolls to its line, and the table by
    device says device 3 sends nothing there and device 0 receives nothing."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from test_tools_explorer import every_collective

    mesh = Mesh(np.array(jax.devices("cpu")[:4]), ("x",))
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), NamedSharding(mesh, P("x")))
    step = jax.jit(jax.shard_map(every_collective, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    page = open_page(step, x, xla_stages=True)
    assert page.inner_text("#banners .xla-collectives") == "XLA collectives: 6 · 992 bytes sent"
    assert len(texts(page, "#xla .line.collective")) == 6
    page.click("#banners .xla-collectives")
    rows = page.eval_on_selector_all("#details table.summary tr", "rows => rows.map(r => r.innerText)")
    assert rows[0] == "collective\tsent\treceived" and rows[-1] == "in all\t992\t1280"
    assert "collective-permute\t96\t96" in rows
    page.locator("#details table.summary tr", has_text="collective-permute").click()
    assert " collective-permute(" in page.inner_text("#xla .line.selected")
    by_device = page.eval_on_selector_all("#details table.by-device tr", "rows => rows.map(r => r.innerText)")
    permute = by_device[0].split("\t").index(next(n for n in by_device[0].split("\t") if "ppermute" in n))
    assert [row.split("\t")[permute] for row in by_device[1:]] == ["32/0", "32/32", "32/32", "0/32"]
