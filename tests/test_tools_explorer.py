"""si.explore: the data of the explorer page (the browser tests are in test_explorer_browser.py)."""

import json
import pathlib
import re
from importlib import resources

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si
from stablehlo_interp.tools import JaxBackend
from stablehlo_interp.tools.explorer import page_data
from browser import iframe_pages
from oracles import run_xla
from test_tools_cli import explorer_data
from divergent_on_a_device import doubled_and_off_on_device_2

X = (np.arange(12, dtype=np.float32).reshape(3, 4) - 6) / 10
Y = (np.arange(20, dtype=np.float32).reshape(4, 5) - 10) / 10


def first_example(x, y):   # the README's first example, as a plain function
    return {"h": jnp.tanh(x @ y).sum(0)}


LINE = first_example.__code__.co_firstlineno + 1


def page_values(page: str):
    """The whole arrays a page carries (a list), or where it finds them ({"file": ...})."""
    start = page.index('<script type="application/json" id="explorer-values">') + len(
        '<script type="application/json" id="explorer-values">')
    return json.loads(page[start:page.index("</script>", start)])


def steps_of(data, region_id):
    return [data["steps"][sid] for sid in data["regions"][region_id]["steps"]]


def records_of(data, sid):
    return [record for record in data["records"]["ops"] if record["s"] == sid]


def test_first_example_ops_lines_edges_and_values(tmp_path):
    exploration = si.explore(first_example, X, Y, path=tmp_path / "f.html")
    data = explorer_data(exploration.html)
    # the page written holds the same data; the whole arrays are beside it, in f.values.js
    written = (tmp_path / "f.html").read_text()
    assert explorer_data(written) == data and page_values(written) == {"file": "f.values.js"}
    side = (tmp_path / "f.values.js").read_text()
    assert side.startswith("explorerValues(") and json.loads(side[len("explorerValues("):-3]) == page_values(exploration.html)
    main = data["sections"][0]
    assert data["regions"][main]["title"] == "@main"
    ops = steps_of(data, main)
    assert [step["op"] for step in ops] == ["stablehlo.dot_general", "stablehlo.tanh", "stablehlo.constant",
                                            "stablehlo.reduce"]
    # every op came from the one line; each op's StableHLO line is the line that defines it
    assert {step["line"] for step in ops} == {LINE}
    assert data["files"][0]["name"] == "test_tools_explorer.py"
    assert [LINE, "    return {\"h\": jnp.tanh(x @ y).sum(0)}"] in data["files"][0]["lines"]
    for step in ops:
        assert re.search(f" = {step['op']}[ (]", data["stablehlo"][step["hlo"] - 1])
    # the jaxpr's equations point at the same line
    equations = [line for line in data["jaxpr"] if "line" in line and not line.get("continues")]
    assert [re.search(r"= (\w+)", line["text"])[1] for line in equations] == ["dot_general", "tanh", "reduce_sum"]
    assert {line["line"] for line in equations} == {LINE}
    # an equation's other lines go with it; the jaxpr's own frame goes with none
    assert [(line["text"].strip(), line.get("line")) for line in data["jaxpr"]] == [
        ("{ lambda ; a:f32[3,4] b:f32[4,5]. let", None), ("c:f32[3,5] = dot_general[", LINE),
        ("dimension_numbers=(([1], [0]), ([], []))", LINE), ("preferred_element_type=float32", LINE),
        ("] a b", LINE), ("d:f32[3,5] = tanh c", LINE), ("e:f32[5] = reduce_sum[axes=(0,) out_sharding=None] d", LINE),
        ("in (e,) }", None)]
    # edges: producer, consumer, type
    dot, tanh, constant, reduce = (step["id"] for step in ops)
    assert data["regions"][main]["edges"] == [
        [f"{main}i0", dot, "f32[3,4]"], [f"{main}i1", dot, "f32[4,5]"], [dot, tanh, "f32[3,5]"],
        [tanh, reduce, "f32[3,5]"], [constant, reduce, "f32[]"], [reduce, f"{main}o", "f32[5]"]]
    # each operand names its producer and which of its results
    assert data["steps"][dot]["operands"] == [[f"{main}i0", 0], [f"{main}i1", 0]]
    assert data["steps"][reduce]["operands"] == [[tanh, 0], [constant, 0]]
    # the reduction's body is drawn inside its op
    (body,) = data["steps"][reduce]["regions"]
    assert data["regions"][body]["owner"] == reduce and data["regions"][body]["title"] == "body"
    # values: what XLA computes, the whole array kept for small values
    expected_tanh = run_xla(lambda x, y: jnp.tanh(x @ y), X, Y)[0]
    (tanh_record,) = records_of(data, tanh)
    ours = exploration.trace.records[tanh_record["n"]].values[0]
    np.testing.assert_allclose(ours, expected_tanh, rtol=2e-6)
    assert page_values(exploration.html)[tanh_record["res"][0]["full"]] == np.array2string(
        ours, max_line_width=100, separator=" ")
    assert tanh_record["res"][0]["t"] == "f32[3,5]"
    (reduce_record,) = records_of(data, reduce)
    assert reduce_record["res"][0]["s"] == str(si.tools.summarize(exploration.trace.records[-1].values[0]))
    np.testing.assert_allclose(exploration.trace.records[-1].values[0], run_xla(first_example, X, Y)[0], rtol=2e-6)
    assert data["records"]["arguments"][0]["s"] == "f32[3,4] min=-0.6 max=0.5 mean=-0.05"
    assert data["overlays"] == {} and exploration.nonfinite is None


def test_loop_iterations_are_recorded_per_call():
    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, a: a * 2.0, jnp.sin(x))

    data = explorer_data(si.explore(f, np.float32(0.5)).html)
    (loop,) = [s for s in data["steps"].values() if s["op"] == "stablehlo.while"]
    cond, body = (data["regions"][rid] for rid in loop["regions"])
    assert (cond["title"], body["title"]) == ("cond", "body")
    (multiply,) = [s for s in data["steps"].values() if s["op"] == "stablehlo.multiply"]
    records = records_of(data, multiply["id"])
    # sin(0.5) = 0.47943 doubled in iterations 0, 1, 2
    assert [r["res"][0]["s"] for r in records] == ["f32[] 0.95885", "f32[] 1.9177", "f32[] 3.8354"]
    # each ran under the call of its iteration: the record it ran under is one of the body's
    calls = [data["records"]["ops"][r["p"]] for r in records]
    assert [call["c"] for call in calls] == [0, 1, 2]
    assert all(data["steps"][call["s"]]["region"] == body["id"] for call in calls)
    # the body calls a function, which has a section of its own
    assert data["regions"][multiply["region"]]["title"] == "@closed_call" and multiply["region"] in data["sections"]


