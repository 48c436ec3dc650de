// The stablehlo-interp lowering explorer. The data (sources, module, plan, run) is the
// JSON above; dagre lays out each region's graph; everything else is plain DOM.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("explorer-data").textContent);
  const steps = data.steps, regions = data.regions;
  const records = data.records.ops;
  const recordByNumber = new Map(records.map(r => [r.n, r]));
  const recordsOfStep = new Map();
  for (const r of records) {
    if (!recordsOfStep.has(r.s)) recordsOfStep.set(r.s, []);
    recordsOfStep.get(r.s).push(r);
  }
  // A region's calls ("activations"): each distinct (op record it ran under, call number).
  const callsOfRegion = new Map();
  for (const r of records) {
    const rid = steps[r.s].region;
    if (!callsOfRegion.has(rid)) callsOfRegion.set(rid, {list: [], seen: new Set()});
    const entry = callsOfRegion.get(rid), key = r.p + ":" + r.c;
    if (!entry.seen.has(key)) { entry.seen.add(key); entry.list.push({p: r.p, c: r.c}); }
  }
  const stepsOfHloLine = new Map();
  for (const sid in steps) {
    const line = steps[sid].hlo;
    if (line === null) continue;
    if (!stepsOfHloLine.has(line)) stepsOfHloLine.set(line, []);
    stepsOfHloLine.get(line).push(sid);
  }
  const overlayStep = {};
  for (const kind of ["nonfinite", "divergence"]) {
    const overlay = data.overlays[kind];
    if (overlay && overlay.record !== null && recordByNumber.has(overlay.record))
      overlayStep[kind] = recordByNumber.get(overlay.record).s;
  }
  const totalSteps = Object.keys(steps).length;
  const COLLAPSED_ABOVE = 200;   // ops: a larger program opens with its op regions collapsed
  const state = {
    collapsed: new Set(totalSteps > COLLAPSED_ABOVE ? Object.values(regions).filter(r => r.owner !== null).map(r => r.id) : []),
    call: {},           // region id -> index of the shown call among its calls
    selection: null,    // {kind: "step", sid} or {kind: "line", file, line}
    matches: [], matchIndex: -1,
  };
  const measure = document.createElement("canvas").getContext("2d");
  measure.font = "10px monospace";

  // ------------------------------------------------------------------ calls and records

  function callsOf(rid) {
    const all = callsOfRegion.has(rid) ? callsOfRegion.get(rid).list : [];
    const owner = regions[rid].owner;
    if (owner === null) return all;
    const ownerRecord = currentRecord(owner);
    return ownerRecord ? all.filter(call => call.p === ownerRecord.n) : [];
  }
  function currentCall(rid) {
    const calls = callsOf(rid);
    if (!calls.length) return null;
    const index = Math.min(state.call[rid] || 0, calls.length - 1);
    return calls[index];
  }
  function currentRecord(sid) {
    const call = currentCall(steps[sid].region);
    if (!call) return null;
    return (recordsOfStep.get(sid) || []).find(r => r.p === call.p && r.c === call.c) || null;
  }
  function callText(rid, call, index, count) {
    const owner = regions[rid].owner;
    if (owner === null) return `call ${index + 1} of ${count}`;
    const word = steps[owner].op === "stablehlo.while" ? "iteration" : "call";
    return `${word} ${call.c} (${index + 1} of ${count})`;
  }

  // ------------------------------------------------------------------ text panels

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function lineKey(file, line) { return file + ":" + line; }

  function renderTexts() {
    const python = document.getElementById("python");
    data.files.forEach((file, index) => {
      if (data.files.length > 1) python.appendChild(el("div", "file", file.name));
      for (const entry of file.lines) {
        if (entry === null) { python.appendChild(el("div", "gap", "⋯")); continue; }
        const row = el("div", "line");
        row.dataset.key = lineKey(index, entry[0]);
        row.title = `${file.name}:${entry[0]}`;
        row.append(el("span", "no", String(entry[0])), el("span", "text", entry[1]));
        row.addEventListener("click", () => select({kind: "line", file: index, line: entry[0]}));
        python.appendChild(row);
      }
    });
    const jaxpr = document.getElementById("jaxpr");
    if (data.jaxpr === null) {
      jaxpr.appendChild(el("div", "gap", "(a module, not a Python function: no jaxpr)"));
    } else {
      data.jaxpr.forEach((entry, index) => {
        const row = el("div", "line");
        row.dataset.index = index;
        if (entry.file !== undefined) {
          row.dataset.key = lineKey(entry.file, entry.line);
          row.title = `${data.files[entry.file].name}:${entry.line} (${entry.function})`;
          row.addEventListener("click", () => select({kind: "line", file: entry.file, line: entry.line}));
        }
        row.appendChild(el("span", "text", entry.text));
        jaxpr.appendChild(row);
      });
    }
    const hlo = document.getElementById("stablehlo");
    data.stablehlo.forEach((text, index) => {
      const number = index + 1, row = el("div", "line");
      row.dataset.hlo = number;
      row.append(el("span", "no", String(number)), el("span", "text", text));
      const owners = stepsOfHloLine.get(number);
      if (owners) {
        row.dataset.step = owners[0];
        row.addEventListener("click", () => select({kind: "step", sid: owners[0]}));
      }
      hlo.appendChild(row);
    });
    for (const kind of ["nonfinite", "divergence"]) {
      const sid = overlayStep[kind];
      if (sid === undefined) continue;
      const marker = kind === "nonfinite" ? "nonfinite" : "divergent";
      const step = steps[sid];
      if (step.hlo !== null) hlo.querySelector(`[data-hlo="${step.hlo}"]`).classList.add(marker);
      if (step.file !== null)
        for (const row of document.querySelectorAll(`#python [data-key="${lineKey(step.file, step.line)}"]`))
          row.classList.add(marker);
    }
  }

  function renderBanners() {
    const banners = document.getElementById("banners");
    const add = (className, text, title, action) => {
      const button = el("button", className, text);
      button.title = title;
      if (action) button.addEventListener("click", action); else button.disabled = true;
      banners.appendChild(button);
    };
    const where = sid => `${steps[sid].name}` + (steps[sid].line !== null ? ` at line ${steps[sid].line}` : "");
    const nonfinite = data.overlays.nonfinite;
    if (nonfinite) {
      const sid = overlayStep.nonfinite;
      add("nonfinite", "non-finite result from: " + (sid ? where(sid) : nonfinite.label || "?"), nonfinite.text,
          sid ? () => showRecord(nonfinite.record, nonfinite.text) : null);
    }
    const divergence = data.overlays.divergence;
    if (divergence && divergence.ok) add("agree", "agrees with the backend", divergence.text, null);
    else if (divergence) {
      const sid = overlayStep.divergence;
      add("divergence", "first divergence: " + (sid ? where(sid) : "(see details)"), divergence.text,
          () => sid ? showRecord(divergence.record, divergence.text) : showReport(divergence.text));
    }
    if (!data.ran) add("agree", "structure only: not run (no arguments given)", "", null);
    if (data.error) add("error", "the run failed", data.error, () => showReport(data.error));
    if (data.records.total > records.length)
      add("error", `first ${records.length} of ${data.records.total} ops kept`, "a long run keeps its first ops", null);
  }

  // ------------------------------------------------------------------ graphs

  function renderGraphs() {
    const graphs = document.getElementById("graphs");
    const scroll = [graphs.scrollLeft, graphs.scrollTop];
    graphs.textContent = "";
    for (const rid of data.sections) {
      const section = el("section");
      section.dataset.region = rid;
      section.id = "section-" + regions[rid].title.slice(1);
      const heading = el("h2", null, regions[rid].title + " ");
      heading.appendChild(callNavigation(rid));
      section.appendChild(heading);
      graphs.appendChild(section);
      renderCanvas(rid, section);
    }
    graphs.scrollLeft = scroll[0]; graphs.scrollTop = scroll[1];
    applySelection(false);
    markMatches();
  }

  function callNavigation(rid) {
    const span = el("span", "calls");
    const calls = callsOf(rid);
    if (calls.length <= 1) {
      if (!calls.length) span.textContent = regions[rid].owner === null && rid !== data.sections[0] ?
        "(not called)" : "(not run op by op)";
      return span;
    }
    const index = Math.min(state.call[rid] || 0, calls.length - 1);
    const go = delta => event => {
      event.stopPropagation();
      state.call[rid] = (index + delta + calls.length) % calls.length;
      renderGraphs();
      refreshDetails();
    };
    const previous = el("button", "prev", "◀"), next = el("button", "next", "▶");
    previous.title = "previous call"; next.title = "next call";
    previous.addEventListener("click", go(-1));
    next.addEventListener("click", go(1));
    span.append(previous, el("span", "call-text", " " + callText(rid, calls[index], index, calls.length) + " "), next);
    return span;
  }

  // Draws region ``rid`` inside ``parent``: each node is measured, then dagre places
  // nodes and routes edges (with their labels as nodes of their own, so labels do
  // not overlap), and the canvas takes the size of the laid-out graph.
  function renderCanvas(rid, parent) {
    const region = regions[rid];
    const canvas = el("div", "canvas");
    canvas.dataset.region = rid;
    parent.appendChild(canvas);
    const nodes = [];
    const call = currentCall(rid);
    region.inputs.forEach((input, index) => {
      const node = el("div", "node input");
      node.dataset.node = input.id;
      node.appendChild(el("div", "opname", input.name));
      const value = inputValue(rid, call, index);
      node.appendChild(el("div", "value", value ? value.s : input.type));
      nodes.push([input.id, node]);
      canvas.appendChild(node);
    });
    for (const sid of region.steps) {
      const node = stepNode(sid);
      canvas.appendChild(node);
      for (const inner of steps[sid].regions) renderRegion(inner, node);
      nodes.push([sid, node]);
    }
    const ret = el("div", "node ret");
    ret.dataset.node = region.ret.id;
    ret.append(el("div", "opname", "return"), el("div", "value", region.ret.types.join(", ") || "()"));
    canvas.appendChild(ret);
    nodes.push([region.ret.id, ret]);
    const sizes = nodes.map(([id, node]) => [id, node.offsetWidth, node.offsetHeight]);
    const layout = layoutOf(rid, sizes);
    for (const [id, node] of nodes) {
      const placed = layout.nodes[id];
      node.style.left = (placed.x - placed.width / 2) + "px";
      node.style.top = (placed.y - placed.height / 2) + "px";
    }
    canvas.style.width = Math.ceil(layout.width) + "px";
    canvas.style.height = Math.ceil(layout.height) + "px";
    const svgNS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("width", Math.ceil(layout.width));
    svg.setAttribute("height", Math.ceil(layout.height));
    const marker = `arrow-${rid}`;
    svg.innerHTML = `<defs><marker id="${marker}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7"
      markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#8d99ab"/></marker></defs>`;
    for (const routed of layout.edges) {
      const path = document.createElementNS(svgNS, "path");
      path.setAttribute("class", "edge");
      path.setAttribute("d", routed.points.map((p, i) => (i ? "L" : "M") + p.x.toFixed(1) + "," + p.y.toFixed(1)).join(" "));
      path.setAttribute("marker-end", `url(#${marker})`);
      path.dataset.from = routed.from; path.dataset.to = routed.to;
      svg.appendChild(path);
      const text = document.createElementNS(svgNS, "text");
      text.setAttribute("class", "edge-label");
      text.setAttribute("x", routed.x.toFixed(1));
      text.setAttribute("y", (routed.y + 3).toFixed(1));
      text.setAttribute("text-anchor", "middle");
      text.textContent = routed.label;
      svg.appendChild(text);
    }
    canvas.insertBefore(svg, canvas.firstChild);
  }

  // dagre's layout of a region for its nodes' sizes; kept while the sizes stay the same
  // (browsing calls changes values, rarely sizes: the graph keeps its shape).
  const layouts = new Map();
  function layoutOf(rid, sizes) {
    const key = JSON.stringify(sizes), known = layouts.get(rid);
    if (known && known.key === key) return known;
    const graph = new dagre.graphlib.Graph({multigraph: true});
    graph.setGraph({rankdir: "TB", nodesep: 24, ranksep: 34, edgesep: 14, marginx: 6, marginy: 6});
    for (const [id, width, height] of sizes) graph.setNode(id, {width, height});
    regions[rid].edges.forEach(([source, target, label], index) => {
      graph.setEdge(source, target, {width: measure.measureText(label).width + 6, height: 12, labelpos: "c",
                                     label}, "e" + index);
    });
    dagre.layout(graph);
    const layout = {key, nodes: {}, edges: [], width: graph.graph().width, height: graph.graph().height};
    for (const [id] of sizes) layout.nodes[id] = graph.node(id);
    for (const edge of graph.edges()) {
      const routed = graph.edge(edge);
      layout.edges.push({from: edge.v, to: edge.w, points: routed.points, x: routed.x, y: routed.y,
                         label: routed.label});
    }
    layouts.set(rid, layout);
    return layout;
  }

  function renderRegion(rid, owner) {
    const box = el("div", "region");
    box.dataset.region = rid;
    box.addEventListener("click", event => event.stopPropagation());
    const head = el("div", "region-head");
    const collapsed = state.collapsed.has(rid);
    const toggle = el("button", "toggle", (collapsed ? "▸ " : "▾ ") + regions[rid].title);
    toggle.title = collapsed ? "expand this region" : "collapse this region";
    toggle.addEventListener("click", () => {
      if (collapsed) state.collapsed.delete(rid); else state.collapsed.add(rid);
      renderGraphs();
    });
    head.append(toggle, callNavigation(rid));
    if (collapsed) head.appendChild(el("span", null, `${regions[rid].steps.length} ops`));
    box.appendChild(head);
    owner.appendChild(box);
    if (!collapsed) renderCanvas(rid, box);
  }

  function stepNode(sid) {
    const step = steps[sid];
    const node = el("div", "node op");
    node.dataset.step = sid;
    if (step.file !== null) node.dataset.key = lineKey(step.file, step.line);
    const name = el("div", "opname", step.name);
    node.appendChild(name);
    for (const [kind, marker, symbol] of [["nonfinite", "nonfinite", "NaN/inf appears here"],
                                          ["divergence", "divergent", "first divergence"]]) {
      if (overlayStep[kind] === sid) {
        node.classList.add(marker);
        node.appendChild(el("div", "marker", "⚠ " + symbol));
      }
    }
    const where = [];
    if (step.line !== null) where.push("line " + step.line);
    if (step.hlo !== null) where.push("hlo " + step.hlo);
    if (where.length) node.appendChild(el("div", "where", where.join(" · ")));
    const record = currentRecord(sid);
    if (record && record.res) {
      for (const value of record.res) node.appendChild(el("div", "value", value.s));
    } else {
      node.appendChild(el("div", "value missing", record ? "did not finish" : step.types.join(", ") + " (not run)"));
    }
    if (step.calls !== null) {
      const link = el("div", "link", "→ @" + step.calls);
      link.addEventListener("click", event => {
        event.stopPropagation();
        const target = document.getElementById("section-" + step.calls);
        if (target) target.scrollIntoView({block: "start"});
      });
      node.appendChild(link);
    }
    node.addEventListener("click", event => { event.stopPropagation(); select({kind: "step", sid}); });
    return node;
  }

  // ------------------------------------------------------------------ selection

  function select(selection) {
    state.selection = selection;
    applySelection(true);
    refreshDetails();
  }

  // Marks what belongs to the selection: for a line, its jaxpr equations, ops and
  // nodes; for an op, its node and module line (selected), then the rest of its line.
  // Each panel scrolls to its first mark.
  function applySelection(scroll) {
    for (const node of document.querySelectorAll(".hl, .selected")) node.classList.remove("hl", "selected");
    const selection = state.selection;
    if (!selection) return;
    const firstOf = new Map();
    const mark = (element, className) => {
      if (!element || element.classList.contains("selected")) return;
      element.classList.add(className);
      const panel = element.closest("#python, #jaxpr, #stablehlo, #graphs");
      if (!firstOf.has(panel)) firstOf.set(panel, element);
    };
    const nodeOf = sid => document.querySelector(`.node[data-step="${sid}"]`);
    const rowOf = line => document.querySelector(`#stablehlo [data-hlo="${line}"]`);
    let key = null;
    if (selection.kind === "line") {
      key = lineKey(selection.file, selection.line);
    } else {
      const step = steps[selection.sid];
      mark(nodeOf(selection.sid), "selected");
      if (step.hlo !== null) mark(rowOf(step.hlo), "selected");
      if (step.file !== null) key = lineKey(step.file, step.line);
    }
    if (key !== null) {
      for (const row of document.querySelectorAll(`#python [data-key="${key}"]`))
        mark(row, selection.kind === "line" ? "selected" : "hl");
      for (const row of document.querySelectorAll(`#jaxpr [data-key="${key}"]`)) mark(row, "hl");
      for (const sid in steps) {
        const step = steps[sid];
        if (step.file === null || lineKey(step.file, step.line) !== key) continue;
        mark(nodeOf(sid), "hl");
        if (step.hlo !== null) mark(rowOf(step.hlo), "hl");
      }
    }
    if (scroll) for (const element of firstOf.values()) element.scrollIntoView({block: "nearest", inline: "nearest"});
  }

  function refreshDetails() {
    const details = document.getElementById("details");
    const selection = state.selection;
    if (!selection || selection.kind !== "step") {
      if (selection && selection.kind === "line") {
        details.textContent = "";
        const ops = Object.values(steps).filter(s => s.file === selection.file && s.line === selection.line);
        details.appendChild(el("h3", null, `${data.files[selection.file].name}:${selection.line}`));
        details.appendChild(el("p", null, ops.length ? `became ${ops.length} op(s):` : "no op came from this line"));
        const list = el("ul");
        for (const step of ops) {
          const item = el("li", "link", step.name + (step.hlo !== null ? ` (hlo line ${step.hlo})` : ""));
          item.addEventListener("click", () => select({kind: "step", sid: step.id}));
          list.appendChild(item);
        }
        details.appendChild(list);
      }
      return;
    }
    const step = steps[selection.sid];
    details.textContent = "";
    details.appendChild(el("h3", null, step.name));
    const list = el("dl");
    const add = (term, text) => { list.append(el("dt", null, term), el("dd", null, text)); };
    if (step.file !== null) add("Python", `${data.files[step.file].name}:${step.line}` +
                                          (step.function ? ` (${step.function})` : ""));
    if (step.jax) add("JAX name", step.jax);
    if (step.hlo !== null) add(`StableHLO line ${step.hlo}`, data.stablehlo[step.hlo - 1].trim());
    const runs = (recordsOfStep.get(selection.sid) || []).length;
    add("ran", `${runs} time${runs === 1 ? "" : "s"}`);
    const record = currentRecord(selection.sid);
    details.appendChild(list);
    if (!record) { details.appendChild(el("p", "hint", "not run in the call shown")); return; }
    if (record.c !== null) {
      const rid = step.region;
      const calls = callsOf(rid), index = Math.min(state.call[rid] || 0, calls.length - 1);
      details.appendChild(el("p", null, "shown: " + callText(rid, calls[index], index, calls.length)));
    }
    step.operands.forEach((operand, index) => {
      const value = valueIn(step.region, currentCall(step.region), operand);
      const block = el("div", "operand");
      block.append(el("dt", null, `operand #${index}` + (value ? `: ${value.t}` : "")),
                   el("dd", null, value ? value.s : "(a value of the enclosing region)"));
      details.appendChild(block);
    });
    if (!record.res) { details.appendChild(el("p", "hint", "the op did not finish")); return; }
    record.res.forEach((value, index) => {
      const block = el("div", "result");
      block.appendChild(el("dt", null, `result #${index}: ${value.t}`));
      block.appendChild(el("dd", null, value.s));
      if (value.full !== null) {
        const button = el("button", "show-full", "show all values");
        button.addEventListener("click", () => { button.replaceWith(el("pre", "full", value.full)); });
        block.appendChild(button);
      } else {
        block.appendChild(el("p", "hint", "too large to keep whole: summary only"));
      }
      details.appendChild(block);
    });
  }

  // Values not recorded as an op's result: what flowed into a region. ``ref`` is
  // [producer node, which result]; ``call`` the region's call ({p, c}); ``depth``
  // bounds the walk back through loop iterations.
  function valueIn(rid, call, ref, depth = 0) {
    if (!ref || !call || depth > 200) return null;
    const [producer, index] = ref;
    if (steps[producer]) {
      const record = (recordsOfStep.get(producer) || []).find(r => r.p === call.p && r.c === call.c);
      return record && record.res ? record.res[index] : null;
    }
    return inputValue(rid, call, regions[rid].inputs.findIndex(input => input.id === producer), depth + 1);
  }

  // Input ``k`` of region ``rid`` in a call: an argument of the entry function; the
  // calling op's operand for a called function; a captured value from outside; for a
  // while's cond and body, the loop's operand (iteration 0) or what the body returned
  // in the iteration before.
  function inputValue(rid, call, k, depth = 0) {
    const region = regions[rid], input = region.inputs[k];
    if (!input || !call) return null;
    if (rid === data.sections[0]) return data.records.arguments[k] || null;
    const caller = recordByNumber.get(call.p);
    if (!caller) return null;
    const callerStep = steps[caller.s], callerCall = {p: caller.p, c: caller.c};
    if (region.owner === null) return valueIn(callerStep.region, callerCall, callerStep.operands[k], depth);
    if (input.from !== undefined) return valueIn(callerStep.region, callerCall, input.from, depth);
    if (callerStep.op !== "stablehlo.while") return null;
    const argument = k - region.inputs.filter(i => i.from !== undefined).length;
    if (call.c === 0) return valueIn(callerStep.region, callerCall, callerStep.operands[argument], depth);
    const body = regions[callerStep.regions[1]];
    return valueIn(body.id, {p: call.p, c: call.c - 1}, body.ret.sources[argument], depth);
  }

  function showReport(text) {
    const details = document.getElementById("details");
    details.textContent = "";
    details.appendChild(el("div", "report", text));
  }

  // Shows a record: the calls around it chosen, its regions expanded, its op selected.
  function showRecord(number, report) {
    const chain = [];
    for (let record = recordByNumber.get(number); record; record = recordByNumber.get(record.p)) {
      chain.unshift(record);
      if (record.p === null) break;
    }
    for (const record of chain) {
      const rid = steps[record.s].region;
      if (regions[rid].owner !== null) state.collapsed.delete(rid);
      const index = callsOf(rid).findIndex(call => call.p === record.p && call.c === record.c);
      state.call[rid] = Math.max(index, 0);
    }
    const sid = recordByNumber.get(number).s;
    renderGraphs();
    select({kind: "step", sid});
    const node = document.querySelector(`.node[data-step="${sid}"]`);
    if (node) node.scrollIntoView({block: "center", inline: "center"});
    if (report) document.getElementById("details").appendChild(el("div", "report", report));
  }

  // ------------------------------------------------------------------ search

  function search(query) {
    for (const node of document.querySelectorAll(".node.match")) node.classList.remove("match");
    query = query.trim().toLowerCase();
    state.matches = [];
    state.matchIndex = -1;
    if (query) {
      const number = /^\d+$/.test(query) ? Number(query) : null;
      state.matches = Object.keys(steps).filter(sid => number !== null ?
        steps[sid].line === number || steps[sid].hlo === number : steps[sid].name.toLowerCase().includes(query));
    }
    markMatches();
    document.getElementById("search-count").textContent = query ? `${state.matches.length} match` +
      (state.matches.length === 1 ? "" : "es") : "";
  }

  function markMatches() {
    for (const sid of state.matches) {
      const node = document.querySelector(`.node[data-step="${sid}"]`);
      if (node) node.classList.add("match");
    }
  }

  function nextMatch() {
    if (!state.matches.length) return;
    state.matchIndex = (state.matchIndex + 1) % state.matches.length;
    const sid = state.matches[state.matchIndex];
    let expanded = false;
    for (let rid = steps[sid].region; regions[rid].owner !== null; rid = steps[regions[rid].owner].region) {
      if (state.collapsed.delete(rid)) expanded = true;
    }
    if (expanded) renderGraphs();
    select({kind: "step", sid});
    const node = document.querySelector(`.node[data-step="${sid}"]`);
    if (node) node.scrollIntoView({block: "center", inline: "center"});
  }

  renderTexts();
  renderBanners();
  renderGraphs();
  const box = document.getElementById("search");
  box.addEventListener("input", () => search(box.value));
  box.addEventListener("keydown", event => { if (event.key === "Enter") nextMatch(); });
  window.explorer = {data, select, showRecord, state};
})();
