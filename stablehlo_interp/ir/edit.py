"""Rewrites of a module for backend comparison (tools/compare.py), done with the MLIR bindings.

* :func:`inline_calls` replaces every ``func.call`` in the entry function by
  the body of the function it calls, so that every op JAX emitted (nested
  ``jit``, ``jnp.where`` ...) is an op of the entry function, except those in
  the regions of control-flow ops.
* :func:`entry_op_names` lists the entry function's ops, to match two lowerings op for op.
* :func:`prefix_module` keeps the entry function's ops up to one op and
  returns the values of chosen ops instead of the function's results: a
  program any backend can compile and run to show its intermediate values.
* :func:`region_module` makes one region of an op (a ``while``'s cond or body, a
  ``case`` branch) the ``@main`` of a module of its own, taking the values it captures
  and its arguments: a loop's iteration run on a backend (tools/loops.py).
* :func:`operands_module` returns the operands of one op of the entry function: what
  a backend computed for a decision (a compare) before it is taken.
* :func:`checks_as_results` takes the check ops out of a test function and
  returns the values they check instead, for a backend that cannot compile
  check ops (conformance/conform.py), and puts the checks in a module of their own.
* :func:`inline_every_call` inlines every ``func.call`` of a module, in any
  region (sharding/partition/, before Shardy's global-to-local pass).
* :func:`async_pairs_as_collectives` writes each ``stablehlo.async_start`` /
  ``async_done`` pair as the collective it wraps, as XLA's CPU shows it, for
  XLA's StableHLO-to-HLO converter, which refuses async ops (sharding/partition/,
  and :func:`as_hlo_convertible`).
* :func:`chlo_sharding_rule` is an ``sdy.sharding_rule`` for the CHLO ops Shardy has
  no rule for (sharding/shardy_child.py, sharding/partition/).
* :func:`manual_over_devices` runs a per-device program as one global program: each
  argument and result stacked over the devices, the program inside an
  ``sdy.manual_computation``, so that a backend runs every device's program (with its
  collectives) and returns each device's values (tools/compare.py, per device).
* :func:`as_hlo_convertible` writes Shardy's ``sdy.sharding_constraint``
  and ``sdy.reshard`` as the ``Sharding`` custom calls of HLO, and the async
  pairs as their collectives, which XLA's StableHLO-to-HLO converter reads
  (the device's optimized program, device/).

They take and return MLIR text (with locations) and leave their input alone,
except :func:`inline_every_call` and :func:`async_pairs_as_collectives`, which
edit the module they are given.
"""

from __future__ import annotations

import itertools
import re

from jaxlib.mlir import ir

from ..errors import ModuleError
from .check_dialect import to_generic_form
from .declarations import function_operations
from .sources import make_context

_ALIASING_KEYS = ("tf.aliasing_output", "jax.buffer_donor")
# a named location's name: loc("name") or loc("name"(...)), not a file's, loc("file":1:2)
_LOCATION_NAME = re.compile(r'loc\("((?:[^"\\]|\\.)*)"(?=[()])')
_SYMBOL = re.compile(r'@(?:"((?:[^"\\]|\\.)*)"|([\w.$-]+))')


def inline_calls(text: str, function: str) -> str:
    """The module with every ``func.call`` in ``@function``'s body inlined (recursively;
    a call chain deeper than :data:`INLINE_ROUNDS`, a recursive function, is a ModuleError)."""
    with make_context():
        module = ir.Module.parse(text)
        functions = function_operations(module)
        block = _body(functions[function])
        _inline_until_none(lambda: [op.operation for op in block.operations if op.operation.name == "func.call"],
                           functions)
        return _text(module)


def inline_every_call(module: ir.Module) -> None:
    """Replace each ``func.call`` in ``module`` (in any function and region) by the body
    of the function it calls, until none is left; a call chain deeper than
    :data:`INLINE_ROUNDS` (a recursive function) is a ModuleError. The functions
    called stay (unused)."""

    _inline_until_none(lambda: _ops_named(module, "func.call"), function_operations(module))


def _ops_named(module: ir.Module, *names: str) -> list:
    """The ops of ``module`` (in any region) called one of ``names``."""
    found = []

    def visit(op):
        if op.name in names:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