def test_nonfinite_and_divergence_overlays():
    def running_log_sum(xs):
        def step(total, x):
            total = total + jnp.log(x)
            return total, total
        return jax.lax.scan(step, 0.0, xs)

    exploration = si.explore(running_log_sum, np.array([1.0, 2.0, -3.0, 4.0], np.float32))
    data = explorer_data(exploration.html)
    overlay = data["overlays"]["nonfinite"]
    assert overlay["text"] == str(exploration.nonfinite) and overlay["label"] == "stablehlo.log"
    record = data["records"]["ops"][overlay["record"]]
    assert data["steps"][record["s"]]["op"] == "stablehlo.log" and record["res"][0]["s"] == "f32[] nan"
    # in iteration 2 of the scan's loop (log(-3))
    call = data["records"]["ops"][record["p"]]
    assert data["steps"][call["s"]]["name"] == "func.call @closed_call" and call["c"] == 2
    # a NaN that came in as an argument has no op to open: the banner names it
    exploration = si.explore(running_log_sum, np.array([1.0, np.nan], np.float32))
    overlay = explorer_data(exploration.html)["overlays"]["nonfinite"]
    assert overlay == {"record": None, "text": str(exploration.nonfinite), "label": "argument #0"}
    # a log's NaN that a where masks: every result finite, no banner
    masked = si.explore(lambda v: jnp.where(v > 0, jnp.log(v), 0.0), np.array([1.0, -1.0], np.float32))
    assert masked.nonfinite is None and "nonfinite" not in explorer_data(masked.html)["overlays"]

    def xla_with_a_bug(module_text, args):
        return JaxBackend("cpu")(module_text.replace("stablehlo.tanh", "stablehlo.sine"), args)

    exploration = si.explore(first_example, X, Y, backend=xla_with_a_bug)
    data = explorer_data(exploration.html)
    overlay = data["overlays"]["divergence"]
    assert not overlay["ok"] and overlay["text"] == str(exploration.comparison)
    assert data["steps"][data["records"]["ops"][overlay["record"]]["s"]]["op"] == "stablehlo.tanh"
    agreeing = explorer_data(si.explore(first_example, X, Y, backend="cpu").html)
    assert agreeing["overlays"]["divergence"] == {"record": None, "ok": True,
                                                  "text": "the interpreter and cpu agree on the result"}


def test_the_page_is_self_contained_and_ships_its_layout_library():
    page = si.explore(first_example, X, Y).html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@dagrejs/dagre 3.1.3" in page
    static = resources.files("stablehlo_interp.tools.explorer") / "static"
    assert "Permission is hereby granted" in (static / "dagre.LICENSE.txt").read_text()
    assert "3.1.3" in (static / "VENDORED.md").read_text()
    # a source line holding "</script>" does not end the page's data early
    def tagged(x):
        return x + 1  # </script>

    data = explorer_data(si.explore(tagged, np.float32(1)).html)
    assert any(line and line[1].endswith("# </script>") for line in data["files"][0]["lines"])


def test_jupyter_displays_explorations_and_traces():
    exploration = si.explore(first_example, X, Y)
    shown = exploration._repr_html_()
    assert shown.startswith("<iframe srcdoc='<!DOCTYPE html>") and iframe_pages(shown) == [exploration.html]

    def quoted(x):
        return x + 1  # it's <b>&amp;</b> "quoted"

    quoting = si.explore(quoted, np.float32(1))
    assert iframe_pages(quoting._repr_html_()) == [quoting.html] and "it's <b>&amp;" in quoting.html
    trace = si.trace(first_example, X, Y)
    table = trace._repr_html_()
    assert table.count("<tr><td") == len(trace) == 4   # dot_general, tanh, constant, reduce
    assert "stablehlo.tanh</td><td><code>f32[3,5] min=" in table
    assert f"test_tools_explorer.py:{LINE} (first_example)" in table


def test_a_long_run_keeps_its_first_ops(monkeypatch):
    monkeypatch.setattr(page_data, "MAX_RECORDS", 4)

    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, a: a * 2.0, jnp.sin(x))

    exploration = si.explore(f, np.float32(0.5))
    data = explorer_data(exploration.html)
    assert data["records"]["total"] == len(exploration.trace) > 4
    assert [record["n"] for record in data["records"]["ops"]] == [0, 1, 2, 3]
    # the loop started among the first four but ended after them: its summary stays, without the whole array
    (loop,) = [r for r in data["records"]["ops"] if data["steps"][r["s"]]["op"] == "stablehlo.while"]
    assert [value["full"] for value in loop["res"]] == [None] * len(loop["res"])
    assert loop["res"][-1]["s"] == "f32[] 3.8354"    # sin(0.5) * 8
    assert data["records"]["ops"][0]["res"][0]["full"] is not None


def layer(x, w):
    return jnp.tanh(x @ w)


def two_layers_loss(w1, w2, x):
    return layer(layer(x, w1), w2).sum()


def test_ops_are_grouped_by_transformation_and_call():
    w = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    data = explorer_data(si.explore(jax.grad(two_layers_loss), w, w.T, X[:2]).html)
    groups, main = data["groups"], data["regions"][data["sections"][0]]

    def ops_under(item):
        return [item] if item in data["steps"] else [sid for inner in groups[item]["items"] for sid in ops_under(inner)]

    # every op of the function once, in a tree whose groups count their ops
    assert sorted(sid for item in main["items"] for sid in ops_under(item)) == sorted(main["steps"])
    assert all(group["ops"] == len(ops_under(gid)) for gid, group in groups.items())
    for gid, group in groups.items():
        for item in group["items"]:
            assert (groups[item]["parent"] if item in groups else data["steps"][item]["group"]) == gid
    # the top: the forward pass (jvp) and the backward pass (transpose), each with its two calls of layer
    forward, backward = (groups[item] for item in main["items"])
    assert (forward["title"], backward["title"]) == ("forward (jvp) › two_layers_loss",
                                                   "backward (transpose) › two_layers_loss")
    line = layer.__code__.co_firstlineno + 1
    for pass_, words in ((forward, "forward pass"), (backward, "backward pass")):
        calls = [groups[item] for item in pass_["items"] if item in groups]
        assert [call["title"] for call in calls] == ["layer #1", "layer #2"]
        # each call says which pass it is part of (its pass's own group says it in its title)
        assert pass_["pass"] is None and {call["pass"] for call in calls} == {words}
        assert all(call["where"]["line"] == two_layers_loss.__code__.co_firstlineno + 1 for call in calls)
        for call in calls:
            # one matmul a call: forward x @ w; backward, the outer call's gradient for its x,
            # then the inner call's for w1 (grad differentiates the first argument only)
            ops = [data["steps"][sid] for sid in ops_under(call["id"])]
            assert [op["op"] for op in ops].count("stablehlo.dot_general") == 1
            assert {op["line"] for op in ops if op["op"] != "stablehlo.constant"} == {line}


