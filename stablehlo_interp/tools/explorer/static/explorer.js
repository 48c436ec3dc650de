// The stablehlo-interp lowering explorer. The data (sources, module, plan, run) is the
// JSON above; dagre lays out each graph (a region's top, or an opened group's contents)
// when it is first shown, and keeps the layout; everything else is plain DOM.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("explorer-data").textContent);
  // XLA's optimized program as a graph (data.xla.graph, with xla_stages=True: xla_graph.py)
  // is drawn by the same code as StableHLO's: its regions, steps and groups (its fusions)
  // join the page's, with ids of their own ("xr", "x", "xg").
  const xlaGraph = data.xla && !data.xla.error && data.xla.graph ? data.xla.graph : null;
  const steps = Object.assign({}, data.steps), regions = Object.assign({}, data.regions);
  const groups = Object.assign({}, data.groups);
  if (xlaGraph) addXlaGraph(xlaGraph);
  const sections = data.sections.concat(xlaGraph ? xlaGraph.sections : []);
  const records = data.records.ops;
  const recordByNumber = new Map(records.map(r => [r.n, r]));
  // A per-device run (data.devices): every record names its device, and the page shows
  // the records of one device at a time (state.device).
  const devices = data.devices || null;
  const recordsOfStep = new Map();
  // A region's calls ("activations"): each distinct (op record it ran under, call number).
  const callsOfRegion = new Map();
  function indexRecords(device) {
    recordsOfStep.clear();
    callsOfRegion.clear();
    for (const r of records) {
      if (devices && r.d !== device) continue;
      if (!recordsOfStep.has(r.s)) recordsOfStep.set(r.s, []);
      recordsOfStep.get(r.s).push(r);
      const rid = steps[r.s].region;
      if (!callsOfRegion.has(rid)) callsOfRegion.set(rid, {list: [], seen: new Set()});
      const entry = callsOfRegion.get(rid), key = r.p + ":" + r.c;
      if (!entry.seen.has(key)) { entry.seen.add(key); entry.list.push({p: r.p, c: r.c}); }
    }
  }
  indexRecords(0);
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
  // A per-device comparison's findings: each op that made a result that differs, with
  // the devices where it differs (and how), marked as the first divergence is.
  const divergentSteps = new Map();
  const divergenceFindings = (data.overlays.divergence && data.overlays.divergence.findings) || [];
  for (const finding of divergenceFindings) {
    if (finding.s === null) continue;
    if (!divergentSteps.has(finding.s)) divergentSteps.set(finding.s, []);
    divergentSteps.get(finding.s).push(finding);
  }
  const findingDevices = findings => [...new Set(findings.map(f => f.d))].join(", ");
  const collectiveOfStep = new Map(devices ? devices.collectives.map(c => [c.s, c]) : []);
  const sum = list => list.reduce((a, b) => a + b, 0);
  const stepsOfLine = new Map();
  for (const sid in steps) {
    if (steps[sid].file === null) continue;
    const key = lineKey(steps[sid].file, steps[sid].line);
    if (!stepsOfLine.has(key)) stepsOfLine.set(key, []);
    stepsOfLine.get(key).push(sid);
  }
  const groupsOfLine = new Map();   // a call site -> the groups (calls) made there
  for (const gid in groups) {
    const where = groups[gid].where;
    if (where === null) continue;
    const key = lineKey(where.file, where.line);
    if (!groupsOfLine.has(key)) groupsOfLine.set(key, []);
    groupsOfLine.get(key).push(gid);
  }
  const totalSteps = Object.keys(data.steps).length;
  const COLLAPSED_ABOVE = 200;   // ops: a larger program opens with its op regions and groups collapsed
  const MAX_PORTS = 8;           // an opened group draws each outside producer apart up to this many
  const small = totalSteps <= COLLAPSED_ABOVE;
  const xlaSmall = !xlaGraph || Object.keys(xlaGraph.steps).length <= COLLAPSED_ABOVE;
  const state = {
    // (XLA's fusions start closed, each one kernel: open one to see its instructions)
    collapsed: new Set(Object.values(regions).filter(r => r.owner !== null && !(r.xla ? xlaSmall : small)).map(r => r.id)),
    open: new Set(small ? Object.keys(data.groups) : []),   // the groups shown opened
    call: {},           // region id -> index of the shown call among its calls
    device: 0,          // in a per-device run: the device whose values are shown
    selection: null,    // {kind: "step", sid} or {kind: "line", file, line}
    matches: [], matchIndex: -1,
  };
  const measure = document.createElement("canvas").getContext("2d");
  measure.font = "10px monospace";

  function lineKey(file, line) { return file + ":" + line; }

  // XLA's graph in the page's shape: each step as the page's are (``xla``: its line in the
  // XLA panel; ``value``: the StableHLO step whose value it shows, else ``why`` not), each
  // region's edges from its steps' operands and its return (as page_data.py makes StableHLO's).
  // (xla_graph.py keeps them compact: a step's id and region, a fusion's path, and the
  // fields they do not have are filled in here.)
  function addXlaGraph(graph) {
    const why = index => index === undefined ? null : graph.reasons[index];
    for (const rid in graph.regions) {
      for (const sid of graph.regions[rid].steps) {
        const s = graph.steps[sid];
        steps[sid] = {id: sid, region: rid, group: s.group || null, name: s.op, op: s.op, file: s.f ? s.f[0] : null,
                      line: s.f ? s.f[1] : null, function: null, jax: null, types: [s.t], regions: s.r || [],
                      calls: null, hlo: null, operands: s.o.map(id => [id, 0]), xla: s.l, instruction: s.name,
                      value: s.v || null, why: why(s.w), run: s.run || null, runWhy: why(s.rw)};
      }
    }
    Object.assign(regions, graph.regions);
    for (const rid in graph.regions) {
      const region = regions[rid], inputs = new Map(region.inputs.map(input => [input.id, input.type]));
      const typeOf = id => steps[id] ? steps[id].types[0] : inputs.get(id);
      region.xla = true;
      region.edges = [];
      for (const sid of region.steps)
        for (const producer of new Set(steps[sid].operands.map(operand => operand[0])))
          region.edges.push([producer, sid, typeOf(producer)]);
      for (const [producer] of region.ret.sources) region.edges.push([producer, region.ret.id, typeOf(producer)]);
    }
    for (const gid in graph.groups) {
      const group = Object.assign({where: null, file: null, pass: null}, graph.groups[gid]);
      if (group.xla !== undefined)
        Object.assign(group, {path: `${group.title}: ${group.kind || "a"} fusion of ${group.ops} instruction(s)`,
                              value: group.v || null, why: why(group.w), run: group.run || null, runWhy: why(group.rw)});
      groups[gid] = group;
    }
  }
  // ``model.py:8``: a step's (or a call site's) file, as the Python panel names it, and line.
  function sourceOf(at) { return `${data.files[at.file].name}:${at.line}`; }
  // A group's title, with the pass of a gradient it is part of (``loss_fn, backward pass``).
  function groupLabel(gid) { return groups[gid].title + (groups[gid].pass ? ", " + groups[gid].pass : ""); }

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

  const hloRows = [];   // line number -> its row in the StableHLO panel

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
      hloRows[number] = row;
      row.append(el("span", "no", String(number)), el("span", "text", text));
      const owners = stepsOfHloLine.get(number);
      if (owners) {
        row.dataset.step = owners[0];
        row.addEventListener("click", () => select({kind: "step", sid: owners[0]}));
      }
      hlo.appendChild(row);
    });
    if (data.xla) renderXla();
    const marked = [["nonfinite", overlayStep.nonfinite], ["divergence", overlayStep.divergence],
                    ...[...divergentSteps.keys()].map(sid => ["divergence", sid])];
    for (const [kind, sid] of marked) {
      if (sid === undefined) continue;
      const marker = kind === "nonfinite" ? "nonfinite" : "divergent";
      const step = steps[sid];
      if (step.hlo !== null) hloRows[step.hlo].classList.add(marker);
      if (step.file !== null)
        for (const row of document.querySelectorAll(`#python [data-key="${lineKey(step.file, step.line)}"]`))
          row.classList.add(marker);
    }
  }

  // XLA's optimized program (data.xla, with xla_stages=True), after the StableHLO panel:
  // each line linked, as a jaxpr line is, to the Python lines it computes (``keys``; a
  // fusion's: those of the instructions it fused), and selecting the first of them.
  const xlaRows = [];   // line index -> its row in the XLA panel
  const collectiveLines = new Set(((data.xla && data.xla.collectives) || []).map(c => c.line));
  function renderXla() {
    const section = el("section");
    section.id = "xla-panel";
    const heading = el("h2", null, data.xla.error ? "XLA CPU" : "XLA CPU: ");
    heading.title = data.xla.error ? "" : `the program as XLA's last stage left it (${data.xla.stage})`;
    section.appendChild(heading);
    if (!data.xla.error) heading.appendChild(stageNavigation());
    const code = el("div", "code");
    code.id = "xla";
    if (data.xla.error) code.appendChild(el("div", "gap", data.xla.error));
    else data.xla.lines.forEach((entry, index) => {
      const row = el("div", "line");
      xlaRows[index] = row;
      if (collectiveLines.has(index)) row.classList.add("collective");
      row.append(el("span", "no", String(index + 1)), el("span", "text", entry.text));
      if (entry.keys.length) {
        row.dataset.keys = entry.keys.map(([file, line]) => lineKey(file, line)).join(" ");
        row.title = entry.keys.map(([file, line]) => sourceOf({file, line})).join(", ");
        const [file, line] = entry.keys[0];
        row.addEventListener("click", () => select({kind: "line", file, line}));
      }
      code.appendChild(row);
    });
    const stage = el("div", "code");
    stage.id = "xla-stage";
    stage.hidden = true;
    section.append(code, stage);
    document.getElementById("stablehlo-panel").after(section);
  }

  // Stepping through XLA's pipeline in the XLA panel: stage ``k`` is the program after
  // the k-th pass of the passes list (0: before any; the last: the optimized program,
  // whose lines are linked). A stage's text is the last one's with the passes after it
  // undone (data kept apart in the page, read on first use: xla_stages.stages_back),
  // the lines its own pass added or changed marked.
  const xlaStage = {shown: null, texts: new Map()};
  function stageNavigation() {
    const span = el("span", "calls");
    const previous = el("button", "prev", "◀"), next = el("button", "next", "▶");
    previous.title = "the program before this pass"; next.title = "the program after the next pass";
    previous.addEventListener("click", () => stepToStage(xlaStage.shown - 1));
    next.addEventListener("click", () => stepToStage(xlaStage.shown + 1));
    span.append(el("span", "stage-text", ""), " ", previous, next);
    xlaStage.navigation = span;
    xlaStage.shown = data.xla.passes.length;
    updateStageNavigation();
    return span;
  }
  function updateStageNavigation() {
    const last = data.xla.passes.length, shown = xlaStage.shown;
    xlaStage.navigation.querySelector(".stage-text").textContent = shown === last ? "the optimized program" :
      (shown === 0 ? "the program before any pass" : `after ${data.xla.passes[shown - 1].name}`) +
      ` (stage ${shown} of ${last})`;
    xlaStage.navigation.querySelector(".prev").disabled = shown === 0;
    xlaStage.navigation.querySelector(".next").disabled = shown === last;
  }
  function stepToStage(k) {
    if (k >= 1) showXlaPass(k - 1); else { showXlaPasses(); showXlaStage(0); }
  }
  function stageText(k) {
    if (!xlaStage.back) xlaStage.back = JSON.parse(document.getElementById("explorer-stages").textContent);
    const back = xlaStage.back;
    let start = back.length, text = data.xla.lines.map(line => line.text);
    for (let pass = k; pass < back.length; pass++)
      if (xlaStage.texts.has(pass)) { start = pass; text = xlaStage.texts.get(pass); break; }
    for (let pass = start - 1; pass >= k; pass--) {
      text = text.slice();
      for (let h = back[pass].length - 1; h >= 0; h--) text.splice(back[pass][h][0], back[pass][h][1], ...back[pass][h][2]);
      xlaStage.texts.set(pass, text);
    }
    return {text, added: k >= 1 ? back[k - 1] : []};
  }
  function showXlaStage(k) {
    const code = document.getElementById("xla"), stage = document.getElementById("xla-stage");
    const last = k === data.xla.passes.length;
    xlaStage.shown = k;
    updateStageNavigation();
    code.hidden = !last;
    stage.hidden = last;
    if (last) return;
    const {text, added} = stageText(k), marked = new Set();
    for (const [start, count] of added) for (let line = start; line < start + count; line++) marked.add(line);
    stage.textContent = "";
    text.forEach((line, index) => {
      const row = el("div", "line" + (marked.has(index) ? " added" : ""));
      row.append(el("span", "no", String(index + 1)), el("span", "text", line));
      stage.appendChild(row);
    });
    const first = stage.querySelector(".added");
    if (first) first.scrollIntoView({block: "center", inline: "nearest"});
  }

  // The instructions of XLA's optimized program that compute a Python line (its own, or
  // a fusion of it): named in a line's details.
  function showXlaOfLine(key, details) {
    const computing = [...data.xla.lines.keys()].filter(
      index => data.xla.lines[index].keys.some(([file, line]) => lineKey(file, line) === key));
    details.appendChild(el("p", null, computing.length ? `in XLA's optimized program, ${computing.length} instruction(s):` :
                                      "nothing in XLA's optimized program computes it"));
    const list = el("ul", "xla-instructions");
    for (const index of computing) {
      const item = el("li", "link", data.xla.lines[index].text.trim().split(" = ")[0]);
      item.addEventListener("click", () => selectXlaLine(index));
      list.appendChild(item);
    }
    details.appendChild(list);
  }

  // Selects the step or fusion of XLA line ``index`` in the graph (the fusions around it
  // opened), else scrolls the XLA panel to the line.
  function selectXlaLine(index) {
    const id = xlaItemOfLine.get(index);
    if (id === undefined) { xlaRows[index].scrollIntoView({block: "center", inline: "nearest"}); return; }
    if (reveal(id)) renderGraphs();
    select(steps[id] ? {kind: "step", sid: id} : {kind: "group", gid: id});
    const node = shownNodes.get(id);
    if (node) node.scrollIntoView({block: "center", inline: "center"});
  }
  const xlaItemOfLine = new Map([...Object.values(steps), ...Object.values(groups)]
    .filter(item => item.xla !== undefined).map(item => [item.xla, item.id]));

  // The collectives of XLA's per-device program (data.xla.collectives): each instruction
  // once, with the bytes all devices send and receive in all its runs (a loop's: its trip
  // count times), then device by device; a row scrolls the XLA panel to its line.
  function showXlaCollectives() {
    const details = document.getElementById("details");
    details.textContent = "";
    details.appendChild(el("h3", null, "Collectives of XLA's per-device program"));
    details.appendChild(el("p", "hint", "each instruction once, with the bytes of all its runs in one run of the " +
                                        "program (×N: a loop runs it N times): a device sends its operands and " +
                                        "receives the result (a permute's: only as a source, only as a target)"));
    const scrollTo = c => {
      for (const row of document.querySelectorAll("#xla .line.selected")) row.classList.remove("selected");
      xlaRows[c.line].classList.add("selected");
      xlaRows[c.line].scrollIntoView({block: "center", inline: "nearest"});
    };
    if (!data.xla.collectives.length) { details.appendChild(el("p", null, "no collective")); return; }
    details.appendChild(collectivesSummary(data.xla.collectives, c => data.xla.lines[c.line].text.trim(), scrollTo));
    const table = el("table", "traffic by-device");
    const head = el("tr");
    head.append(el("th", null, "device"),
                ...data.xla.collectives.map(c => el("th", null, c.name + (c.times > 1 ? ` ×${c.times}` : ""))));
    table.appendChild(head);
    data.xla.collectives[0].sent.forEach((_, device) => {
      const row = el("tr");
      row.append(el("td", null, String(device)), ...data.xla.collectives.map(
        c => el("td", null, c.uncounted ? "?" : `${c.sent[device]}/${c.received[device]}`)));
      table.appendChild(row);
    });
    details.append(el("p", null, "sent/received, device by device:"), table);
  }

  // The passes that changed the program, in order: what each removed and added, its
  // verdict where si.passes ran its stage, the one that changed the values marked.
  function showXlaPasses() {
    const details = document.getElementById("details");
    details.textContent = "";
    if (data.xla.error) { details.appendChild(el("div", "report", data.xla.error)); return; }
    details.appendChild(el("h3", null, "XLA CPU's passes that changed the program"));
    details.appendChild(el("p", "hint", `of ${data.xla.stages} stages dumped, in order: the HLO instructions each ` +
                                        "removed and added (click one for them), its verdict where it was run"));
    const list = el("ol", "xla-passes");
    data.xla.passes.forEach((entry, index) => {
      const item = el("li", "link" + (entry.values ? " changes-values" : ""),
                      `${entry.name}: −${entry.removed} +${entry.added}` + (entry.verdict ? ` (${verdictText(entry)})` : ""));
      if (entry.values) item.appendChild(el("span", "marker", " ⚠ changed the values"));
      item.addEventListener("click", () => showXlaPass(index));
      list.appendChild(item);
    });
    details.appendChild(list);
    if (data.xla.report) details.appendChild(el("div", "report", data.xla.report));
  }

  // si.passes' verdict on a stage it ran: its values against the original program's (every
  // stage after the first that changed them differs too).
  function verdictText(entry) {
    return {"keeps the values": "the original's values", "changes the values": "values other than the original's",
            "not run": "not run on the interpreter"}[entry.verdict] || entry.verdict;
  }

  function showXlaPass(index) {
    const entry = data.xla.passes[index], details = document.getElementById("details");
    details.textContent = "";
    showXlaStage(index + 1);
    const back = el("p", "link", "◀ all passes");
    back.addEventListener("click", showXlaPasses);
    details.append(back, el("h3", null, entry.name));
    if (entry.values) details.appendChild(el("p", "marker", "⚠ the first pass after which the program computes something else"));
    if (entry.verdict) details.appendChild(el("p", null, verdictText(entry) + (entry.reason ? `: ${entry.reason}` : "")));
    const shown = entry.changes.length < entry.removed + entry.added ? " (the first of each shown)" : "";
    details.appendChild(el("p", null, `removed ${entry.removed}, added ${entry.added} instruction(s)${shown}:`));
    for (const [side, instruction, source] of entry.changes) {
      const change = el("div", "xla-change " + (side === "-" ? "removed" : "added"), `${side} ${instruction}`);
      if (source) change.appendChild(el("div", "hint", source));
      details.appendChild(change);
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
    const where = sid => steps[sid].name + (steps[sid].file !== null ? " at " + sourceOf(steps[sid]) : "");
    const nonfinite = data.overlays.nonfinite;
    if (nonfinite) {
      const sid = overlayStep.nonfinite;
      add("nonfinite", "non-finite result from: " + (sid ? where(sid) : nonfinite.label || "?"), nonfinite.text,
          sid ? () => showRecord(nonfinite.record, nonfinite.text) : null);
    }
    const divergence = data.overlays.divergence;
    if (divergence && divergence.ok) add("agree", "agrees with the backend", divergence.text, null);
    else if (divergence && divergence.devices) {
      add("divergence", "differs on device " + divergence.devices.join(", "), divergence.text, () => {
        if (overlayStep.divergence) showRecord(divergence.record, divergence.text);
        else { showDevice(divergence.devices[0]); showReport(divergence.text); }
      });
    } else if (divergence) {
      const sid = overlayStep.divergence;
      add("divergence", "first divergence: " + (sid ? where(sid) : "(see details)"), divergence.text,
          () => sid ? showRecord(divergence.record, divergence.text) : showReport(divergence.text));
    }
    if (devices) renderDevices(add);
    if (data.xla && data.xla.collectives) {
      const bytes = sum(data.xla.collectives.map(c => sum(c.sent)));
      add("xla-collectives", `XLA collectives: ${data.xla.collectives.length} · ${bytes} bytes sent`,
          "the collectives of XLA's per-device program, each once, and the bytes each device sends there",
          showXlaCollectives);
    }
    if (data.xla) {
      const changed = data.xla.error ? null : data.xla.passes.find(entry => entry.values);
      add(changed ? "xla changes-values" : "xla", data.xla.error ? "XLA's stages: not had" :
          `XLA: ${data.xla.passes.length} passes` + (changed ? ` · values changed by ${changed.pass}` : ""),
          data.xla.report || data.xla.error || "", showXlaPasses);
    }
    if (!data.ran) add("agree", "structure only: not run (no arguments given)", "", null);
    if (data.error) add("error", "the run failed", data.error, () => showReport(data.error));
    if (data.records.total > records.length)
      add("error", `first ${records.length} of ${data.records.total} ops kept`, "a long run keeps its first ops", null);
  }

  // The device chooser and the collectives' bytes, for a per-device run.
  function renderDevices(add) {
    const chooser = el("select");
    chooser.id = "device";
    chooser.title = "whose values the page shows: each device ran the per-device program on its shards";
    for (let device = 0; device < devices.count; device++) {
      const option = el("option", null, "device " + device);
      option.value = String(device);
      chooser.appendChild(option);
    }
    chooser.addEventListener("change", () => showDevice(Number(chooser.value)));
    document.getElementById("banners").appendChild(chooser);
    const bytes = sum(devices.collectives.map(c => sum(c.sent)));
    add("collectives", `collectives: ${devices.collectives.length} · ${bytes} bytes sent`,
        "the bytes each device sent and received at each collective", showCollectives);
  }

  function showDevice(device) {
    state.device = device;
    state.call = {};
    document.getElementById("device").value = String(device);
    indexRecords(device);
    renderGraphs();
    refreshDetails();
  }

  function showCollectives() {
    const details = document.getElementById("details");
    details.textContent = "";
    details.appendChild(el("h3", null, "Bytes each device sent and received"));
    if (!devices.collectives.length) { details.appendChild(el("p", null, "no collective ran")); return; }
    details.appendChild(el("p", "hint", "a device sends the operands it hands to a collective and receives " +
      "its results (a collective_permute's or collective_broadcast's: only as a source, only as a target); " +
      "the bytes the program moves, not a network's hops"));
    details.appendChild(collectivesSummary(devices.collectives, c => c.label,
                                           c => { if (c.s) select({kind: "step", sid: c.s}); }));
    for (const collective of devices.collectives) {
      const title = el("p", "link", collective.label);
      if (collective.s) title.addEventListener("click", () => select({kind: "step", sid: collective.s}));
      const table = el("table", "traffic");
      const head = el("tr");
      head.append(el("th", null, "device"), el("th", null, "sent"), el("th", null, "received"));
      table.appendChild(head);
      collective.sent.forEach((sent, device) => {
        const row = el("tr", device === state.device ? "shown" : null);
        row.dataset.device = String(device);
        row.append(el("td", null, String(device)), el("td", null, String(sent)),
                   el("td", null, String(collective.received[device])));
        row.addEventListener("click", () => showDevice(device));
        table.appendChild(row);
      });
      const total = el("tr", "total");
      total.append(el("td", null, "in all"), el("td", null, String(collective.sent.reduce((a, b) => a + b, 0))),
                   el("td", null, String(collective.received.reduce((a, b) => a + b, 0))));
      table.appendChild(total);
      details.append(title, table);
    }
  }

  // One row per collective op (``title`` its row's tooltip, ``open`` its click): how many
  // times it ran on all devices (where counted: ``runs``) and the bytes all devices sent
  // and received there; then the sums.
  function collectivesSummary(entries, title, open) {
    const counted = entries.length && entries[0].runs !== undefined;
    const table = el("table", "traffic summary");
    const row = (className, cells) => {
      const tr = el("tr", className);
      tr.append(...cells.map(cell => el(className === "head" ? "th" : "td", null, String(cell))));
      table.appendChild(tr);
      return tr;
    };
    const runs = counted ? [c => sum(c.runs)] : [];
    row("head", ["collective", ...(counted ? ["runs"] : []), "sent", "received"]);
    for (const c of entries) {
      const tr = row(null, [c.op, ...runs.map(f => f(c)), c.uncounted ? "?" : sum(c.sent),
                            c.uncounted ? "?" : sum(c.received)]);
      tr.title = title(c) + (c.uncounted ? `\nnot counted: ${c.uncounted}` : "");
      tr.addEventListener("click", () => open(c));
    }
    row("total", ["in all", ...runs.map(f => sum(entries.map(f))), sum(entries.map(c => sum(c.sent))),
                  sum(entries.map(c => sum(c.received)))]);
    return table;
  }

  // ------------------------------------------------------------------ graphs

  const shownNodes = new Map();   // step, group or port id -> its node, as drawn now

  // The drawn node that shows step ``sid``: its own, else that of the collapsed group
  // or region (its op's node) it is in.
  function shownNodeOf(sid) {
    for (let id = sid; id !== null && id !== undefined;) {
      if (shownNodes.has(id)) return shownNodes.get(id);
      const item = steps[id] || groups[id];
      const parent = steps[id] ? item.group : item.parent;
      id = parent !== null ? parent : regions[item.region].owner;
    }
    return null;
  }

  // Opens the groups and regions around step (or group) ``sid``; whether any was closed.
  function reveal(sid) {
    let changed = false;
    for (let id = sid; id !== null;) {
      const item = steps[id] || groups[id];
      const parent = steps[id] ? item.group : item.parent;
      if (parent !== null) {
        if (!state.open.has(parent)) { state.open.add(parent); changed = true; }
        id = parent;
      } else {
        if (state.collapsed.delete(item.region)) changed = true;
        id = regions[item.region].owner;
      }
    }
    return changed;
  }

  // Opens group ``gid`` (and those around it) and scrolls to it.
  function openGroup(gid) {
    reveal(gid);
    state.open.add(gid);
    renderGraphs();
    shownNodes.get(gid).scrollIntoView({block: "start", inline: "nearest"});
  }

  function renderGraphs() {
    const graphs = document.getElementById("graphs");
    shownNodes.clear();
    const scroll = [graphs.scrollLeft, graphs.scrollTop];
    graphs.textContent = "";
    for (const rid of sections) {
      const section = el("section");
      section.dataset.region = rid;
      section.id = regions[rid].xla ? "xla-graph" : "section-" + regions[rid].title.slice(1);
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
    if (regions[rid].xla) {      // XLA's program is not run here: its values are the StableHLO ops' it names
      if (regions[rid].owner === null) span.textContent = "(its optimized program: open a fusion to see its instructions)";
      return span;
    }
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

  // The item of the graph of group ``gid`` (null: the region's top) that holds ``id``
  // (a step; a region's inputs and return are at its top): the step or the group
  // around it just inside ``gid``; null when ``id`` is outside ``gid``.
  function itemIn(id, gid) {
    if (!steps[id]) return gid === null ? id : null;
    let item = id;
    for (let parent = steps[id].group; parent !== gid; parent = groups[parent].parent) {
      if (parent === null) return null;
      item = parent;
    }
    return item;
  }

  // The groups around a step, innermost first.
  function groupsAround(id) {
    const chain = [];
    for (let gid = steps[id] ? steps[id].group : null; gid !== null; gid = groups[gid].parent) chain.push(gid);
    return chain;
  }

  // Per group of a region: how many distinct values flow in and out (one pass over its edges).
  const flowsOfRegion = new Map();
  function flowsOf(rid) {
    if (flowsOfRegion.has(rid)) return flowsOfRegion.get(rid);
    const flows = {};
    const add = (gid, kind, value) => {
      if (!flows[gid]) flows[gid] = {in: new Set(), out: new Set()};
      flows[gid][kind].add(value);
    };
    for (const [source, target] of regions[rid].edges) {
      const from = groupsAround(source), to = groupsAround(target);
      for (const gid of to) if (!from.includes(gid)) add(gid, "in", source);
      for (const gid of from) if (!to.includes(gid)) add(gid, "out", source);
    }
    flowsOfRegion.set(rid, flows);
    return flows;
  }

  // The graph of group ``gid`` of region ``rid`` (null: the region's top, its inputs
  // one node when there are more than MAX_PORTS): the edges between its items, those that come from outside (``ports``: each producer apart,
  // or one node for all when there are more than MAX_PORTS) and those that leave
  // (to one ``out`` node). Edges between the same two items are drawn once, labelled
  // with the type of the value, or how many values.
  const graphOfGroup = new Map();
  function graphOf(rid, gid) {
    const key = rid + "/" + gid;
    if (graphOfGroup.has(key)) return graphOfGroup.get(key);
    const ends = [];
    const outside = new Map();    // producer outside -> its type
    const inputsTogether = gid === null && regions[rid].inputs.length > MAX_PORTS;
    const item = id => inputsTogether && !steps[id] && id !== regions[rid].ret.id ? rid + ":inputs" : itemIn(id, gid);
    for (const [source, target, label] of regions[rid].edges) {
      const from = item(source), to = item(target);
      if (from === to || (from === null && to === null)) continue;
      if (from === null) outside.set(source, label);
      ends.push([from, to, source, label]);
    }
    const together = outside.size > MAX_PORTS;
    const ports = together ? [{id: gid + ":in", name: `${outside.size} values from outside`, type: ""}] :
      [...outside].map(([source, type]) => ({id: gid + ":in:" + source, name: "from " + nameOf(rid, source), type}));
    const merged = new Map();
    let leaves = false;
    for (const [from, to, source, label] of ends) {
      const start = from !== null ? from : together ? gid + ":in" : gid + ":in:" + source;
      const end = to !== null ? to : gid + ":out";
      leaves = leaves || to === null;
      const edgeKey = start + "\n" + end;
      if (!merged.has(edgeKey)) merged.set(edgeKey, {from: start, to: end, values: new Map()});
      merged.get(edgeKey).values.set(source, label);
    }
    const edges = [...merged.values()].map(({from, to, values}) => {
      const types = [...values.values()];
      return [from, to, types.length === 1 ? types[0] : new Set(types).size === 1 ? `${types.length} × ${types[0]}` :
                        `${types.length} values`];
    });
    const graph = {ports, edges, leaves};
    graphOfGroup.set(key, graph);
    return graph;
  }
  function nameOf(rid, id) {
    if (steps[id]) return steps[id].xla !== undefined ? "%" + steps[id].instruction : steps[id].name;
    return regions[rid].inputs.find(input => input.id === id).name;
  }

  // Draws the graph of group ``gid`` of region ``rid`` (null: the region's top) inside
  // ``parent``: each node is measured (an opened group or region holds its own graph,
  // drawn first), then dagre places the nodes and routes the edges (with their labels
  // as nodes of their own, so labels do not overlap), and the canvas takes the size
  // of the laid-out graph.
  function renderCanvas(rid, parent, gid = null) {
    const region = regions[rid];
    const canvas = el("div", "canvas");
    canvas.dataset.region = rid;
    if (gid !== null) canvas.dataset.group = gid;
    parent.appendChild(canvas);
    const nodes = [];
    const call = currentCall(rid);
    const graph = graphOf(rid, gid);
    const add = (id, node) => { canvas.appendChild(node); nodes.push([id, node]); shownNodes.set(id, node); };
    if (gid === null && region.inputs.length > MAX_PORTS) {
      add(rid + ":inputs", portNode("input", rid + ":inputs", `${region.inputs.length} inputs`, region.input_summary ||
                                    `${region.inputs[0].name} … ${region.inputs[region.inputs.length - 1].name}`));
    } else if (gid === null) {
      region.inputs.forEach((input, index) => {
        const value = inputValue(rid, call, index);
        const node = portNode("input", input.id, input.name, value ? value.s : input.type);
        if (region.owner === null) node.title = `%arg${index}`;    // a function's argument, as the module names it
        add(input.id, node);
      });
    } else {
      for (const port of graph.ports) add(port.id, portNode("input port", port.id, port.name, port.type));
    }
    for (const item of gid === null ? region.items : groups[gid].items) {
      if (steps[item]) {
        const node = stepNode(item);
        add(item, node);
        for (const inner of steps[item].regions) renderRegion(inner, node);
      } else {
        const node = groupNode(rid, item);
        add(item, node);
        if (state.open.has(item)) renderCanvas(rid, node, item);   // measured in place
      }
    }
    if (gid === null) add(region.ret.id, portNode("ret", region.ret.id, "return", returnText(region.ret)));
    else if (graph.leaves) add(gid + ":out", portNode("ret port", gid + ":out", "to outside", ""));
    const sizes = nodes.map(([id, node]) => [id, node.offsetWidth, node.offsetHeight]);
    const layout = layoutOf(rid + "/" + gid, sizes, graph.edges);
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
    const marker = `arrow-${rid}-${gid}`;
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

  // What a function returns: its results' types (with the names of its pytree's
  // paths where the program gives them), or how many and, in a few names, what.
  function returnText(ret) {
    const count = ret.types.length, names = ret.names || [];
    if (count > MAX_PORTS) return `${count} results` + (ret.summary ? ": " + ret.summary : "");
    return ret.types.map((type, index) => names[index] && names[index] !== "result" ? `${names[index]}: ${type}` : type)
      .join(", ") || "()";
  }

  function portNode(kind, id, name, text) {
    const node = el("div", "node " + kind);
    node.dataset.node = id;
    node.append(el("div", "opname", name), el("div", "value", text));
    return node;
  }

  // The value an XLA step or fusion shows: the one it computed when the interpreter ran
  // XLA's program (xla_values.py), else (``≙``) the interpreter's value of the StableHLO op it
  // computes (xla_graph.py says when there is one), else its type.
  function xlaValueLine(item) {
    const value = item.run || xlaValueOf(item);
    const line = el("div", value ? "value" : "value missing",
                    item.run ? item.run.s : value ? "≙ " + value.s : item.types ? item.types[0] : item.t);
    line.title = item.run ? "computed by XLA's optimized program, run on the interpreter" :
                 value ? `the interpreter's value of StableHLO op ${steps[item.value].name}` : item.why || "";
    return line;
  }
  function xlaValueOf(item) {
    const record = item.value ? (recordsOfStep.get(item.value) || [])[0] : null;
    return record && record.res ? record.res[0] : null;
  }

  // A group: collapsed, its title, size and flows (click: open); opened, the same
  // head (click: close) over its graph (drawn by the caller once the node is placed).
  // An XLA fusion's click also selects it (its line in the XLA panel, its Python lines).
  function groupNode(rid, gid) {
    const group = groups[gid], open = state.open.has(gid), fusion = group.xla !== undefined;
    const node = el("div", "node group" + (open ? " open" : "") + (fusion ? " fusion" : ""));
    node.dataset.node = gid;
    node.title = group.path + (group.pass ? `\n${group.pass}` : "") +
      (group.where ? `\ncalled at ${sourceOf(group.where)}` : "") +
      (group.file !== null ? `\nfunction in ${data.files[group.file].path}` : "");
    const head = el("div", "opname", (open ? "▾ " : "▸ ") + group.title);
    const flows = flowsOf(rid)[gid] || {in: new Set(), out: new Set()};
    node.append(head, el("div", "where", `${group.ops} ops · ${flows.in.size} in → ${flows.out.size} out` +
                                          (fusion ? ` · xla ${group.xla + 1}` : "")));
    if (fusion) node.appendChild(xlaValueLine(group));
    const toggle = event => {
      event.stopPropagation();
      if (state.open.has(gid)) state.open.delete(gid); else state.open.add(gid);
      renderGraphs();
      if (fusion) select({kind: "group", gid});
    };
    if (open) {
      head.addEventListener("click", toggle);
      node.addEventListener("click", event => event.stopPropagation());
    } else {
      node.addEventListener("click", toggle);
    }
    return node;
  }

  // dagre's layout of a graph (``key``: its region and group) for its nodes' sizes;
  // kept while the sizes stay the same (browsing calls changes values, rarely sizes:
  // the graph keeps its shape).
  const layouts = new Map();
  function layoutOf(key, sizes, edges) {
    const sizeKey = JSON.stringify(sizes), known = layouts.get(key);
    if (known && known.key === sizeKey) return known;
    const graph = new dagre.graphlib.Graph({multigraph: true});
    graph.setGraph({rankdir: "TB", nodesep: 24, ranksep: 34, edgesep: 14, marginx: 6, marginy: 6});
    for (const [id, width, height] of sizes) graph.setNode(id, {width, height});
    edges.forEach(([source, target, label], index) => {
      graph.setEdge(source, target, {width: measure.measureText(label).width + 6, height: 12, labelpos: "c",
                                     label}, "e" + index);
    });
    dagre.layout(graph);
    const layout = {key: sizeKey, nodes: {}, edges: [], width: graph.graph().width, height: graph.graph().height};
    for (const [id] of sizes) layout.nodes[id] = graph.node(id);
    // An edge leaves its node straight down out of the node's rank, and enters its
    // target straight down from above the target's rank (dagre clips an edge to the
    // node's side, from where its first leg can cross a taller node of the same rank).
    const halfRank = new Map();    // a rank's centre -> half the height of its tallest node
    for (const [id] of sizes) {
      const node = graph.node(id), centre = Math.round(node.y);
      halfRank.set(centre, Math.max(halfRank.get(centre) || 0, node.height / 2));
    }
    for (const edge of graph.edges()) {
      const routed = graph.edge(edge), source = graph.node(edge.v), target = graph.node(edge.w);
      const sourceBand = source.y + halfRank.get(Math.round(source.y));
      const targetBand = target.y - halfRank.get(Math.round(target.y));
      const points = [{x: source.x, y: source.y + source.height / 2}, {x: source.x, y: sourceBand},
                      ...routed.points.slice(1, -1),
                      {x: target.x, y: targetBand}, {x: target.x, y: target.y - target.height / 2}]
        .filter((p, i, all) => i === 0 || p.x !== all[i - 1].x || p.y !== all[i - 1].y);
      layout.edges.push({from: edge.v, to: edge.w, points, x: routed.x, y: routed.y, label: routed.label});
    }
    layouts.set(key, layout);
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
      if (overlayStep[kind] === sid && !(kind === "divergence" && divergentSteps.size)) {
        node.classList.add(marker);
        node.appendChild(el("div", "marker", "⚠ " + symbol));
      }
    }
    if (divergentSteps.has(sid)) {
      node.classList.add("divergent");
      node.appendChild(el("div", "marker", "⚠ differs on device " + findingDevices(divergentSteps.get(sid))));
    }
    const where = step.xla !== undefined ? ["%" + step.instruction, "xla " + (step.xla + 1)] : [];
    if (step.line !== null) where.push("line " + step.line);
    if (step.hlo !== null) where.push("hlo " + step.hlo);
    if (where.length) node.appendChild(el("div", "where", where.join(" · ")));
    const record = currentRecord(sid);
    if (step.xla !== undefined) {
      node.appendChild(xlaValueLine(step));
    } else if (record && record.res) {
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
      const panel = element.closest("#python, #jaxpr, #stablehlo, #xla, #graphs");
      if (!firstOf.has(panel)) firstOf.set(panel, element);
    };
    const rowOf = line => hloRows[line];
    let key = null;
    if (selection.kind === "line") {
      key = lineKey(selection.file, selection.line);
    } else if (selection.kind === "group") {
      const where = groups[selection.gid].where;
      mark(shownNodes.get(selection.gid), "selected");
      mark(shownNodeOf(selection.gid), "hl");
      const line = groups[selection.gid].xla;
      if (line !== undefined) {      // an XLA fusion: its line, and the Python lines it computes
        mark(xlaRows[line], "selected");
        for (const [file, number] of data.xla.lines[line].keys)
          for (const row of document.querySelectorAll(`#python [data-key="${lineKey(file, number)}"]`)) mark(row, "hl");
      }
      if (where !== null)
        for (const row of document.querySelectorAll(`#python [data-key="${lineKey(where.file, where.line)}"]`))
          mark(row, "hl");
    } else {
      const step = steps[selection.sid];
      mark(shownNodes.get(selection.sid), "selected");
      mark(shownNodeOf(selection.sid), "hl");
      if (step.hlo !== null) mark(rowOf(step.hlo), "selected");
      if (step.xla !== undefined) mark(xlaRows[step.xla], "selected");
      if (step.file !== null) key = lineKey(step.file, step.line);
    }
    if (key !== null) {
      for (const row of document.querySelectorAll(`#python [data-key="${key}"]`))
        mark(row, selection.kind === "line" ? "selected" : "hl");
      for (const row of document.querySelectorAll(`#jaxpr [data-key="${key}"]`)) mark(row, "hl");
      for (const row of document.querySelectorAll(`#xla [data-keys~="${key}"]`)) mark(row, "hl");
      for (const gid of groupsOfLine.get(key) || []) mark(shownNodeOf(gid), "hl");
      for (const sid of stepsOfLine.get(key) || []) {
        mark(shownNodeOf(sid), "hl");
        if (steps[sid].hlo !== null) mark(rowOf(steps[sid].hlo), "hl");
      }
    }
    if (scroll) for (const element of firstOf.values()) element.scrollIntoView({block: "nearest", inline: "nearest"});
  }

  function refreshDetails() {
    const details = document.getElementById("details");
    const selection = state.selection;
    if (selection && selection.kind === "group") { showGroup(selection.gid); return; }
    if (!selection || selection.kind !== "step") {
      if (selection && selection.kind === "line") {
        details.textContent = "";
        const ops = (stepsOfLine.get(lineKey(selection.file, selection.line)) || []).map(sid => steps[sid])
          .filter(step => step.xla === undefined);
        details.appendChild(el("h3", null, `${data.files[selection.file].name}:${selection.line}`));
        details.appendChild(el("p", null, ops.length ? `became ${ops.length} op(s):` : "no op came from this line"));
        const list = el("ul");
        for (const step of ops) {
          const item = el("li", "link", step.name + (step.hlo !== null ? ` (hlo line ${step.hlo})` : ""));
          item.addEventListener("click", () => select({kind: "step", sid: step.id}));
          list.appendChild(item);
        }
        details.appendChild(list);
        if (data.xla && !data.xla.error) showXlaOfLine(lineKey(selection.file, selection.line), details);
        const calls = groupsOfLine.get(lineKey(selection.file, selection.line)) || [];
        if (calls.length) {
          details.appendChild(el("p", null, `made ${calls.length} call(s) (groups of ops):`));
          const callList = el("ul");
          for (const gid of calls) {
            const item = el("li", "link", `${groupLabel(gid)} (${groups[gid].ops} ops)`);
            item.addEventListener("click", () => openGroup(gid));
            callList.appendChild(item);
          }
          details.appendChild(callList);
        }
      }
      return;
    }
    const step = steps[selection.sid];
    details.textContent = "";
    if (step.xla !== undefined) { showXlaItem(step); return; }
    details.appendChild(el("h3", null, step.name));
    const list = el("dl");
    const add = (term, text) => { list.append(el("dt", null, term), el("dd", null, text)); };
    if (step.file !== null) add("Python", `${data.files[step.file].name}:${step.line}` +
                                          (step.function ? ` (${step.function})` : ""));
    if (step.jax) add("JAX name", step.jax);
    if (step.hlo !== null) add(`StableHLO line ${step.hlo}`, data.stablehlo[step.hlo - 1].trim());
    const runs = (recordsOfStep.get(selection.sid) || []).length;
    add("ran", `${runs} time${runs === 1 ? "" : "s"}` + (devices ? ` on device ${state.device}` : ""));
    const record = currentRecord(selection.sid);
    if (record && record.tx) add("bytes", `device ${state.device} sent ${record.tx[0]}, received ${record.tx[1]}`);
    const collective = collectiveOfStep.get(selection.sid);
    if (collective) add("all devices", `sent ${sum(collective.sent)}, received ${sum(collective.received)} ` +
                                       `in ${sum(collective.runs)} runs`);
    for (const finding of divergentSteps.get(selection.sid) || [])
      add(`differs on device ${finding.d}`, `${finding.result}: ${finding.text}`);
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
    record.res.forEach((value, index) => details.appendChild(resultBlock(`result #${index}: ${value.t}`, value)));
  }

  // A value's block in the details: its summary, and its whole text on demand.
  function resultBlock(term, value) {
    const block = el("div", "result");
    block.append(el("dt", null, term), el("dd", null, value.s));
    if (value.full !== null) {
      const button = el("button", "show-full", "show all values");
      button.addEventListener("click", () => withFullValue(value.full, text => button.replaceWith(text)));
      block.appendChild(button);
    } else {
      block.appendChild(el("p", "hint", "too large to keep whole: summary only"));
    }
    return block;
  }

  // An XLA instruction's details (a step, or a fusion: a group): its text, the Python
  // lines it computes, its value in XLA's program run on the interpreter (else why not),
  // and the interpreter's value of the StableHLO op it computes where xla_graph.py found
  // one (else why not): that op's in the original program (a pass that changed the values
  // makes the two differ).
  function showXlaItem(item) {
    const details = document.getElementById("details"), line = data.xla.lines[item.xla];
    details.appendChild(el("h3", null, line.text.trim()));
    const list = el("dl");
    list.append(el("dt", null, "XLA line"), el("dd", null, String(item.xla + 1)));
    if (item.ops !== undefined) list.append(el("dt", null, "fusion"), el("dd", null, item.path));
    if (line.keys.length) {
      const lines = el("dd");
      line.keys.forEach(([file, number], index) => {
        const link = el("span", "link", sourceOf({file, line: number}));
        link.addEventListener("click", () => select({kind: "line", file, line: number}));
        lines.append(...(index ? [", ", link] : [link]));
      });
      list.append(el("dt", null, "Python"), lines);
    }
    details.appendChild(list);
    details.appendChild(el("p", null, "XLA's program, run on the interpreter:"));
    details.appendChild(item.run ? resultBlock(item.run.t, item.run) : el("p", "hint", "no value: " + item.runWhy));
    const value = xlaValueOf(item);
    if (!value) {
      details.appendChild(el("p", "hint", "no StableHLO op's value: " + (item.why || "the op's value was not kept")));
      return;
    }
    const op = steps[item.value];
    const source = el("p", "link", `the StableHLO op it computes, ${op.name}` +
                                   (op.hlo !== null ? ` (StableHLO line ${op.hlo})` : "") + ", in the original program:");
    source.addEventListener("click", () => select({kind: "step", sid: op.id}));
    details.append(source, resultBlock(`${value.t}`, value));
    const changed = data.xla.passes.find(entry => entry.values);
    if (changed) details.appendChild(el("p", "marker", `⚠ ${changed.name} changed the program's values: ` +
                                                       "XLA's here may differ from it"));
  }

  // A group's details: what it is (its whole title, the pass it is part of, where it was
  // called, where its function is), its size and the values flowing in and out.
  function showGroup(gid) {
    const group = groups[gid], details = document.getElementById("details");
    details.textContent = "";
    if (group.xla !== undefined) { showXlaItem(group); return; }
    details.appendChild(el("h3", null, group.path));
    const list = el("dl");
    const add = (term, text) => { list.append(el("dt", null, term), el("dd", null, text)); return list.lastChild; };
    if (group.pass) add("pass", group.pass);
    if (group.where !== null) {
      const call = add("called at", sourceOf(group.where));
      call.classList.add("link");
      call.addEventListener("click", () => select({kind: "line", file: group.where.file, line: group.where.line}));
    }
    if (group.file !== null) add("function in", data.files[group.file].path);
    const flows = flowsOf(group.region)[gid] || {in: new Set(), out: new Set()};
    add("ops", `${group.ops} · ${flows.in.size} values in → ${flows.out.size} out`);
    details.appendChild(list);
  }

  // The whole text of kept value ``index`` (an element, or a hint when the file that
  // holds them is not beside the page) to ``use``: the page's JSON of them is read on
  // first use; a page written with its values apart loads that file (a script, as a
  // page opened from disk may load no data otherwise).
  let fullValues = null;
  function withFullValue(index, use) {
    if (fullValues !== null) return use(el("pre", "full", fullValues[index]));
    const source = JSON.parse(document.getElementById("explorer-values").textContent);
    if (Array.isArray(source)) {
      fullValues = source;
      return use(el("pre", "full", fullValues[index]));
    }
    window.explorerValues = values => { fullValues = values; };
    const script = document.createElement("script");
    const done = () => use(fullValues !== null ? el("pre", "full", fullValues[index]) :
                           el("p", "hint", `the values are in ${source.file}, not found beside the page`));
    script.addEventListener("load", done);
    script.addEventListener("error", done);
    script.src = source.file;
    document.head.appendChild(script);
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
    if (rid === data.sections[0])
      return (devices ? devices.arguments[state.device] : data.records.arguments)[k] || null;
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
    const shown = recordByNumber.get(number);
    if (devices && shown.d !== state.device) showDevice(shown.d);
    const chain = [];
    for (let record = recordByNumber.get(number); record; record = recordByNumber.get(record.p)) {
      chain.unshift(record);
      if (record.p === null) break;
    }
    for (const record of chain) {
      const rid = steps[record.s].region;
      reveal(record.s);
      const index = callsOf(rid).findIndex(call => call.p === record.p && call.c === record.c);
      state.call[rid] = Math.max(index, 0);
    }
    const sid = recordByNumber.get(number).s;
    renderGraphs();
    select({kind: "step", sid});
    const node = shownNodes.get(sid);
    if (node) node.scrollIntoView({block: "center", inline: "center"});
    if (report) document.getElementById("details").appendChild(el("div", "report", report));
  }

  // ------------------------------------------------------------------ search

  // The step, group or op region's owner that holds ``id`` (a step or a group); null at
  // a function's top.
  function containerOf(id) {
    const item = steps[id] || groups[id];
    const parent = steps[id] ? item.group : item.parent;
    return parent !== null ? parent : regions[item.region].owner;
  }

  // What a query is matched against, lowercased (made at the first search): an op's name,
  // its Python function and file, its JAX name (the name stack: transformations,
  // jax.named_scope, Flax and Haiku modules), an XLA instruction's name; a group's titles
  // (an XLA fusion's name) and its function's file.
  let searchTexts = null;
  function searchTextsOf() {
    if (searchTexts !== null) return searchTexts;
    const path = index => index === null ? "" : data.files[index].path;
    searchTexts = new Map();
    for (const sid in steps) {
      const step = steps[sid];
      searchTexts.set(sid, [step.name, step.function || "", path(step.file), step.jax || "",
                            step.instruction ? "%" + step.instruction : ""].join("\n").toLowerCase());
    }
    for (const gid in groups) searchTexts.set(gid, [groups[gid].path, path(groups[gid].file)].join("\n").toLowerCase());
    return searchTexts;
  }

  // Each step and group's position in the page (its sections, their items in order, an
  // op's regions after it).
  let pageOrder = null;
  function pageOrderOf() {
    if (pageOrder !== null) return pageOrder;
    pageOrder = new Map();
    const visit = id => {
      pageOrder.set(id, pageOrder.size);
      if (groups[id]) groups[id].items.forEach(visit);
      else for (const rid of steps[id].regions) regions[rid].items.forEach(visit);
    };
    for (const rid of sections) regions[rid].items.forEach(visit);
    return pageOrder;
  }

  // The ops and groups a query finds, in page order: by line (a number: a Python or a
  // StableHLO line; ``FILE:LINE``: a Python line, the file's name or the end of its path),
  // else by text in their names (op, function, file, JAX name, group title). What is
  // inside a group found is not counted apart.
  function matchesOf(query) {
    const located = /^(.+):(\d+)$/.exec(query);
    let stepFound, groupFound = () => false;
    if (/^\d+$/.test(query)) {
      const line = Number(query);
      stepFound = sid => steps[sid].line === line || steps[sid].hlo === line;
    } else if (located) {
      const file = located[1].replace(/^\/+/, ""), line = Number(located[2]);
      const inFile = index => {
        const path = data.files[index].path.toLowerCase();
        return path === file || path.endsWith("/" + file);
      };
      stepFound = sid => steps[sid].line === line && inFile(steps[sid].file);
      groupFound = gid => groups[gid].where !== null && groups[gid].where.line === line && inFile(groups[gid].where.file);
    } else {
      const texts = searchTextsOf();
      stepFound = sid => texts.get(sid).includes(query);
      groupFound = gid => texts.get(gid).includes(query);
    }
    const found = new Set(Object.keys(groups).filter(groupFound));
    const inside = id => {
      for (let around = containerOf(id); around !== null; around = containerOf(around))
        if (found.has(around)) return true;
      return false;
    };
    const order = pageOrderOf();
    return [...found, ...Object.keys(steps).filter(stepFound)].filter(id => !inside(id))
      .sort((a, b) => order.get(a) - order.get(b));
  }

  function search(query) {
    for (const node of document.querySelectorAll(".match")) node.classList.remove("match");
    query = query.trim().toLowerCase();
    state.matches = query ? matchesOf(query) : [];
    state.matchIndex = -1;
    markMatches();
    const count = state.matches.length, groupCount = state.matches.filter(id => groups[id]).length;
    document.getElementById("search-count").textContent = !query ? "" : `${count} match${count === 1 ? "" : "es"}` +
      (groupCount ? ` (${groupCount} group${groupCount === 1 ? "" : "s"})` : "");
  }

  function markMatches() {
    for (const id of state.matches) {
      const node = shownNodeOf(id);
      if (node) node.classList.add("match");
    }
  }

  // The next op or group found: shown (the groups and regions around it opened; a group
  // found, opened too) and selected.
  function nextMatch() {
    if (!state.matches.length) return;
    state.matchIndex = (state.matchIndex + 1) % state.matches.length;
    const id = state.matches[state.matchIndex];
    if (groups[id]) {
      openGroup(id);
      select({kind: "group", gid: id});
      return;
    }
    if (reveal(id)) renderGraphs();
    select({kind: "step", sid: id});
    const node = shownNodes.get(id);
    if (node) node.scrollIntoView({block: "center", inline: "center"});
  }

  // The graphs first; the text panels of a large program after the graph is on screen.
  const timings = {};
  renderBanners();
  renderGraphs();
  timings.graph = performance.now();
  const finish = () => {
    timings.painted = performance.now();    // a task after the frame that drew the graph
    renderTexts();
    applySelection(false);
    timings.texts = performance.now();
    document.body.dataset.ready = "true";
    requestAnimationFrame(() => setTimeout(() => { timings.textsPainted = performance.now(); }, 0));
  };
  if (small) finish(); else requestAnimationFrame(() => setTimeout(finish, 0));
  const box = document.getElementById("search");
  box.addEventListener("input", () => search(box.value));
  box.addEventListener("keydown", event => { if (event.key === "Enter") nextMatch(); });
  window.explorer = {data, select, showRecord, showDevice, state, timings};
})();