INLINE_ROUNDS = 64  # how deep calls may nest in a module that is inlined


def _inline_until_none(find_calls, functions: dict) -> None:
    """Inline the calls ``find_calls()`` finds, round after round, until it finds none."""
    for _ in range(INLINE_ROUNDS):
        calls = find_calls()
        if not calls:
            return
        for call in calls:
            callee = call.attributes["callee"].value
            if not len(functions[callee].regions[0].blocks):
                raise ModuleError(f"cannot inline the call of @{callee}: it is declared without a body")
            _inline(call, functions[callee])
    raise ModuleError(f"cannot inline the module's calls: they are nested more than {INLINE_ROUNDS} deep "
                      "(a recursive function?)")


def entry_op_names(text: str, function: str) -> list[str]:
    """The names of ``@function``'s ops, in block order: two lowerings of one function
    for two platforms have the same ones where only their custom calls' targets differ."""
    with make_context():
        module = ir.Module.parse(text)
        return [op.operation.name for op in _body(function_operations(module)[function]).operations]


def prefix_module(text: str, function: str, last: int, returned: list[tuple[int, int]]) -> str:
    """``@function`` cut after its op number ``last`` (0-based, in block order),
    returning result ``r`` of op ``i`` for each ``(i, r)`` in ``returned``."""
    with make_context():
        module = ir.Module.parse(text)
        func = function_operations(module)[function]
        block = _body(func)
        ops = list(block.operations)
        values = [ops[index].results[result] for index, result in returned]
        for op in reversed(ops[last + 1:]):   # the terminator and every op after ``last``
            op.operation.erase()
        _return_instead(func, block, values, func.location)
        return _text(module)


def operands_module(text: str, function: str, index: int) -> str:
    """``@function`` cut before its op number ``index`` (0-based, in block order),
    returning that op's operands."""
    with make_context():
        module = ir.Module.parse(text)
        func = function_operations(module)[function]
        block = _body(func)
        ops = list(block.operations)
        values = list(ops[index].operands)
        for op in reversed(ops[index:]):
            op.operation.erase()
        _return_instead(func, block, values, func.location)
        return _text(module)


def region_module(text: str, function: str, index: int, region: int) -> tuple[str, list[tuple[int | None, int]]]:
    """``(module, captured)``: region ``region`` of ``@function``'s op number ``index``
    (0-based, in block order) as the ``@main`` of a module of its own, with the
    calls in it inlined (:func:`inline_calls`). Its arguments are the values the region
    captures (uses from outside it), then the region's own block arguments; it returns
    what the region's ``stablehlo.return`` returns. The module keeps the functions the
    region calls and the module's attributes (its process grid); the others go.

    ``captured`` says where each captured value comes from in ``@function``: ``(None,
    n)`` for its argument ``n``, ``(op, r)`` for result ``r`` of its op number ``op``."""
    with make_context():
        module = ir.Module.parse(text)
        functions = function_operations(module)
        func = functions[function]
        ops = [op.operation for op in _body(func).operations]
        owner = ops[index]
        if len(owner.regions[region].blocks) != 1:
            raise ModuleError(f"region {region} of {owner.name} has {len(owner.regions[region].blocks)} blocks, "
                              "not one: it cannot be a function of its own")
        body = owner.regions[region].blocks[0]
        captured = _captured_values(body)
        positions = {op: position for position, op in enumerate(ops)}
        origins: list[tuple[int | None, int]] = [
            (None, value.arg_number) if isinstance(value, ir.BlockArgument)
            else (positions[value.owner], value.result_number) for value in captured]
        inputs = [value.type for value in captured] + [argument.type for argument in body.arguments]
        terminator = list(body.operations)[-1].operation
        outputs = [value.type for value in terminator.operands]
        with ir.InsertionPoint(module.body), owner.location:
            main = ir.Operation.create("func.func", regions=1, attributes={
                "sym_name": ir.StringAttr.get("__region"),
                "function_type": ir.TypeAttr.get(ir.FunctionType.get(inputs, outputs))})
            entry = main.regions[0].blocks.append(*inputs, arg_locs=[owner.location] * len(inputs))
            placeholder = ir.Operation.create("func.return", ip=ir.InsertionPoint(entry))
        arguments = list(entry.arguments)
        mapping = dict(zip(captured, arguments)) | dict(zip(body.arguments, arguments[len(captured):]))
        returned, _ = _clone_body(body, placeholder, terminator.name, mapping)
        with ir.InsertionPoint(placeholder), terminator.location:
            ir.Operation.create("func.return", operands=returned)
        placeholder.erase()
        for name, other in functions.items():
            if name == function:
                other.erase()
        _rename(module, main, "__region", "main")
        functions = function_operations(module)
        reachable = _reachable("main", functions)
        for name, other in functions.items():
            if name not in reachable:
                other.erase()
        return inline_calls(_text(module), "main"), origins