def test_a_flax_optax_step_is_named_as_written():
    """The zoo's Flax Linen classifier and an Optax AdamW step: its groups keep the qualified
    names of the functions (Optax's Adam is ``scale_by_adam.update_fn``), say which pass of
    the gradient they are part of, and name the files of their functions; its arguments
    and results are named by their pytree paths, as JAX's own tree paths spell them."""
    import inspect

    import optax
    from test_tools_trace import flax_optax_step

    with jax.enable_x64(False):        # the zoo is written for 32 bits
        program = flax_optax_step()
        data = explorer_data(si.explore(program.function, *program.args).html)
        outputs = jax.eval_shape(program.function, *program.args)
    groups, files = data["groups"], data["files"]
    titles = {group["title"] for group in groups.values()}
    assert not any("<locals>" in title for title in titles)
    (adam,) = [group for group in groups.values() if group["title"] == "scale_by_adam.update_fn"]
    assert files[adam["file"]]["path"] == inspect.getsourcefile(optax.scale_by_adam)
    # the loss's two calls, one a pass; inside each, the calls of the loss function of Optax
    main = data["regions"][data["sections"][0]]
    forward, backward, *_ = (groups[item] for item in main["items"] if item in groups)
    assert re.fullmatch(r"forward \(jvp\) › … › loss_fn", forward["title"])
    assert re.fullmatch(r"backward \(transpose\) › … › loss_fn", backward["title"])

    def pass_of(gid):      # the pass of the top group around a group
        while groups[gid]["parent"] is not None:
            gid = groups[gid]["parent"]
        return groups[gid]["title"].split(" ›")[0]

    losses = [gid for gid, group in groups.items() if group["title"] == "softmax_cross_entropy_with_integer_labels"]
    assert [(groups[gid]["pass"], pass_of(gid)) for gid in losses] == [("forward pass", "forward (jvp)"),
                                                                      ("backward pass", "backward (transpose)")]
    assert {files[groups[gid]["file"]]["path"] for gid in losses} == {
        inspect.getsourcefile(optax.softmax_cross_entropy_with_integer_labels)}
    # the arguments: step(params, opt_state, dropout_key, inputs, labels), each leaf by its path
    parameters = inspect.signature(program.function).parameters
    paths = [name + jax.tree_util.keystr(path) for name, argument in zip(parameters, program.args)
             for path, _ in jax.tree_util.tree_flatten_with_path(argument)[0]]
    assert [node["name"] for node in main["inputs"]] == paths and len(paths) == 34
    assert main["inputs"][33] == {"name": "labels", "type": "i32[4]", "id": f"{main['id']}i33"}
    assert main["input_summary"] == "params, opt_state, dropout_key, inputs, labels"
    results = ["result" + jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(outputs)[0]]
    assert main["ret"]["names"] == results
    assert main["ret"]["summary"] == "result['grads'], result['loss'], result['opt_state'], result['params']"
    # a called function's arguments have no names: numbered
    silu = data["regions"][next(rid for rid in data["sections"] if data["regions"][rid]["title"] == "@silu")]
    assert [node["name"] for node in silu["inputs"]] == ["%arg0"] and silu["input_summary"] is None
    assert "names" not in silu["ret"]


def log_exp_and_product(x, w):
    y = jnp.log(jnp.exp(x))
    return y + x @ w


LOG_LINE = log_exp_and_product.__code__.co_firstlineno + 1
XW = (np.array([[1.0, 50.0, 100.0]], np.float32), np.ones((3, 3), np.float32))
_METADATA = re.compile(r",\s*metadata=\{[^{}]*\}")


def fusions(lines) -> list[str]:
    """The fusion instructions of HLO text lines, their metadata and backend config (JSON, its
    keys in either order) aside."""
    return [re.sub(r", backend_config=.*$", "", _METADATA.sub("", line)).strip()
            for line in lines if re.search(r" = \S+ fusion\(", line)]


def test_xla_stages_show_the_optimized_program_linked_to_the_lines_and_the_pass_that_changed_the_values():
    assert "xla" not in si.explore(log_exp_and_product, *XW).data     # opt-in: the default page has none
    exploration = si.explore(log_exp_and_product, *XW, xla_stages=True)
    xla, files = exploration.data["xla"], exploration.data["files"]
    # the optimized program is XLA CPU's: the fusions JAX's own compile of the function makes
    compiled = jax.jit(log_exp_and_product).lower(*XW).compile().as_text()
    shown = [line["text"] for line in xla["lines"]]
    assert fusions(shown) == fusions(compiled.splitlines()) and len(fusions(shown)) >= 1
    assert "StackFrames" not in shown and not any("metadata=" in text for text in shown)
    # each line names the Python lines it computes; the fusion computing `y + x @ w` (the add at the root) names
    # the return line; log(exp(x)) is gone (algsimp made it x), so no line names its line
    here = next(index for index, file in enumerate(files) if file["path"] == __file__)
    linked = {line["text"].strip(): line["keys"] for line in xla["lines"] if line["keys"]}
    root = next(text for text in linked if text.startswith("ROOT") and " fusion(" in text)
    assert linked[root][0] == [here, LOG_LINE + 1]
    assert not any([here, LOG_LINE] in keys for keys in linked.values())
    # the passes that changed the program: the first that changed the values is si.passes' (algsimp)
    report = exploration.passes
    assert report.first_change.stage.after == "algsimp"
    marked = [entry for entry in xla["passes"] if entry["values"]]
    assert [entry["name"] for entry in marked] == ["pass algsimp (pipeline simplification)"]
    assert marked[0]["verdict"] == "changes the values" and xla["stages"] == len(report.stages)
    removed = {change[1].split(" = ")[1].split("(")[0].split()[-1]: change[2]
               for change in marked[0]["changes"] if change[0] == "-"}
    assert removed["exponential"].startswith(f"test_tools_explorer.py:{LOG_LINE} ")
    assert removed["log"].startswith(f"test_tools_explorer.py:{LOG_LINE} ")
    assert marked[0]["removed"] == sum(change[0] == "-" for change in marked[0]["changes"])
    # XLA's own compiled program gives what the changed stage computes: x where exp(x) overflows
    np.testing.assert_array_equal(report.first_change.results[0], np.asarray(jax.jit(log_exp_and_product)(*XW)))


