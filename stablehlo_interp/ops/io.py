"""Host transfers (spec: infeed, outfeed, send, recv) on the queues of the run
(``execution.context.io``, engine/hostio.py). Each op consumes a token and
produces one, which orders the transfers; values are copied in and out."""

from __future__ import annotations

import numpy as np

from ..engine.registry import op
from ..ir.types import TOKEN, TensorType


def _checked(entry, types, source: str) -> list:
    """The arrays of one queue entry, checked against the op's result types."""
    if len(entry) != len(types):
        raise ValueError(f"{source} holds {len(entry)} values; the op produces {len(types)} "
                         f"({', '.join(map(str, types))})")
    arrays = []
    for value, ttype in zip(entry, types):
        if not isinstance(ttype, TensorType):
            raise ValueError(f"cannot transfer a value of type {ttype}")
        array = value if isinstance(value, np.ndarray) else np.asarray(value, ttype.dtype)
        if not ttype.matches(array):
            raise ValueError(f"{source} holds a {array.dtype} array of shape {array.shape}; "
                             f"the op produces {ttype}")
        arrays.append(np.array(array))
    return arrays


@op("stablehlo.infeed", variadic=True, execution=True)
def infeed(info):
    """Results: the oldest entry of the infeed queue, then a token. ``infeed_config``
    and ``layout`` are not used."""
    types = info.result_types[:-1]

    def run(execution, token):
        queue = execution.context.io.infeed
        if not queue:
            raise ValueError("the infeed queue is empty (pass io=si.HostQueues(infeed=[...]) to run)")
        return (*_checked(queue.popleft(), types, "the infeed entry"), TOKEN)

    return run


@op("stablehlo.outfeed", execution=True)
def outfeed(info):
    """Appends its inputs to the outfeed list; ``outfeed_config`` is not used."""
    def run(execution, *operands):
        execution.context.io.outfeed.append([np.array(x) for x in operands[:-1]])
        return TOKEN

    return run


@op("stablehlo.send", execution=True)
def send(info):
    """Appends its inputs to the queue of its channel id."""
    channel = info.attr("channel_handle").handle

    def run(execution, *operands):
        execution.context.io.put(channel, *[np.array(x) for x in operands[:-1]])
        return TOKEN

    return run


@op("stablehlo.recv", variadic=True, execution=True)
def recv(info):
    """Results: the oldest entry of the queue of its channel id, then a token."""
    channel = info.attr("channel_handle").handle
    types = info.result_types[:-1]

    def run(execution, token):
        queue = execution.context.io.channels[channel]
        if not queue:
            raise ValueError(f"nothing to receive on channel {channel} (queue values with "
                             f"io.put({channel}, ...) or send them first)")
        return (*_checked(queue.popleft(), types, f"the entry of channel {channel}"), TOKEN)

    return run