def _captured_values(body: ir.Block) -> list:
    """The values ``body``'s ops (and the ops in their regions) use that are defined
    outside ``body``, in the order of their first use."""
    defined = set(body.arguments)
    used: list = []

    def visit(op):
        defined.update(op.results)
        for region in op.regions:
            for block in region.blocks:
                defined.update(block.arguments)
        used.extend(op.operands)
        return ir.WalkResult.ADVANCE

    for op in body.operations:
        op.operation.walk(visit)
    return list(dict.fromkeys(value for value in used if value not in defined))


def checks_as_results(text: str, function: str) -> tuple[str, str, list]:
    """``(program, judge, actual)`` for the test function ``@function`` of a module.

    ``program``: the module with calls in ``@function`` inlined, its check ops
    (``check.*`` ops and ``stablehlo.custom_call @check.*``) removed, and the
    operands of those checks, in order, returned as its results instead; the
    function is renamed ``@main``; functions it does not refer to (other tests) are
    dropped.
    ``judge``: a module whose ``@main`` takes those values as arguments and applies
    the same checks (same attributes, same locations) to them. ``actual``: for each
    check, the position among the results of its first operand, the value it checks
    (the others are expectations). Checks must be ops of the function itself, not of
    a region.
    """
    text = inline_calls(to_generic_form(text), function)
    with make_context():
        module = ir.Module.parse(text)
        functions = function_operations(module)
        func = functions[function]
        block = _body(func)
        checks = [op.operation for op in block.operations if _is_check(op.operation)]
        nested = []
        for op in block.operations:
            for region in op.operation.regions:
                _find_checks(region, nested)
        if nested:
            raise ModuleError(f"{nested[0].name} inside a region of @{function}: only checks of the function "
                              "itself can become results")
        values = [value for check in checks for value in check.operands]
        actual = list(itertools.accumulate([0] + [len(check.operands) for check in checks[:-1]]))
        judge = _judge_module(checks, values)
        terminator = list(block.operations)[-1].operation   # returning a check's result is no use of it
        location = terminator.location
        terminator.erase()
        for check in checks:
            if any(len(list(result.uses)) for result in check.results):
                raise ModuleError(f"the result of {check.name} is used: it cannot be taken out")
            check.erase()
        _return_instead(func, block, values, location)
        reachable = _reachable(function, functions)
        for name, other in functions.items():   # other tests, with checks of their own
            if name not in reachable:
                other.erase()
        if function != "main":
            if "main" in reachable:
                raise ModuleError(f"@{function} calls @main: it cannot be renamed @main for the backend")
            _rename(module, func, function, "main")
        if "sym_visibility" in func.attributes:
            del func.attributes["sym_visibility"]
        return _text(module), judge, actual if checks else []


def _is_check(op: ir.Operation) -> bool:
    if op.name.startswith("check."):
        return True
    return (op.name == "stablehlo.custom_call"
            and ir.StringAttr(op.attributes["call_target_name"]).value.startswith("check."))


def _find_checks(region, found: list) -> None:
    for block in region.blocks:
        for op in block.operations:
            if _is_check(op.operation):
                found.append(op.operation)
            for inner in op.operation.regions:
                _find_checks(inner, found)


def _judge_module(checks: list, values: list) -> str:
    """A module whose ``@main(values...)`` applies ``checks`` to its arguments."""
    arguments = ", ".join(f"%v{i}: {value.type}" for i, value in enumerate(values))
    judge = ir.Module.parse(f"func.func @main({arguments}) {{\n  func.return\n}}")
    block = _body(function_operations(judge)["main"])
    terminator = list(block.operations)[-1]
    position = 0
    for check in checks:
        clone = check.clone(ip=ir.InsertionPoint(terminator))
        for index in range(len(check.operands)):
            clone.operands[index] = block.arguments[position]
            position += 1
    return _text(judge)