def test_xla_stages_of_a_program_passes_cannot_compile_say_why():
    def with_callback(x):
        jax.debug.print("x is {}", x)
        return x * 2

    exploration = si.explore(with_callback, np.float32(3), xla_stages=True)
    assert exploration.data["xla"] == {"error": exploration.data["xla"]["error"]} and exploration.passes is None
    assert "host callbacks" in exploration.data["xla"]["error"]
    assert exploration.trace.records[-1].values[0] == 6     # the page itself is whole


def hlo_computations(text: str) -> dict[str, list[tuple[str, str]]]:
    """XLA's text as ``{computation: [(instruction name, its line without metadata)]}``."""
    found, current = {}, None
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY )?%([\w.\-]+) .*\{$", line)
        if header:
            current = found.setdefault(header[1], [])
        elif line.strip() == "}":
            current = None
        elif current is not None and " = " in line:
            current.append((re.match(r"^\s*(?:ROOT )?%([\w.\-]+) = ", line)[1], _METADATA.sub("", line).strip()))
    return found


def sine_of_product(x, w):
    return jnp.sin(x @ w) + 1.0


def test_xla_graph_draws_the_entry_computation_with_each_fusion_a_group_of_its_fused_instructions():
    """The graph of XLA's optimized program against JAX's own compile of the function: the
    entry computation's instructions (parameters as inputs), each fusion a group whose
    steps are its fused computation's instructions, in order; edges follow the operands
    (a fused parameter stands for the fusion's operand)."""
    exploration = si.explore(log_exp_and_product, *XW, xla_stages=True)
    xla = exploration.data["xla"]
    graph = xla["graph"]
    compiled = hlo_computations(jax.jit(log_exp_and_product).lower(*XW).compile().as_text())
    entry = next(name for name in compiled if name.startswith("main"))
    (section,) = graph["sections"]
    region = graph["regions"][section]
    parameters = [name for name, text in compiled[entry] if " parameter(" in text]
    assert [node["name"] for node in region["inputs"]] == [f"%{name}" for name in parameters]
    groups = graph["groups"]
    top = []
    for item in region["items"]:
        top.append(groups[item]["title"] if item in groups else f"%{graph['steps'][item]['name']}")
    assert top == [f"%{name}" for name, text in compiled[entry] if " parameter(" not in text]
    for group in groups.values():
        fusion = next(text for name, text in compiled[entry] if f"%{name}" == group["title"])
        called = re.search(r"calls=%([\w.\-]+)", fusion)[1]
        assert [graph["steps"][sid]["name"] for sid in group["items"]] == [
            name for name, text in compiled[called] if " parameter(" not in text]
        assert xla["lines"][group["xla"]]["text"].strip() == re.sub(r", backend_config=.*$", "", fusion)
    # the sum's fusion: its add takes the entry's x (its fused parameter 0) and the dot's value (through bitcasts)
    add = next(step for step in graph["steps"].values() if step["op"] == "add")
    dot = next(sid for sid, step in graph["steps"].items() if step["op"] == "dot")
    assert add["o"][0] == region["inputs"][0]["id"]
    bitcasts = [sid for sid in groups[add["group"]]["items"] if graph["steps"][sid]["op"] == "bitcast"]
    assert graph["steps"][bitcasts[0]]["o"] == [dot] and add["o"][1] == bitcasts[-1]
    assert region["ret"]["sources"] == [[next(sid for sid, s in graph["steps"].items() if s is add), 0]]


def test_xla_graph_shows_the_interpreters_value_of_the_one_stablehlo_op_an_instruction_computes():
    """``sin(x @ w) + 1``: the root fusion's root (a bitcast of its add) is the module's add
    (the same JAX name, line and type as the add and the broadcast of 1, and the add's
    operation; run once), whose value is the result (JAX's); the dot has no metadata in
    XLA's program, and the sine has the sine's name and line but another shape (XLA left
    out the unit dimension): neither shows a value, and each says why."""
    x, w = XW[0] / 50, XW[1] / 3
    exploration = si.explore(sine_of_product, x, w, xla_stages=True)
    data, graph = exploration.data, exploration.data["xla"]["graph"]
    root = graph["regions"]["xr0"]["ret"]["sources"][0][0]
    fusion = graph["groups"][graph["steps"][root]["group"]]
    assert graph["steps"][root]["op"] == "bitcast" and fusion["v"] == graph["steps"][root]["v"]
    op = data["steps"][fusion["v"]]
    assert op["name"] == "stablehlo.add" and op["line"] == sine_of_product.__code__.co_firstlineno + 1
    (record,) = [r for r in exploration.trace.records if r.op == "stablehlo.add"]
    np.testing.assert_allclose(record.values[0], jax.jit(sine_of_product)(x, w), rtol=1e-6)
    reasons = {step["op"]: graph["reasons"][step["w"]] for step in graph["steps"].values() if "v" not in step}
    assert reasons["dot"] == "its metadata names no JAX op and no source line: no StableHLO op to take a value from"
    assert reasons["sine"] == ("no StableHLO op of the page has the JAX name jit(sine_of_product)/sin at its line and "
                                 "a result f32[3]")
    # a sharded program's XLA program is each device's: no value is taken from the global program's ops
    assert all("v" not in step for step in _sharded_xla_graph()["steps"].values())


def test_xla_graph_cuts_a_long_entry_computation_into_parts_in_program_order():
    """45 matrix products in a chain: XLA CPU keeps each dot (45 instructions at the entry's
    top), so the graph's top holds parts of at most 40 items (groups.py's MAX_ITEMS), which
    hold the instructions in the order XLA's text lists them."""
    from stablehlo_interp.tools.explorer.groups import MAX_ITEMS

    def chain(x, w):
        for _ in range(45):
            x = x @ w
        return x

    x, w = np.eye(2, dtype=np.float32), np.full((2, 2), 0.5, np.float32)
    graph = si.explore(chain, x, w, xla_stages=True).data["xla"]["graph"]
    compiled = hlo_computations(jax.jit(chain).lower(x, w).compile().as_text())
    entry = next(name for name in compiled if name.startswith("main"))
    top = graph["regions"]["xr0"]["items"]
    assert len(top) <= MAX_ITEMS and all(item in graph["groups"] for item in top)

    def flattened(items):
        return [name for item in items for name in (flattened(graph["groups"][item]["items"])
                                                     if item in graph["groups"] and "xla" not in graph["groups"][item]
                                                     else [item])]

    names = [graph["groups"][item]["title"] if item in graph["groups"] else f"%{graph['steps'][item]['name']}"
             for item in flattened(top)]
    listed = [f"%{name}" for name, text in compiled[entry] if " parameter(" not in text]
    assert names == listed and sum(" dot(" in text for _, text in compiled[entry]) == 45


def test_xla_graph_draws_a_loops_computations_inside_its_instruction():
    """A fori_loop: XLA CPU calls a computation (``call``, its ``to_apply``) that runs the
    ``while``: the called computation is a region inside the call's step, the loop's
    condition and body regions inside the while's, each holding its computation's
    instructions (parameters as inputs, fusions as groups)."""
    def loop(x):
        return jax.lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) * 2 + i, x)

    x = np.arange(4, dtype=np.float32)
    graph = si.explore(loop, x, xla_stages=True).data["xla"]["graph"]
    compiled = hlo_computations(jax.jit(loop).lower(x).compile().as_text())
    every = {f"%{name}": text for instructions in compiled.values() for name, text in instructions}
    owned = {region["title"]: graph["steps"][region["owner"]]["name"]
             for region in graph["regions"].values() if region["owner"] is not None}
    (call,) = [name for name, text in every.items() if " call(" in text]
    (loop_instruction,) = [name for name, text in every.items() if " while(" in text]
    called = {f"%{re.search(names, every[caller])[1]}": caller[1:] for caller, names in [
        (call, r"to_apply=%([\w.\-]+)"), (loop_instruction, r"condition=%([\w.\-]+)"),
        (loop_instruction, r"body=%([\w.\-]+)")]}
    assert owned == called
    for region in graph["regions"].values():
        if region["owner"] is None:
            continue
        items = [graph["groups"][item]["title"] if item in graph["groups"] else f"%{graph['steps'][item]['name']}"
                 for item in region["items"]]
        assert items == [f"%{name}" for name, text in compiled[region["title"][1:]] if " parameter(" not in text]


