"""A module's dataflow graph as a self-contained HTML page (inline SVG, no dependencies).

    si.graph(f, x, path="f.html")        # with the values of a run on x
    si.graph("model.mlir", path="m.html")  # the structure only

Ops are nodes (name, source line, and the summary of their results when the
program ran); values are edges, labelled with their types. Each region
(loop body, branch, called function) is drawn as its own graph below the one
that uses it; inside regions the values shown are those of the last call.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from .region_calls import describe_location, op_label, region_name
from ..program import Program, load, prepare
from .trace import record_run

NODE_WIDTH, NODE_HEIGHT, COLUMN, ROW, MARGIN = 190, 46, 210, 96, 20


@dataclass
class _Node:
    key: object
    title: str
    detail: str
    tooltip: str
    kind: str            # "input", "op", "region-op", "output"
    layer: int = 0
    x: float = 0.0
    y: float = 0.0


def graph(target, *args, path=None, function: str | None = None, **kwargs) -> str:
    """The HTML page of ``target``'s dataflow graph; written to ``path`` when given.

    With arguments, the program runs first and nodes show its values.
    """
    if args or kwargs:
        call = prepare(target, args, kwargs, function)
        program, function_plan = call.program, call.program.function(call.function)
    else:
        program = target if isinstance(target, Program) else load(target)
        function_plan = program.runnable(function)
        call = prepare(program, (), {}, function_plan.name) if not function_plan.arg_types else None
    records = {}
    if call is not None:
        for record in record_run(call):
            records[record.step] = record     # the last run of each op
    sections, seen = [], set()
    pending = [(f"@{function_plan.name}", function_plan.region, _input_types(function_plan))]
    while pending:
        title, region, input_types = pending.pop(0)
        if id(region) in seen:
            continue
        seen.add(id(region))
        svg, nested = _region_svg(region, input_types, records)
        sections.append(f"<section><h2>{html.escape(title)}</h2>\n{svg}\n</section>")
        pending += nested
    page = _PAGE.format(title=html.escape(program.name or "module"), body="\n".join(sections))
    if path is not None:
        with open(path, "w", encoding="utf-8") as out:
            out.write(page)
    return page


def _input_types(function) -> list[str]:
    return [_compact(t) for t in function.arg_types]


def _compact(declared) -> str:
    """``tensor<4x3xf32>`` as ``f32[4,3]``."""
    shape = getattr(declared, "shape", None)
    if shape is None:
        return str(declared)
    return f"{declared.element_type}[{','.join('?' if d is None else str(d) for d in shape)}]"


def _region_svg(region, input_types, records):
    """The SVG of one region, and the regions its ops own (to draw next)."""
    nodes, edges, producer, slot_types = [], [], {}, {}
    n_captures = region.n_captures
    names = [f"captured #{i}" for i in range(n_captures)] + [f"%arg{i}" for i in range(region.n_args)]
    types = list(input_types) if len(input_types) == len(names) else \
        ["?"] * n_captures + [_compact(t) for t in region.arg_types]
    for slot, (name, type_text) in enumerate(zip(names, types)):
        node = _Node(("in", slot), name, type_text, f"{name}: {type_text}", "input")
        nodes.append(node)
        producer[slot], slot_types[slot] = node, type_text
    nested = []
    for step in region.steps:
        record = records.get(step)
        where = describe_location(step.info.location)
        summary = ", ".join(map(str, record.results)) if record and record.results is not None else ""
        location = str(step.info.location) if step.info.location else ""
        tooltip = "\n".join(part for part in (op_label(step), location, summary) if part)
        node = _Node(step, op_label(step), summary or where or _compact_results(step), tooltip,
                     "region-op" if step.regions else "op")
        nodes.append(node)
        for slot in step.operands:
            if slot in producer:
                edges.append((producer[slot], node, slot_types[slot]))
        for slot, declared in zip(step.results, step.info.result_types):
            producer[slot], slot_types[slot] = node, _compact(declared)
        for index, (inner, captures) in enumerate(zip(step.regions, step.captures)):
            inner_types = [slot_types.get(s, "?") for s in captures] + [_compact(t) for t in inner.arg_types]
            title = (inner.description if inner.description.startswith("@")
                     else f"{op_label(step)}{f' at {where}' if where else ''}: {region_name(step, index)}")
            nested.append((title, inner, inner_types))
    output = _Node(("out",), "return", ", ".join(_compact(t) for t in region.output_types), "results", "output")
    nodes.append(output)
    for slot in region.outputs:
        if slot in producer:
            edges.append((producer[slot], output, slot_types[slot]))
    _layout(nodes, edges)
    return _svg(nodes, edges), nested


def _compact_results(step) -> str:
    return ", ".join(_compact(t) for t in step.info.result_types)


def _layout(nodes, edges) -> None:
    """Layers by longest path from the inputs (ops without operands, such as
    constants, right above their first user); nodes of a layer side by side,
    in program order."""
    incoming: dict = {}
    outgoing: dict = {}
    for source, target, _ in edges:
        incoming.setdefault(id(target), []).append(source)
        outgoing.setdefault(id(source), []).append(target)
    for node in nodes:   # program order: producers come first
        node.layer = 1 + max((s.layer for s in incoming.get(id(node), [])), default=-1)
    for node in nodes:
        if node.kind != "input" and id(node) not in incoming and id(node) in outgoing:
            node.layer = max(0, min(t.layer for t in outgoing[id(node)]) - 1)
    layers: dict = {}
    for node in nodes:
        layers.setdefault(node.layer, []).append(node)
    widest = max(len(row) for row in layers.values())
    for layer, row in layers.items():
        offset = (widest - len(row)) * COLUMN / 2
        for position, node in enumerate(row):
            node.x = MARGIN + offset + position * COLUMN
            node.y = MARGIN + layer * ROW


def _svg(nodes, edges) -> str:
    width = MARGIN * 2 + max(n.x for n in nodes) + NODE_WIDTH
    height = MARGIN * 2 + max(n.y for n in nodes) + NODE_HEIGHT
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}">']
    for source, target, label in edges:
        x1, y1 = source.x + NODE_WIDTH / 2, source.y + NODE_HEIGHT
        x2, y2 = target.x + NODE_WIDTH / 2, target.y
        middle = (y1 + y2) / 2
        parts.append(f'<g class="edge"><path d="M{x1:.0f},{y1:.0f} C{x1:.0f},{middle:.0f} {x2:.0f},{middle:.0f} '
                     f'{x2:.0f},{y2 - 4:.0f}" marker-end="url(#arrow)"/>'
                     f'<text x="{(x1 + x2) / 2 + 4:.0f}" y="{middle:.0f}">{html.escape(label)}</text></g>')
    for node in nodes:
        parts.append(f'<g class="node {node.kind}"><title>{html.escape(node.tooltip)}</title>'
                     f'<rect x="{node.x:.0f}" y="{node.y:.0f}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="6"/>'
                     f'<text x="{node.x + NODE_WIDTH / 2:.0f}" y="{node.y + 19:.0f}" class="name">'
                     f'{html.escape(_fit(node.title))}</text>'
                     f'<text x="{node.x + NODE_WIDTH / 2:.0f}" y="{node.y + 36:.0f}" class="detail">'
                     f'{html.escape(_fit(node.detail))}</text></g>')
    parts.append('<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
                 'orient="auto"><path d="M0,0 L8,4 L0,8 z"/></marker></defs></svg>')
    return "\n".join(parts)


def _fit(text: str, limit: int = 30) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
h2 {{ font-size: 1em; font-family: monospace; }}
.node rect {{ fill: #eef3fb; stroke: #4a6fa5; }}
.node.input rect {{ fill: #eaf6ea; stroke: #4a8a4a; }}
.node.output rect {{ fill: #fbf1e6; stroke: #b07a3a; }}
.node.region-op rect {{ stroke-width: 3; }}
.node text {{ text-anchor: middle; font-family: monospace; }}
.node text.name {{ font-size: 12px; font-weight: bold; }}
.node text.detail {{ font-size: 10px; fill: #444; }}
.edge path {{ fill: none; stroke: #888; }}
.edge text {{ font-size: 10px; font-family: monospace; fill: #555; }}
marker path {{ fill: #888; }}
</style></head>
<body><h1>{title}</h1>
<p>Ops are nodes, values are edges (with their types). Hover over a node for its location and
values. Ops with regions (thick border) have their regions drawn below.</p>
{body}
</body></html>
"""
