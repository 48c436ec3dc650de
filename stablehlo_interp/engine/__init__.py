"""The engine: what op implementations are written against and what runs them.

The registry of op builders, the plans they are compiled into (ops, regions,
steps), region patterns, quantized types, the run loop with its run context,
listeners and process grid, and the host queues of transfer ops.
"""