PLAIN_MODULE = """func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.exponential %x : tensor<3xf32>
  %1 = stablehlo.log %0 : tensor<3xf32>
  %2 = stablehlo.multiply %1, %x : tensor<3xf32>
  return %2 : tensor<3xf32>
}
"""


def test_xla_stages_of_a_module_file_link_xlas_instructions_to_its_lines(tmp_path):
    """A .mlir file without JAX's locations: each op's location is its line in the file,
    which XLA keeps as the instructions' ``source_file``/``source_line``: the optimized
    program's multiply (algsimp made log(exp(x)) into x) is linked to line 4 and shows the
    interpreter's value of the module's multiply (the only op of that line), and algsimp's
    removed exponential names line 2."""
    path = tmp_path / "plain.mlir"
    path.write_text(PLAIN_MODULE)
    exploration = si.explore(str(path), np.array([1, 2, 3], np.float32), xla_stages=True)
    data, xla = exploration.data, exploration.data["xla"]
    here = [file["path"] for file in data["files"]].index(str(path))
    multiply = next(line for line in xla["lines"] if " multiply(" in line["text"])
    assert multiply["keys"] == [[here, 4]]
    (step,) = [step for step in xla["graph"]["steps"].values() if step["op"] == "multiply"]
    assert data["steps"][step["v"]]["name"] == "stablehlo.multiply" and data["steps"][step["v"]]["line"] == 4
    removed = [change for entry in xla["passes"] for change in entry["changes"] if " exponential(" in change[1]]
    assert removed and all(change[0] == "-" and change[2] == "plain.mlir:2" for change in removed)


def test_xla_graph_shows_the_values_of_xlas_program_run_on_the_interpreter():
    """Every instruction of XLA's optimized program of ``log_exp_and_product`` shows the
    value it computes when the interpreter runs the program (translated back): the root
    fusion's is JAX's compiled result (251 where the original program's add gives inf:
    algsimp made log(exp(x)) into x), the dot's is x @ w. A fori_loop's program, whose
    translation orders the entry's and the body's ops otherwise than XLA's text (lined up
    by their operands): the entry's copy of x shows x; each instruction of the body (its
    tuples aside) ran three times, and says so instead of showing a value."""
    import sys

    def text(array):
        return np.array2string(np.asarray(array), threshold=sys.maxsize, max_line_width=100, separator=" ")

    exploration = si.explore(log_exp_and_product, *XW, xla_stages=True)
    data, graph = exploration.data, exploration.data["xla"]["graph"]
    assert all("run" in item for item in [*graph["steps"].values(), *graph["groups"].values()])
    root = graph["steps"][graph["regions"]["xr0"]["ret"]["sources"][0][0]]
    fusion = graph["groups"][root["group"]]
    assert data["full_values"][fusion["run"]["full"]] == text(jax.jit(log_exp_and_product)(*XW))
    (dot,) = [step for step in graph["steps"].values() if step["op"] == "dot"]
    assert data["full_values"][dot["run"]["full"]] == text(XW[0] @ XW[1])
    original = next(r for r in exploration.trace.records if r.op == "stablehlo.add")
    assert np.isinf(np.asarray(original.values[0])).any() and fusion["v"] == root["v"]

    def loop(x):
        return jax.lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) * 2 + i, x)

    x = np.arange(4, dtype=np.float32)
    exploration = si.explore(loop, x, xla_stages=True)
    data, graph = exploration.data, exploration.data["xla"]["graph"]
    (copy,) = [step for step in graph["steps"].values() if step["op"] == "copy" and step["t"] == "f32[4]"
               and step["l"] in _lines_of(graph, "xr0")]
    assert data["full_values"][copy["run"]["full"]] == text(x)
    (body,) = [region for region in graph["regions"].values() if region["title"] == "%" + re.search(
        r"body=%([\w.\-]+)", next(line["text"] for line in data["xla"]["lines"] if " while(" in line["text"]))[1]]
    reasons = {graph["reasons"][graph["steps"][sid]["rw"]] for sid in body["steps"]
               if graph["steps"][sid]["op"] not in ("tuple", "get-tuple-element")}
    assert reasons == {"it ran 3 times in the interpreter's run of XLA's program: no single value"}


