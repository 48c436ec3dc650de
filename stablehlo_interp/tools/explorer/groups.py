"""Groups of ops by what the user wrote, for the explorer's overview.

An op's *scope* is read from its location: the components of JAX's name stack
between the outer ``jit(f)`` and the primitive (transformations such as
``jvp()``, ``transpose(jvp())``, ``vmap()``, and the names that ``jax.named_scope``
or Flax Linen and Haiku modules push, such as ``Block_0``), then the Python call
stack from the jitted function inwards (the functions and methods, such as
``DecoderBlock.__call__`` of a Flax NNX or Equinox module, each with the line
that called it). The frames outside the jitted function, which every op shares,
are dropped.

A region's ops are grouped by scope in program order: a group is a run of
consecutive ops that share the same scope down to its depth, so each call of a
layer (twelve calls of one ``DecoderBlock.__call__`` from one line) is a group of
its own (consecutive calls from one line told apart by :func:`_next_call`, which
also cuts a Python loop in a function into its iterations). An op without operands (a constant) takes the scope of its first
consumer and stands just before it. A group of one item is that item; a group
with more than ``MAX_ITEMS`` items (a long flat program) is cut into parts.
"""

from __future__ import annotations

import math
from collections import Counter

MAX_ITEMS = 40     # items shown in one graph of the overview (a group's contents, a region's top)


def scope_of(location, outer: tuple) -> tuple:
    """The scope path of a located op, a ``(key, line)`` pair a level, the line
    being where in that level's function the op came from (None but for calls).
    The keys: the transformation it was traced under
    (``("transform", "jvp")``: the outermost of the name stack's first component,
    ``jvp`` for a forward pass, ``transpose`` for its backward pass), then
    ``("call", calling file, line, column, function, function's file)`` for each
    frame below the ``outer`` frames (:func:`outer_frames`) it starts with (the
    function as :func:`shown_function` names it), then ``("scope", name)`` for
    each name the name stack holds that is not a transformation
    (``jax.named_scope``, Flax Linen and Haiku module names)."""
    if location is None:
        return ()
    path, names = [], []
    if location.name and "/" in location.name:
        components = location.name.split("/")[:-1]       # the last is the primitive
        if components and components[0].startswith(("jit(", "pjit(")):
            components = components[1:]
        if components and "(" in components[0]:
            path.append((("transform", components[0].split("(", 1)[0]), None))
        names = [(("scope", component), None) for component in components if "(" not in component]
    frames = [frame for frame in reversed(location.frames) if frame.function is not None]   # outermost first
    shared = 0
    while shared < min(len(outer), len(frames)) and _frame_key(frames[shared]) == outer[shared]:
        shared += 1
    for depth in range(shared, len(frames)):
        caller = frames[depth - 1] if depth else None
        call_site = (caller.file, caller.line, caller.column) if caller else (None, None, None)
        function = shown_function(frames[depth].function, {frame.function for frame in frames[:depth]})
        path.append((("call", *call_site, function, frames[depth].file), frames[depth].line))
    return tuple(path + names)


def shown_function(qualified: str, callers: set) -> str:
    """A frame's function as its group's title: its qualified name as written, without
    ``<locals>`` (``scale_by_adam.update_fn``: the ``update_fn`` that Optax's
    ``scale_by_adam`` made; ``Classifier.__call__``), less the outer functions that
    are its callers too (the ``<lambda>`` that ``tree_update_moment`` made and calls
    reads ``<lambda>``, inside ``tree_update_moment``'s group). ``callers``: the
    qualified names of the frames around it."""
    parts = qualified.split(".<locals>.")
    for cut in range(len(parts) - 1, 0, -1):
        if ".<locals>.".join(parts[:cut]) in callers:
            parts = parts[cut:]
            break
    return ".".join(parts)


OUTER_SHARE = 0.9     # the outer frames are those this share of the located ops starts with


def outer_frames(locations, function_lines=None) -> tuple:
    """The outermost frames (file, line, function) that nearly every op's stack starts
    with (at each depth, ``OUTER_SHARE`` of the stacks that deep): where ``jit`` was
    called from, up to the jitted function's own frame when its lines are known
    (``function_lines``: file, first and last line). Nearly: an op that JAX made with
    no frame of the program (a random key's split in a library's internals) does not
    keep the others from sharing theirs."""
    stacks = [[_frame_key(frame) for frame in reversed(location.frames) if frame.function is not None]
              for location in locations if location is not None]
    prefix: tuple[tuple, ...] = ()
    while True:
        deeper = [tuple(stack[:len(prefix) + 1]) for stack in stacks if len(stack) > len(prefix)]
        if not deeper:
            return prefix
        longer, count = Counter(deeper).most_common(1)[0]
        file, line, _ = longer[-1]
        if count < OUTER_SHARE * len(deeper) or (
                function_lines is not None and file == function_lines[0]
                and function_lines[1] <= line <= function_lines[2]):
            return prefix
        prefix = longer


