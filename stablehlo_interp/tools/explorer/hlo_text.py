"""What the explorer reads of XLA's HLO text (``compiled.as_text()``, a pass's dump): the
patterns of its lines, shared by the graph (:mod:`.xla_graph`), the stages
(:mod:`.xla_stages`) and the collectives (:mod:`.xla_collectives`)."""

from __future__ import annotations

import re

#: The first line of a computation: ``%name (params) -> shape {`` (``ENTRY`` before the entry's).
COMPUTATION_HEADER = re.compile(r"^(?P<entry>ENTRY )?%(?P<name>[\w.\-]+) .*\{$")
#: An instruction: ``[ROOT ]%name = shape opcode(operands), attributes``.
INSTRUCTION = re.compile(r"^\s*(?P<root>ROOT )?%(?P<name>[\w.\-]+) = (?P<shape>.*?) (?P<opcode>[\w\-]+)\((?P<rest>.*)$")
#: A name an instruction refers to (an operand, a computation).
OPERAND = re.compile(r"%(?P<name>[\w.\-]+)")