def _reachable(function: str, functions: dict) -> set:
    """``function`` and the functions its ops refer to by symbol, transitively. The
    symbols are read from the printed functions (reading every attribute through the
    bindings would also decode large constants, which some element types crash)."""
    found, pending = set(), [function]
    while pending:
        name = pending.pop()
        if name in found or name not in functions:
            continue
        found.add(name)
        body = functions[name].get_asm(large_elements_limit=16)
        pending.extend(quoted or plain for quoted, plain in _SYMBOL.findall(body))
    return found


def _rename(module, func, old: str, new: str) -> None:
    ir.SymbolTable.replace_all_symbol_uses(old, new, module.operation)
    func.attributes["sym_name"] = ir.StringAttr.get(new)


DEVICE_AXIS = "devices"


def manual_over_devices(text: str, function: str, count: int) -> str:
    """``@function`` of a per-device program for ``count`` devices as ``@main`` of a
    global program over a 1-D mesh of ``count`` devices: each argument and result
    ``tensor<S>`` becomes ``tensor<count x S>``, device ``d``'s value at ``[d]``
    (sharded on its first dimension), and the program runs on each device's
    ``[1 x S]`` part reshaped to ``S`` inside an ``sdy.manual_computation`` manual over
    the mesh's axis, as JAX's ``shard_map`` lowers (device ``d`` of the mesh is
    partition ``d``, the id the program's collectives name). Raises ``ModuleError``
    for a value that is not a ranked tensor (a token, a tuple)."""
    with make_context():
        module = ir.Module.parse(text)
        func = function_operations(module)[function]
        signature = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        for value_type in [*signature.inputs, *signature.results]:
            if not isinstance(value_type, ir.RankedTensorType):
                raise ModuleError(f"a per-device program with a value of type {value_type} cannot be stacked "
                                  "over the devices")
        _rename(module, func, function, "__device_program")
        func.attributes["sym_visibility"] = ir.StringAttr.get("private")
        for name in ("arg_attrs", "res_attrs"):
            if name in func.attributes:
                del func.attributes[name]
        wrapper = ir.Module.parse(_manual_wrapper(list(signature.inputs), list(signature.results), count))
        for op in list(wrapper.body.operations)[:-1]:   # the last: the program's declaration, for the parser
            op.operation.clone(ip=ir.InsertionPoint(module.body))
        return _text(module)


def _manual_wrapper(inputs: list, results: list, count: int) -> str:
    """The ``sdy.mesh`` and ``@main`` of :func:`manual_over_devices` as MLIR text."""
    def stacked(value_type, leading) -> str:
        ranked = ir.RankedTensorType(value_type)
        return str(ir.RankedTensorType.get([leading, *ranked.shape], ranked.element_type, loc=ir.Location.unknown()))

    def sharding(value_type) -> str:
        return '<@__devices, [{"%s"}%s]>' % (DEVICE_AXIS, ", {}" * ir.RankedTensorType(value_type).rank)

    def listed(items) -> str:
        return ", ".join(items)

    def sharded(value_type) -> str:   # @main's too: XLA leaves an argument the program does not use whole otherwise
        return f"{stacked(value_type, count)} {{sdy.sharding = #sdy.sharding{sharding(value_type)}}}"

    outer_in, outer_out = [stacked(t, count) for t in inputs], [stacked(t, count) for t in results]
    one_in, one_out = [stacked(t, 1) for t in inputs], [stacked(t, 1) for t in results]
    local_in, local_out = [str(t) for t in inputs], [str(t) for t in results]
    lines = [f'sdy.mesh @__devices = <["{DEVICE_AXIS}"={count}]>',
             f"func.func public @main({listed(f'%arg{i}: {sharded(t)}' for i, t in enumerate(inputs))}) "
             f"-> ({listed(map(sharded, results))}) {{",
             f"  %out:{len(results)} = sdy.manual_computation({listed(f'%arg{i}' for i in range(len(inputs)))}) "
             f"in_shardings=[{listed(map(sharding, inputs))}] out_shardings=[{listed(map(sharding, results))}] "
             f'manual_axes={{"{DEVICE_AXIS}"}} ({listed(f"%one{i}: {t}" for i, t in enumerate(one_in))}) {{']
    lines += [f"    %local{i} = stablehlo.reshape %one{i} : ({one}) -> {local}"
              for i, (one, local) in enumerate(zip(one_in, local_in))]
    lines.append(f"    %res:{len(results)} = func.call @__device_program("
                 f"{listed(f'%local{i}' for i in range(len(inputs)))}) : ({listed(local_in)}) -> ({listed(local_out)})")
    lines += [f"    %back{i} = stablehlo.reshape %res#{i} : ({local}) -> {one}"
              for i, (local, one) in enumerate(zip(local_out, one_out))]
    lines += [f"    sdy.return {listed(f'%back{i}' for i in range(len(results)))} : {listed(one_out)}",
              f"  }} : ({listed(outer_in)}) -> ({listed(outer_out)})",
              f"  return {listed(f'%out#{i}' for i in range(len(results)))} : {listed(outer_out)}",
              "}",
              f"func.func private @__device_program({listed(local_in)}) -> ({listed(local_out)})"]
    return "\n".join(lines)