def _frame_key(frame) -> tuple:
    return frame.file, frame.line, frame.function


def _within_transforms(entries: list) -> list:
    """A run of ops traced under no transformation between two ops traced under the
    same one (the forward pass's ops that do not depend on what ``jvp`` differentiates,
    such as an attention mask) is counted in that transformation."""
    transform_of = [scope[0] if scope and scope[0][0][0] == "transform" else None for _, scope in entries]
    result, start = list(entries), 0
    while start < len(entries):
        if transform_of[start] is not None:
            start += 1
            continue
        end = start
        while end < len(entries) and transform_of[end] is None:
            end += 1
        if 0 < start and end < len(entries) and transform_of[start - 1] == transform_of[end]:
            for index in range(start, end):
                result[index] = (entries[index][0], (transform_of[end],) + entries[index][1])
        start = end
    return result


def _next_call(previous, scope, depth) -> bool:
    """Whether an op of the same call site as the op before it is in the next call:
    its line in the called function goes back (a forward pass runs a function's lines
    in order) or, in a backward pass (``transpose``), forward."""
    before, line = previous[depth][1], scope[depth][1]
    if before is None or line is None:
        return False
    backward = scope[0][0] == ("transform", "transpose")
    return line > before if backward else line < before


PASSES = {"jvp": "forward", "transpose": "backward"}    # the passes of a gradient, by their transformation


def _title(key) -> str:
    if key[0] == "transform":
        return f"{PASSES[key[1]]} ({key[1]})" if key[1] in PASSES else key[1]
    return key[1] if key[0] == "scope" else key[4]


def _pass(transform: str | None) -> str | None:
    """The transformation a group's ops were traced under, in words: ``forward pass``
    (``jvp``), ``backward pass`` (``transpose``), ``under vmap`` (None: none)."""
    if transform is None:
        return None
    return f"{PASSES[transform]} pass" if transform in PASSES else f"under {transform}"