def _lines_of(graph: dict, rid: str) -> set[int]:
    return {graph["steps"][sid]["l"] for sid in graph["regions"][rid]["steps"]}


def _sharded_xla_graph() -> dict:
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices("cpu")[:8]), ("x",))
    a = jax.device_put(np.ones((4, 16), np.float32), NamedSharding(mesh, P(None, "x")))
    return si.explore(jax.jit(lambda a: jnp.sin(a) @ a.T), a, xla_stages=True).data["xla"]["graph"]


def test_xla_stages_step_back_from_the_optimized_program_to_each_stage():
    """Undoing the passes' hunks from the last stage the panel shows gives each distinct
    stage's text as the panel shows it (metadata and frame tables left out)."""
    from stablehlo_interp.tools.passes import distinct_stages

    exploration = si.explore(log_exp_and_product, *XW, xla_stages=True)
    xla = exploration.data["xla"]
    distinct = distinct_stages(exploration.passes.stages)
    assert len(xla["back"]) == len(xla["passes"]) == len(distinct) - 1
    text = [line["text"] for line in xla["lines"]]
    for position in range(len(distinct) - 2, -1, -1):
        for start, count, lines in reversed(xla["back"][position]):
            text[start:start + count] = lines
        tables = r"\n(?:FileNames|FunctionNames|FileLocations|StackFrames)\n(?:.+\n)*"
        shown = [_METADATA.sub("", line).rstrip() for line in re.sub(tables, "\n", distinct[position].text).splitlines()]
        assert [line for line in text if line] == [line for line in shown if line]
    assert '"back"' not in json.dumps({k: v for k, v in exploration.data["xla"].items() if k != "back"})
    assert 'id="explorer-stages">[[' in exploration.html