def as_hlo_convertible(text: str, hlo_sharding, notes: dict[str, str] | None = None) -> str:
    """The module with each ``sdy.sharding_constraint`` / ``sdy.reshard`` (in any region)
    replaced by ``stablehlo.custom_call @Sharding`` whose ``mhlo.sharding`` is
    ``hlo_sharding(the op's sdy sharding as text)``, and each async pair by its collective
    (:func:`async_pairs_as_collectives`). ``notes`` become the module's
    ``mhlo.frontend_attributes``, which XLA's converter shows on the ``HloModule`` line."""
    with make_context():
        module = ir.Module.parse(text)
        async_pairs_as_collectives(module)
        if notes:
            module.operation.attributes["mhlo.frontend_attributes"] = ir.DictAttr.get(
                {key: ir.StringAttr.get(value) for key, value in notes.items()})
        for op in _ops_named(module, "sdy.sharding_constraint", "sdy.reshard"):
            with ir.InsertionPoint(op), op.location:
                call = ir.Operation.create(
                    "stablehlo.custom_call", results=[op.results[0].type], operands=list(op.operands),
                    attributes={"call_target_name": ir.StringAttr.get("Sharding"),
                                "mhlo.sharding": ir.StringAttr.get(hlo_sharding(str(op.attributes["sharding"])))})
            op.results[0].replace_all_uses_with(call.results[0])
            op.erase()
        return _text(module)


def async_pairs_as_collectives(module: ir.Module) -> None:
    """Replace each ``stablehlo.async_start`` whose future only ``stablehlo.async_done``
    reads (what JAX's ``psum_start(...).done()`` and its kin lower to) by the ops of its
    region, at the start's place, and the done's results by the values the region returns.
    XLA's CPU compiles such a pair to the collective alone, marked with the frontend
    attribute ``async_collective_name`` (the start's name); so does this, with the
    start's location name when it has one (text printed without locations has none). The values are the same: the spec's ``async_start`` runs its
    region, and ``async_done`` waits for its results (stablehlo/docs/spec.md)."""
    for start in _ops_named(module, "stablehlo.async_start"):
        users = [use.owner for result in start.results for use in result.uses]
        if not users or any(user.name != "stablehlo.async_done" for user in users):
            continue
        returned, clones = _clone_body(start.regions[0].blocks[0], start, "stablehlo.return")
        named = _LOCATION_NAME.match(str(start.location))
        if named:
            for clone in clones:
                clone.attributes["mhlo.frontend_attributes"] = ir.DictAttr.get(
                    {"async_collective_name": ir.StringAttr.get(named.group(1))})
        for done in users:
            for result, value in zip(done.results, returned):
                result.replace_all_uses_with(value)
            done.erase()
        start.erase()


FACTORS = "ijklmnopqrstuvwxyz"   # a sharding rule's factors, named in order