class GroupBuilder:
    """Builds the groups of each region (``group(region entry, ...)``), numbering them
    ``"g<k>"`` across the page (``prefix``: another letter than ``g``, for another graph's);
    ``add``, ``fill`` and ``split`` make groups given their items (XLA's fusions:
    xla_graph.py)."""

    def __init__(self, files, prefix: str = "g"):
        self.files, self.prefix = files, prefix
        self.groups: dict[str, dict] = {}
        self.count = 0
        self.titled_passes: set[str] = set()    # the groups whose title names their pass (``forward (jvp) › f``)

    def group(self, region: dict, scopes: dict, operands: dict, steps: dict) -> None:
        """Sets ``region["items"]`` (its top items: step and group ids) and each step's
        ``"group"``; ``scopes`` maps a step to its scope path, ``operands`` to the steps
        it consumes in this region."""
        order = {sid: position for position, sid in enumerate(region["steps"])}
        first_consumer: dict[int, int] = {}
        for sid in region["steps"]:
            for producer in operands[sid]:
                first_consumer.setdefault(producer, sid)
        placed = []
        for sid in region["steps"]:
            consumer = first_consumer.get(sid)
            if not operands[sid] and consumer is not None:      # a constant goes with its consumer
                placed.append((order[consumer] - 0.5, order[sid], sid, scopes[consumer]))
            else:
                placed.append((order[sid], order[sid], sid, scopes[sid]))
        placed.sort(key=lambda entry: entry[:2])
        entries = _within_transforms([(sid, scope) for *_, sid, scope in placed])
        items = self._build(entries, 0, None, region["id"], steps)
        while len(items) == 1 and items[0] in self.groups:       # one group around everything: its items
            only = self.groups.pop(items[0])
            items = only["items"]
            for item in items:
                self._reparent(item, None, steps)
        region["items"] = self._split(items, None, region["id"], steps)

    def add(self, rid: str, parent: str | None, title: str) -> str:
        """A new, empty group of region ``rid`` inside ``parent`` (None: the region's top)."""
        return self._new(rid, parent, title)

    def fill(self, gid: str, items: list[str], steps: dict) -> None:
        """Group ``gid`` holds ``items`` (steps and groups), as it is (however few)."""
        for item in items:
            self._reparent(item, gid, steps)
        self.groups[gid]["items"] = items
        self.groups[gid]["ops"] = sum(self.groups[item]["ops"] if item in self.groups else 1 for item in items)

    def split(self, items: list[str], rid: str, steps: dict) -> list[str]:
        """A region's top items, those beyond ``MAX_ITEMS`` (and each group's) cut into parts."""
        return self._split(items, None, rid, steps)

    def page_groups(self) -> dict[str, dict]:
        """The groups, each call site (``where``) as the Python panel's file index and line,
        and the called function's file (``file``) as its index; a long title (a chain of
        single calls) shortened to its ends, whole in ``path``; ``pass`` None where the
        title names it."""
        for gid, group in self.groups.items():
            if gid in self.titled_passes:
                group["pass"] = None
            parts = group["title"].split(" › ")
            group["path"] = group["title"]
            if len(parts) > 3:
                group["title"] = " › ".join([parts[0], "…", parts[-1]])
            if group["where"] is not None:
                file, line = group["where"]
                group["where"] = {"file": self.files.index(file, line), "line": line} if file else None
            if group["file"] is not None:
                group["file"] = self.files.index(*group["file"])
        return self.groups

    def _build(self, entries, depth, parent, rid, steps) -> list[str]:
        items, start = [], 0
        while start < len(entries):
            sid, scope = entries[start]
            if len(scope) <= depth:
                steps[sid]["group"] = parent
                items.append(sid)
                start += 1
                continue
            key, end = scope[depth][0], start + 1
            while (end < len(entries) and len(entries[end][1]) > depth and entries[end][1][depth][0] == key
                   and not _next_call(entries[end - 1][1], entries[end][1], depth)):
                end += 1
            transform = scope[0][0][1] if scope[0][0][0] == "transform" else None
            call = key[0] == "call"
            gid = self._new(rid, parent, _title(key), _pass(transform), key[1:3] if call else None,
                            (key[5], scope[depth][1]) if call else None)
            if key[0] == "transform":
                self.titled_passes.add(gid)
            inner = self._build(entries[start:end], depth + 1, gid, rid, steps)
            items.append(self._flatten(gid, inner, steps))
            start = end
        self._number(items)
        return items

    def _new(self, rid, parent, title, pass_=None, call_site=None, function_line=None) -> str:
        """A group: ``pass_`` the transformation its ops were traced under, in words
        (:func:`_pass`; None); ``call_site`` and ``function_line``
        the (file, line) of its call and of a line in the called function."""
        gid = f"{self.prefix}{self.count}"
        self.count += 1
        self.groups[gid] = {"id": gid, "region": rid, "parent": parent, "title": title, "pass": pass_,
                            "where": call_site, "file": function_line, "items": [], "ops": 0}
        return gid

    def _flatten(self, gid, inner, steps) -> str:
        """The group with its items; a group of one item is the item (a group within
        takes both titles)."""
        group = self.groups[gid]
        if len(inner) == 1:
            (only,) = inner
            del self.groups[gid]
            self._reparent(only, group["parent"], steps)
            if only in self.groups:
                inner = self.groups[only]
                inner["title"] = f"{group['title']} › {inner['title']}"
                inner["where"] = inner["where"] or group["where"]
                inner["file"] = inner["file"] or group["file"]
                if gid in self.titled_passes:
                    self.titled_passes.add(only)
            return only
        group["items"] = inner
        group["ops"] = sum(self.groups[item]["ops"] if item in self.groups else 1 for item in inner)
        return gid

    def _reparent(self, item, parent, steps) -> None:
        if item in self.groups:
            self.groups[item]["parent"] = parent
        else:
            steps[item]["group"] = parent

    def _number(self, items) -> None:
        """Siblings of the same title (the calls of one layer) are numbered."""
        titled = [item for item in items if item in self.groups]
        counts: dict[str, int] = {}
        for item in titled:
            counts[self.groups[item]["title"]] = counts.get(self.groups[item]["title"], 0) + 1
        seen: dict[str, int] = {}
        for item in titled:
            title = self.groups[item]["title"]
            if counts[title] > 1:
                seen[title] = seen.get(title, 0) + 1
                self.groups[item]["title"] = f"{title} #{seen[title]}"

    def _split(self, items, parent, rid, steps) -> list[str]:
        """Items beyond ``MAX_ITEMS`` cut into consecutive parts (recursively: a part
        holds at most ``MAX_ITEMS`` items), and each group's own items likewise."""
        for item in items:
            if item in self.groups:
                self.groups[item]["items"] = self._split(self.groups[item]["items"], item, rid, steps)
        while len(items) > MAX_ITEMS:
            count = math.ceil(len(items) / MAX_ITEMS)
            size = math.ceil(len(items) / count)
            parts = []
            pass_ = self.groups[parent]["pass"] if parent is not None else None
            for index in range(count):
                gid = self._new(rid, parent, f"part {index + 1} of {count}", pass_)
                chunk = items[index * size:(index + 1) * size]
                for item in chunk:
                    self._reparent(item, gid, steps)
                parts.append(self._flatten(gid, chunk, steps))
            items = parts
        return items
