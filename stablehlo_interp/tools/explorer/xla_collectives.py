"""The collectives of XLA's per-device program (``xla_stages=True`` on a sharded program),
with the bytes each device sends and receives there, read from the HLO text: the shapes
and element types of each collective's operands and result, and its pairs or groups.

The definition is :mod:`~...sharding.traffic`'s, so that XLA's program and the
interpreter's per-device program can be set side by side: a device *sends* the bytes of
the operands it hands to a collective and *receives* those of its result; a
``collective-permute`` moves data only from a pair's source to its target, a
``collective-broadcast`` only from a group's first device to the others. These are the
bytes the program moves, not what a network carries (a ring all-reduce moves
2(n-1)/n of its buffer per device, in pieces, over several hops).

The bytes are those of every time one run of the program runs the instruction
(``times``): a collective in a ``while`` body runs as many times as the loop's trip
count, which XLA writes in the loop's ``backend_config`` (``known_trip_count``) where it
knows it; where it does not, the collective is listed without bytes, saying so (an
instruction's trip count is not guessed). An asynchronous pair (``all-reduce-start`` ...
``all-reduce-done``, as XLA's GPU and TPU pipelines make them) is one collective, listed
at its start: it sends the start's operands and receives the done's result (the start's
own tuple also holds the operands, and scratch buffers, which are not moved).
"""

from __future__ import annotations

import math
import re

from ...backends.xla_passes import iota_devices
from .hlo_text import COMPUTATION_HEADER, INSTRUCTION, OPERAND