def chlo_sharding_rule(operation: ir.Operation) -> ir.Attribute | None:
    """An ``sdy.sharding_rule`` for a CHLO op, which Shardy has none for: an element-wise
    op's (one result, no regions, operands all of its result's shape: each dimension one
    factor shared by all), or ``chlo.top_k``'s (the batch dimensions shared, the last
    dimension whole: a factor that needs replication); None for other ops."""
    if operation.name == "chlo.top_k":
        shape = ir.RankedTensorType(operation.operands[0].type).shape
        k = ir.RankedTensorType(operation.results[0].type).shape[-1]
        factors = list(FACTORS[:len(shape) + 1])   # the batch's, the operand's last, the results' last
        batch, last, chosen = factors[:-2], factors[-2], factors[-1]
        operand, result = f"[{', '.join(batch + [last])}]", f"[{', '.join(batch + [chosen])}]"
        sizes = ", ".join(f"{factor}={size}" for factor, size in zip(factors, [*shape, k]))
        return ir.Attribute.parse(f"#sdy.op_sharding_rule<({operand})->({result}, {result}) {{{sizes}}} "
                                  f"need_replication={{{last}, {chosen}}}>")
    if len(operation.results) != 1 or len(operation.regions):
        return None
    shape = ir.RankedTensorType(operation.results[0].type).shape
    if any(ir.RankedTensorType(value.type).shape != shape for value in operation.operands):
        return None
    factors = FACTORS[:len(shape)]
    dimensions = f"[{', '.join(factors)}]"
    sizes = f" {{{', '.join(f'{factor}={size}' for factor, size in zip(factors, shape))}}}" if shape else ""
    return ir.Attribute.parse(f"#sdy.op_sharding_rule<({', '.join([dimensions] * len(operation.operands))})"
                              f"->({dimensions}){sizes}>")


def _return_instead(func, block: ir.Block, values: list, location) -> None:
    """End ``block`` (its terminator already gone) with ``func.return values`` and make
    ``func``'s result types, result attributes and aliasing match."""
    with ir.InsertionPoint(block), location:
        ir.Operation.create("func.return", operands=values)
    inputs = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs
    func.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(inputs, [value.type for value in values]))
    if "res_attrs" in func.attributes:
        del func.attributes["res_attrs"]
    _drop_aliasing(func)


def _body(func) -> ir.Block:
    return func.regions[0].blocks[0]


def _inline(call: ir.Operation, callee: ir.Operation) -> None:
    returned, _ = _clone_body(_body(callee), call, "func.return")
    for result, value in zip(call.results, returned):
        result.replace_all_uses_with(value)
    call.erase()


def _clone_body(body: ir.Block, op: ir.Operation, terminator: str, mapping: dict | None = None) -> tuple[list, list]:
    """Clone the ops of ``body`` before ``op``, its arguments read as ``op``'s operands
    (or each value ``v`` of ``mapping`` as ``mapping[v]``); returns the values its
    ``terminator`` returns, and the clones."""
    mapping = dict(zip(body.arguments, op.operands)) if mapping is None else dict(mapping)
    clones = []
    for inner in body.operations:
        inner = inner.operation
        if inner.name == terminator:
            return [mapping.get(value, value) for value in inner.operands], clones
        clone = inner.clone(ip=ir.InsertionPoint(op))
        _remap(clone, mapping)
        mapping.update(zip(inner.results, clone.results))
        clones.append(clone)
    raise ModuleError(f"a region of {op.name} does not end with {terminator}")


def _remap(op: ir.Operation, mapping: dict) -> None:
    """Point the operands of ``op`` and of the ops in its regions at the inlined values."""

    def visit(inner):
        for index, operand in enumerate(inner.operands):
            new = mapping.get(operand)
            if new is not None:
                inner.operands[index] = new
        return ir.WalkResult.ADVANCE

    op.walk(visit)


def _drop_aliasing(func: ir.Operation) -> None:
    """Output aliasing (donation) refers to result numbers that no longer exist."""
    if "arg_attrs" not in func.attributes:
        return
    kept = []
    for entry in ir.ArrayAttr(func.attributes["arg_attrs"]):
        entry = ir.DictAttr(entry)
        kept.append(ir.DictAttr.get({entry[i].name: entry[i].attr for i in range(len(entry))
                                     if entry[i].name not in _ALIASING_KEYS}))
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(kept)


def _text(module) -> str:
    return module.operation.get_asm(enable_debug_info=True)