def test_xla_stages_of_a_sharded_program_show_xlas_per_device_program():
    """A matmul whose contracting dimension is sharded over XLA CPU's 8 devices: the optimized
    program is each device's (as JAX's own compile makes it), its partial product's fusion and
    the all-reduce the partitioner inserted; no pass changes the values."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices("cpu")[:8]), ("x",))
    a = jax.device_put((np.arange(64, dtype=np.float32).reshape(4, 16) - 30) / 8, NamedSharding(mesh, P(None, "x")))
    b = jax.device_put((np.arange(128, dtype=np.float32).reshape(16, 8) % 7 - 3) / 4, NamedSharding(mesh, P("x", None)))
    product = jax.jit(lambda a, b: a @ b)
    exploration = si.explore(product, a, b, xla_stages=True)
    shown = [line["text"] for line in exploration.data["xla"]["lines"]]
    compiled = product.lower(a, b).compile().as_text().splitlines()
    assert fusions(shown) == fusions(compiled) and len(fusions(shown)) == 1
    reduces = [_METADATA.sub("", line).strip() for line in compiled if " all-reduce(" in line]
    assert len(reduces) == 1 and reduces[0] in [line.strip() for line in shown]
    assert exploration.passes.devices == 8 and exploration.passes.ok
    assert not any(entry["values"] for entry in exploration.data["xla"]["passes"])


def every_collective(x):
    """On 4 devices, each holding a f32[2, 4] (32 bytes): each collective once, and a psum
    three times in a loop."""
    total = jax.lax.psum(x, "x")                                                # f32[2,4] -> f32[2,4]
    gathered = jax.lax.all_gather(x, "x", tiled=True)                           # -> f32[8,4]
    scattered = jax.lax.psum_scatter(x, "x", scatter_dimension=1, tiled=True)   # -> f32[2,1]
    shifted = jax.lax.ppermute(x, "x", perm=[(0, 1), (1, 2), (2, 3)])          # device 3 is no source
    swapped = jax.lax.all_to_all(x, "x", split_axis=1, concat_axis=0, tiled=True)   # -> f32[8,1]
    looped = jax.lax.fori_loop(0, 3, lambda i, v: x + jax.lax.psum(v, "x"), x)
    return total, gathered, scattered, shifted, swapped, looped


def test_per_device_collectives_bytes_by_hand():
    """Each device sends the bytes of the operands it hands to a collective and receives
    those of its results (sharding/traffic.py), by hand for a f32[2, 4] shard (32 bytes) on
    4 devices: all_reduce 32/32, all_gather 32/128 (f32[8,4]), reduce_scatter 32/8
    (f32[2,1]), all_to_all 32/32 (f32[8,1]), collective_permute 32/32 but 0 sent by
    device 3 (no pair's source) and 0 received by device 0 (no pair's target); the loop's
    psum runs 3 times: 96/96."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices("cpu")[:4]), ("x",))
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), NamedSharding(mesh, P("x")))
    step = jax.jit(jax.shard_map(every_collective, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    data = si.explore(step, x, per_device=True).data
    collectives = {(c["op"], sum(c["runs"])): c for c in data["devices"]["collectives"]}
    expected = {("stablehlo.all_reduce", 4): ([1] * 4, [32] * 4, [32] * 4),
                ("stablehlo.all_gather", 4): ([1] * 4, [32] * 4, [128] * 4),
                ("stablehlo.reduce_scatter", 4): ([1] * 4, [32] * 4, [8] * 4),
                ("stablehlo.all_to_all", 4): ([1] * 4, [32] * 4, [32] * 4),
                ("stablehlo.collective_permute", 4): ([1] * 4, [32, 32, 32, 0], [0, 32, 32, 32]),
                ("stablehlo.all_reduce", 12): ([3] * 4, [96] * 4, [96] * 4)}
    assert {key: (c["runs"], c["sent"], c["received"]) for key, c in collectives.items()} == expected
    # each collective's record carries its device's bytes of that run
    permute = collectives["stablehlo.collective_permute", 4]
    assert [r["tx"] for r in sorted(records_of(data, permute["s"]), key=lambda r: r["d"])] == [[32, 0], [32, 32], [32, 32], [0, 32]]


def test_per_device_compare_findings_name_the_op_and_device():
    """A backend whose global ``x * 2`` is off at row 0, column 5 (columns over 8 devices:
    device 2 holds columns 4-5): the finding is device 2's, on the op that made the result
    (the per-device program's multiply: the input is resharded to columns before it), with
    its record on device 2."""
    function, x, off_by_one = doubled_and_off_on_device_2()
    data = si.explore(function, x, per_device=True, backend=off_by_one).data
    overlay = data["overlays"]["divergence"]
    [finding] = overlay["findings"]
    entry = data["regions"][data["sections"][0]]
    assert finding["d"] == 2 and finding["s"] == entry["ret"]["sources"][0][0]
    assert data["steps"][finding["s"]]["op"] == "stablehlo.multiply"
    record = next(r for r in data["records"]["ops"] if r["n"] == finding["record"])
    assert (record["s"], record["d"]) == (finding["s"], 2) and overlay["record"] == finding["record"]
    # device 2's local f32[8, 2] holds global column 5 as its column 1: 0 * 16 + 5 = 5, doubled 10
    assert finding["text"].startswith("1 of 16 elements differ; largest at [0, 1]: 10 (interpreter) vs 11 (off_by_one)")


def test_xla_stages_list_the_per_device_programs_collectives_with_the_same_bytes_by_hand():
    """XLA's per-device program of ``every_collective`` on 4 devices: each collective
    instruction with the bytes of ``test_per_device_collectives_bytes_by_hand`` (the same
    definition; the loop's psum is one instruction, listed once, that runs 3 times: 96/96,
    XLA's loop's known trip count; XLA's all-to-all takes the four f32[2,1] pieces as
    operands: 32 bytes)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices("cpu")[:4]), ("x",))
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), NamedSharding(mesh, P("x")))
    step = jax.jit(jax.shard_map(every_collective, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    xla = si.explore(step, x, xla_stages=True).data["xla"]
    found = sorted((c["op"], c["times"], c["sent"], c["received"]) for c in xla["collectives"])
    assert found == sorted([("all-reduce", 1, [32] * 4, [32] * 4), ("all-reduce", 3, [96] * 4, [96] * 4),
                            ("all-gather", 1, [32] * 4, [128] * 4), ("reduce-scatter", 1, [32] * 4, [8] * 4),
                            ("all-to-all", 1, [32] * 4, [32] * 4), ("collective-permute", 1, [32, 32, 32, 0], [0, 32, 32, 32])])
    for c in xla["collectives"]:
        assert f" {c['op']}(" in xla["lines"][c["line"]]["text"] and c["uncounted"] is None


def loops_on_a_2x4_mesh(x):
    """On a 2x4 mesh ("a", "b"): an all-gather over "b", a psum over "a" in a loop of 4 in
    a loop of 3, a psum over "b" in a loop whose trip count depends on the values, and one
    in a branch of a ``cond`` on the psum of every device's sum."""
    gathered = jax.lax.all_gather(x, "b", tiled=True)
    inner = lambda i, v: jax.lax.fori_loop(0, 4, lambda j, w: w + jax.lax.psum(w, "a"), v)   # noqa: E731
    looped = jax.lax.fori_loop(0, 3, inner, x)
    until = jax.lax.while_loop(lambda v: v.sum() < 1000.0, lambda v: v + jax.lax.psum(v, "b"), x + 1.0)
    chosen = jax.lax.cond(jax.lax.psum(x.sum(), ("a", "b")) > 0, lambda v: v + jax.lax.psum(v, "b"), lambda v: v * 2, x)
    return gathered[:x.shape[0]] + looped + until + chosen


def test_xla_collectives_in_loops_count_each_loops_trip_count_on_a_2x4_mesh():
    """XLA CPU's per-device program of ``loops_on_a_2x4_mesh`` on 8 devices, each holding a
    f32[4, 2] shard of a f32[8, 8] (4 x 2 x 4 bytes = 32): the all-gather over "b" (groups of
    4) sends 32 and receives 4 x 32; the psum over "a" (groups of 2, in XLA's text) runs
    3 x 4 times (the two loops' known trip counts): 12 x 32 sent and received; the psum of
    every device's f32[] sum, once: 4 bytes each way; the psum of the loop whose trip count
    XLA does not know, and the one in the cond's branch, are listed without bytes, saying why."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices("cpu")[:8]).reshape(2, 4), ("a", "b"))
    x = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8), NamedSharding(mesh, P("a", "b")))
    step = jax.jit(jax.shard_map(loops_on_a_2x4_mesh, mesh=mesh, in_specs=P("a", "b"), out_specs=P("a", "b")))
    xla = si.explore(step, x, xla_stages=True).data["xla"]
    shard, scalar = 4 * 2 * np.dtype(np.float32).itemsize, np.dtype(np.float32).itemsize
    group_b = mesh.shape["b"]
    counted = sorted((c["op"], c["times"], c["sent"], c["received"]) for c in xla["collectives"] if not c["uncounted"])
    assert counted == [("all-gather", 1, [shard] * 8, [group_b * shard] * 8),
                       ("all-reduce", 1, [scalar] * 8, [scalar] * 8),
                       ("all-reduce", 3 * 4, [12 * shard] * 8, [12 * shard] * 8)]
    looped = next(c for c in xla["collectives"] if c["times"] == 12)
    assert f"replica_groups={{{{0,{group_b}}}," in xla["lines"][looped["line"]]["text"]
    branch, unknown = sorted((c for c in xla["collectives"] if c["uncounted"]), key=lambda c: c["uncounted"])
    assert branch["uncounted"] == "inside a conditional's branch, which runs only where the branch is taken"
    assert re.fullmatch(r"inside a loop of unknown trip count \(%while[.\d]*\)", unknown["uncounted"])
    for c in (unknown, branch):
        assert (c["op"], c["times"], c["sent"], c["received"]) == ("all-reduce", None, [0] * 8, [0] * 8)


def test_xla_collectives_read_groups_in_xlas_iota_form_and_say_what_they_cannot_count():
    """``[2,4]<=[4,2]T(1,0)``: iota(8) as 4x2, transposed, as 2x4: groups {0,2,4,6} and
    {1,3,5,7}, whose first devices (0 and 1) send a broadcast's bf16[3] (6 bytes) and the
    others receive it; a collective of an element type of unknown width, of a dynamic
    shape, or of groups in a form not read, is listed without bytes, saying why."""
    from stablehlo_interp.tools.explorer.xla_collectives import collectives

    lines = ["%p = bf16[3]{0} parameter(0)",
             "%b = bf16[3]{0} collective-broadcast(%p), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0)",
             "%g = xyz[4]{0} all-gather(xyz[1]{0} %r), replica_groups={}, dimensions={0}",
             "%d = f32[<=8]{0} all-gather(f32[<=1]{0} %r), replica_groups={}, dimensions={0}",
             "%m = f32[2]{0} collective-broadcast(%p), replica_groups=mesh['x'=8] {'x'}, channel_id=2"]
    broadcast, odd, dynamic, on_mesh = collectives(lines, 8)
    assert broadcast["sent"] == [6, 6, 0, 0, 0, 0, 0, 0] and broadcast["received"] == [0, 0, 6, 6, 6, 6, 6, 6]
    assert broadcast["uncounted"] is None and broadcast["times"] == 1
    assert (odd["op"], odd["uncounted"]) == ("all-gather", "element type xyz: its width is not known")
    assert dynamic["uncounted"] == "f32[<=1]: a dynamic shape"
    assert on_mesh["uncounted"] == "replica groups mesh['x'=8] {'x'}: a form not read here"


def test_xla_collectives_count_an_asynchronous_pair_once_at_its_start():
    """XLA's GPU and TPU pipelines split a collective into ``-start`` and ``-done`` (as
    XLA's own tests write them): one entry, at the start, that sends the start's operands
    and receives the done's result, not the start's tuple (the operand again, and a
    permute's two u32 contexts). By hand on 4 devices: the all-reduce's f32[8] 32/32; the
    all-gather's bf16[2] (4 bytes) gathered to bf16[8] (16 bytes); the permute's s32[3]
    (12 bytes) from devices 0 and 1 to 1 and 2. A start whose done is not in the program
    is listed uncounted."""
    from stablehlo_interp.tools.explorer.xla_collectives import collectives

    lines = ["%p = f32[8]{0} parameter(0)",
             "%q = bf16[2]{0} parameter(1)",
             "%ars = f32[8]{0} all-reduce-start(%p), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=%add",
             "%ags = (bf16[2]{0}, bf16[8]{0}) all-gather-start(bf16[2]{0} %q), replica_groups={{0,1,2,3}}, dimensions={0}",
             "%r = s32[3]{0} parameter(2)",
             "%cps = (s32[3]{0}, s32[3]{0}, u32[], u32[]) collective-permute-start(%r), source_target_pairs={{0,1},{1,2}}",
             "%ard = f32[8]{0} all-reduce-done(%ars)",
             "%agd = bf16[8]{0} all-gather-done((bf16[2]{0}, bf16[8]{0}) %ags)",
             "%cpd = s32[3]{0} collective-permute-done(%cps)",
             "%lone = f32[8]{0} all-reduce-start(%p), replica_groups={}, to_apply=%add"]
    reduce, gather, permute, lone = collectives(lines, 4)
    assert [(c["op"], c["line"], c["uncounted"]) for c in (reduce, gather, permute)] == [
        ("all-reduce", 2, None), ("all-gather", 3, None), ("collective-permute", 5, None)]
    assert (reduce["sent"], reduce["received"]) == ([32] * 4, [32] * 4)
    assert (gather["sent"], gather["received"]) == ([4] * 4, [16] * 4)
    assert (permute["sent"], permute["received"]) == ([12, 12, 0, 0], [0, 12, 12, 0])
    assert lone["uncounted"] == "an asynchronous start whose all-reduce-done is not in the program"
    assert lone["sent"] == [0] * 4


def test_xla_collectives_of_xlas_tpu_program_count_its_async_permute_once():
    """XLA's TPU program for one device of a f32[256, 256] over a 2x4 mesh (tests/data/tpu/
    README.md): each device's f32[128, 64] block is 128 x 64 x 4 = 32768 bytes. The ring
    permute over "b" (every device a source and a target), an asynchronous pair, is one
    collective at its start: 32768 each way (not the start's tuple of two blocks and two
    u32 contexts); the psum over "b" 32768 each way; the all-gather over "a" (groups of 2)
    receives 2 x 32768. TPU's pipeline writes no trip count on the loop: its psum is
    listed without bytes, saying so."""
    from stablehlo_interp.tools.explorer.xla_collectives import collectives

    lines = (pathlib.Path(__file__).parent / "data" / "tpu" / "async_collectives_2x4.hlo").read_text().splitlines()
    block = 128 * 64 * np.dtype(np.float32).itemsize
    found = {c["name"]: c for c in collectives(lines, 8)}
    assert sorted(found) == ["all-gather.4", "collective-permute-start", "psum_invariant.15", "psum_invariant.17"]
    permute = found["collective-permute-start"]
    assert (permute["op"], permute["times"], permute["sent"], permute["received"]) == (
        "collective-permute", 1, [block] * 8, [block] * 8)
    assert (found["psum_invariant.15"]["sent"], found["psum_invariant.15"]["received"]) == ([block] * 8, [block] * 8)
    assert (found["all-gather.4"]["sent"], found["all-gather.4"]["received"]) == ([block] * 8, [2 * block] * 8)
    looped = found["psum_invariant.17"]
    assert (looped["times"], looped["uncounted"], looped["sent"]) == (
        None, "inside a loop of unknown trip count (%while.10)", [0] * 8)


def test_per_device_compare_marks_each_devices_first_divergent_op():
    """XLA running the per-device program with tanh for sine (tests/test_compare_per_device.py):
    devices 2 and 5 differ; the page marks the sine, each device's first divergent op, with its
    record on that device, before the op that made the differing result, and opens on it."""
    from jax.sharding import NamedSharding, PartitionSpec as P
    from test_compare_per_device import SineAsTanh, mesh_of, resharded_sine

    x = np.zeros((8, 16), np.float32)
    x[:, 5], x[:, 10] = np.arange(1, 9), -np.arange(1, 9)
    sharded = jax.device_put(x, NamedSharding(mesh_of(8), P("x", None)))
    data = si.explore(jax.jit(resharded_sine), sharded, per_device=True, backend=SineAsTanh()).data
    overlay = data["overlays"]["divergence"]
    firsts = [f for f in overlay["findings"] if f["result"] == "its first divergent op"]
    assert [f["d"] for f in firsts] == [2, 5] and overlay["devices"] == [2, 5]
    for finding in firsts:
        assert data["steps"][finding["s"]]["op"] == "stablehlo.sine"
        record = next(r for r in data["records"]["ops"] if r["n"] == finding["record"])
        assert (record["s"], record["d"]) == (finding["s"], finding["d"])
        assert finding["text"].startswith("beyond its bound: 8 of 16 elements are beyond the bound")
    assert overlay["record"] == firsts[0]["record"]
    results = [f for f in overlay["findings"] if f["result"] != "its first divergent op"]
    assert [f["d"] for f in results] == [2, 5] and all(data["steps"][f["s"]]["op"] == "stablehlo.add" for f in results)