_OPCODES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "collective-broadcast")
_COLLECTIVE = re.compile(r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = (?P<result>.*?) (?P<opcode>"
                         + "|".join(_OPCODES) + r")(?P<start>-start)?\((?P<operands>[^)]*)\)(?P<attributes>.*)$")
_SHAPE = re.compile(r"\b(?P<type>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")
_BITS = re.compile(r"^(?:s|u|f|bf|c)(?P<bits>\d+)")
_PAIRS = re.compile(r"source_target_pairs=\{(?P<pairs>[\d,{}]*)\}")
_EXPLICIT_GROUPS = re.compile(r"replica_groups=\{(?P<groups>[\d,{}]*)\}")
_DONE = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = (?P<result>.*?) (?:" + "|".join(_OPCODES)
                   + r")-done\(.*%(?P<start>[\w.\-]+)\)")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(?P<n>\d+)"\}')
_WHILE = re.compile(r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = .* while\(.*\bcondition=%(?P<condition>[\w.\-]+), "
                    r"body=%(?P<body>[\w.\-]+)")
_CALLS = re.compile(r"\b(?:calls|to_apply)=%([\w.\-]+)")
_BRANCHES = re.compile(r"\b(?:branch_computations=\{[^}]*\}|true_computation=%[\w.\-]+|false_computation=%[\w.\-]+)")
_IOTA_GROUPS = re.compile(r"replica_groups=\[(?P<shape>[\d,]+)\]<=\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?")


def shape_bytes(text: str) -> int:
    """The bytes of the arrays an HLO shape text names (``f32[4,8]{1,0}``, a tuple of them):
    elements times the element type's width (``pred`` and the f8 types a byte; s4 half).
    A ValueError for an element type of unknown width or a dynamic dimension (``<=4``)."""
    total = 0
    for shape in _SHAPE.finditer(text):
        element, width = shape["type"], _BITS.match(shape["type"])
        if element != "pred" and not element.startswith("f8") and width is None:
            raise ValueError(f"element type {element}: its width is not known")
        bits = 8 if width is None else int(width["bits"])
        dims = [d for d in shape["dims"].split(",") if d]
        if not all(d.isdigit() for d in dims):
            raise ValueError(f"{shape[0]}: a dynamic shape")
        elements = math.prod(int(d) for d in dims)
        total += math.ceil(elements * bits / 8)
    return total


def collectives(lines: list[str], devices: int) -> list[dict]:
    """Each collective instruction of a per-device HLO program's ``lines`` (one entry however
    many times a loop runs it; an asynchronous pair's at its start): its line (``line``,
    0-based), name, opcode, how many times one run of the program runs it (``times``), and
    per device the bytes sent and received in all those runs (``uncounted``: why they are
    not counted, else None). An operand's shape is its own where the text prints it, else
    its producer's."""
    shapes = {match["name"]: match["shape"] for match in map(INSTRUCTION.match, lines) if match}
    results_of_starts = {match["start"]: match["result"] for match in map(_DONE.match, lines) if match}
    times = _times_run(lines)
    found = []
    for index, line in enumerate(lines):
        match = _COLLECTIVE.match(line)
        if match is None:
            continue
        count, why_unknown = times[index]
        entry = {"line": index, "name": match["name"], "op": match["opcode"], "times": count, "uncounted": why_unknown,
                 "sent": [0] * devices, "received": [0] * devices}
        found.append(entry)
        result = results_of_starts.get(match["name"]) if match["start"] else match["result"]
        if count is None or result is None:
            entry["uncounted"] = why_unknown if count is None else \
                f"an asynchronous start whose {match['opcode']}-done is not in the program"
            continue
        operands = match["operands"] if _SHAPE.search(match["operands"]) else \
            " ".join(shapes.get(operand["name"], "") for operand in OPERAND.finditer(match["operands"]))
        try:
            sent, received = shape_bytes(operands), shape_bytes(result)
            senders, receivers = _roles(match["opcode"], match["attributes"], devices)
        except ValueError as why:
            entry["uncounted"] = str(why)
            continue
        entry["sent"] = [count * sent if device in senders else 0 for device in range(devices)]
        entry["received"] = [count * received if device in receivers else 0 for device in range(devices)]
    return found


def _times_run(lines: list[str]) -> list[tuple[int | None, str | None]]:
    """For each line, how many times one run of the program runs it (its computation's
    count: 1 for the entry, and for a line outside any computation), or None and why: a
    ``while`` runs its body ``known_trip_count`` times and its condition once more; a
    fusion's or async start's computation (``calls=``), or a call's (``to_apply=``, as a
    reducer's: no collective runs there), as often as the instruction; a conditional's
    branch may not run at all."""
    computation_of, callers = _call_graph(lines)
    counts: dict[str, tuple[int | None, str | None]] = {}

    def count(computation: str) -> tuple[int | None, str | None]:
        if computation not in counts:
            sites = callers.get(computation, [])
            total, why = (0 if sites else 1), None
            for caller, factor, unknown in sites:
                caller_count, caller_why = count(caller)
                why = why or caller_why or unknown
                total += 0 if caller_count is None else caller_count * factor
            counts[computation] = (None, why) if why else (total, None)
        return counts[computation]

    return [(1, None) if name is None else count(name) for name in computation_of]


def _call_graph(lines: list[str]) -> tuple[list[str | None], dict[str, list[tuple[str, int, str | None]]]]:
    """The computation each line is in (None outside any), and for each computation the
    instructions that run it: their computation, how many times one of their runs runs it,
    and why that is not known (else None)."""
    computation_of: list[str | None] = []
    callers: dict[str, list[tuple[str, int, str | None]]] = {}
    computation = None
    for line in lines:
        header = COMPUTATION_HEADER.match(line.strip())
        if header:
            computation = header["name"]
        computation_of.append(computation)
        if line.strip() == "}":
            computation = None
        if computation is None or header:
            continue
        for callee, factor, unknown in _callees(line):
            callers.setdefault(callee, []).append((computation, factor, unknown))
    return computation_of, callers


def _callees(line: str) -> list[tuple[str, int, str | None]]:
    """The computations an instruction runs, each with how many times one run of it runs
    them and why that is not known (else None)."""
    loop = _WHILE.match(line)
    if loop is not None:
        trips = _TRIP_COUNT.search(line)
        unknown = None if trips else f"inside a loop of unknown trip count (%{loop['name']})"
        n = int(trips["n"]) if trips else 0
        return [(loop["body"], n, unknown), (loop["condition"], n + 1, unknown)]
    branches = [name for names in _BRANCHES.findall(line) for name in OPERAND.findall(names)]
    why = "inside a conditional's branch, which runs only where the branch is taken"
    return [(callee, 1, None) for callee in _CALLS.findall(line)] + [(branch, 1, why) for branch in branches]


def _roles(opcode: str, attributes: str, devices: int) -> tuple[set, set]:
    """The devices that send and those that receive at a collective (every device, but for
    a permute's pairs and a broadcast's groups)."""
    everyone = set(range(devices))
    pairs_text = _PAIRS.search(attributes)
    if opcode == "collective-permute" and pairs_text is not None:
        pairs = _numbers_in_braces(pairs_text["pairs"])
        return {source for source, _ in pairs}, {target for _, target in pairs}
    if opcode == "collective-broadcast":
        groups = [group for group in _groups(attributes, devices) if len(group) > 1]
        return {group[0] for group in groups}, {member for group in groups for member in group[1:]}
    return everyone, everyone


def _groups(attributes: str, devices: int) -> list[list[int]]:
    """The replica groups of a collective: listed (``{{0,1},{2,3}}``), in XLA's iota form
    (``[2,4]<=[4,2]T(1,0)``: iota over ``dims``, transposed, reshaped), or none (all devices);
    a ValueError for another form (a mesh's axes)."""
    explicit = _EXPLICIT_GROUPS.search(attributes)
    if explicit is not None and explicit["groups"]:
        return _numbers_in_braces(explicit["groups"])
    iota = _IOTA_GROUPS.search(attributes)
    if iota is None and "replica_groups=" in attributes and explicit is None:
        written = attributes.split("replica_groups=", 1)[1].split(", ")[0]
        raise ValueError(f"replica groups {written}: a form not read here")
    if iota is None:
        return [list(range(devices))]
    shape = [int(d) for d in iota["shape"].split(",")]
    return iota_devices(iota["dims"], iota["perm"]).reshape(shape).tolist()


def _numbers_in_braces(text: str) -> list[list[int]]:
    """``{0,1},{2,3}`` -> ``[[0, 1], [2, 3]]``."""
    return [[int(n) for n in group.split(",") if n] for group in re.findall(r"\{([\d,]*)\}", text)]
