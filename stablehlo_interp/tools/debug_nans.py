"""The NaN guard of long runs: jitted calls run on their own backend at full speed, and
the first call that returns a NaN or inf is replayed on the interpreter.

    with si.debug_nans():
        for step in range(100_000):
            state, loss = train_step(state, batch)     # raises FloatingPointError

Inside the block, after every call of a jitted function, its results are checked; a
call that returned a NaN or inf is replayed by the interpreter, on the program JAX
handed the backend (the jitted function's lowering, which JAX caches: the very module
it compiled) and on the call's inputs, and :func:`find_nonfinite`'s report is raised
as a :class:`NonFiniteCall` (a ``FloatingPointError``) naming the call's number, the
op, its source line and the path to the result. When the replay is finite, the
backend made the value and the program did not: the error says so, and names the
next step, ``si.passes`` (the compiler pass after which the program computes
something else).

For a script one cannot edit, ``STABLEHLO_INTERP_DEBUG_NANS=1`` turns the guard on for
the whole process, when JAX loads its plugins (this package's device is one).

Two hooks, both JAX's own paths of a jitted call:

* the C++ fast path (every call of a compiled function) calls JAX's post-call hook,
  the one ``jax_debug_nans`` uses (``_post_hook_state``, jax/_src/api.py), with the
  function, its arguments and its results: the guard is that hook, so calls keep
  the fast path. Called after the call, it cannot copy inputs before it: a donated
  argument is deleted by then: a program with donated arguments copies them itself
  (below); for one checked by a program of its own (a sharded one) the guard keeps a
  host copy of each call's results, and a donated argument that one of them is (a
  training loop's state, made by the previous step) is replayed from its copy; one
  that no call inside the block made cannot be, and the error says so.
  JAX resets this hook where a ``jax_debug_nans`` or ``jax_debug_infs`` setting
  changes (``jnp.var`` traces under ``config.debug_nans(False)``): the guard wraps
  those settings' hooks and puts itself back.
* the Python path (a function's first call, a call with effects) calls no hook: the
  guard wraps ``pjit._run_python_pjit`` while a guard is on, and copies donated
  arguments before the call. A setting of ours in the key of the C++ cache (on
  inside the block) makes a function's first call under a guard take this path
  (JAX's caches outside the guard unchanged), so the first step's donated state is
  copied too; there the guard compiles the program with its check (below), and
  wraps ``pjit._get_fastpath_data`` to hand the C++ fast path that executable.

The check of a finite call is part of the call's own program: for a function whose
program runs on one device, the guard compiles, at its first call under a guard, the
program JAX made with one more result, a boolean that is false where a float result
holds a NaN or inf (its float results joined per dtype and reduced once: XLA fuses it
with the step), and hands JAX's C++ fast path that executable, with a result tree whose
last node takes the boolean off as the results are put together (the user gets the
function's own results, computed by the same ops). The boolean is read one call behind:
at the next checked call or at the block's end, so the backend's queue stays full and
no call waits for a round trip to the host; the error of a call is raised at the next
call (naming the call that made the value) or at the block's end. A sharded program
(several devices: joining its results would move them between devices) is checked by
a program of its own after the call, each result reduced where its blocks live. A
program with donated arguments also copies them (one vector per dtype) before its
results reuse their buffers: the replay's inputs, kept until the check is read, which
is at once for such a call (no second call's copies held); so is every call under the
environment form checked at once, which has no block's end.
Functions JAX itself jits (``jnp`` functions, single primitives applied outside
``jit``) are not checked: an ``-inf`` that eager code writes on purpose is no alarm.
A function compiled ahead of time (``stages.Compiled``, whose calls the guard wraps)
is checked by a program of its own after the call, and replayed from the ``Lowered``
the guard keeps of what is compiled inside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import contextlib
import functools
import math
import os
import threading
import weakref

import numpy as np

from ..program.calls import _hide_our_frames, lower_for
from ..errors import InterpreterError
from .compare import compare
from .nonfinite import _nonfinite, find_nonfinite

VARIABLE = "STABLEHLO_INTERP_DEBUG_NANS"
_own = threading.local()   # this thread's: the guard at work (its own calls are not checked), the blocks' guards,
                           # the boolean the last call's results put aside


class NonFiniteCall(FloatingPointError):
    """A jitted call inside :func:`debug_nans` returned a NaN or inf.

    ``name`` is the jitted function's, ``call`` the call's number (1: the first call of
    that function inside the block); ``lowered`` the program the backend ran (a
    ``jax.stages.Lowered``), ``arguments`` and ``keyword_arguments`` the call's inputs as
    replayed (donated ones as host copies): None where they could not be kept.
    ``report`` is :func:`find_nonfinite`'s answer on the replay (None when the replay
    was finite, or did not run)."""

    def __init__(self, message: str, name: str, call: int, replayed: tuple | None, report: Any) -> None:
        super().__init__(message)
        self.name, self.call, self.report = name, call, report
        self.lowered, self.arguments, self.keyword_arguments = replayed or (None, None, None)


class DivergentCall(InterpreterError):
    """A call that ``debug_nans(compare_every=N)`` compared with the interpreter computed
    something else beyond rounding noise: ``name``, ``call`` as in :class:`NonFiniteCall`,
    ``comparison`` :func:`compare`'s answer (its first divergent op)."""

    def __init__(self, message: str, name: str, call: int, comparison: Any) -> None:
        super().__init__(message)
        self.name, self.call, self.comparison = name, call, comparison


class DebugNans:
    """The guard (see the module's docstring). ``calls`` counts the calls of each jitted
    function it saw, by the Python function jitted; ``previous`` is the hook it chains to
    (JAX's own ``jax_debug_nans`` check, where that is on)."""

    def __init__(self, previous: Any = None, compare_every: int | None = None, behind: bool = True) -> None:
        self.previous = previous
        self.compare_every = compare_every
        self.behind = behind
        self.compared: list = []   # (function's name, call number) of each call compared
        self.calls: dict = {}
        # per function with donated arguments: its last call's results, and their copies
        self._kept: dict = {}
        self._pending: tuple | None = None   # the last call's check, not yet read: (verdict, name, number, ...)

    def __call__(self, function: Any, args: tuple, kwargs: dict, output: Any) -> None:
        """JAX's post-call hook: a call on the C++ fast path has returned ``output``."""
        checked = _take_checked()   # (the check's boolean and copies, where the call's program made them)
        if self.previous is not None:
            self.previous(function, args, kwargs, output)
        if _busy() or getattr(function, "_jit_info", None) is None:   # (a pmap: not checked)
            return
        wrapped = function._fun
        if not _checked(wrapped):
            return
        flag, kept = checked or (None, None)
        self.after_call(wrapped, output, _donates(function._jit_info),
                        lambda platform=None: self._replay(function, args, kwargs, kept, platform), flag, kept)

    def after_call(self, wrapped, output, donates: bool, replay, flag: Any = None, kept: Any = None) -> None:
        """Count the call of ``wrapped``, check its ``output`` (``flag``: the boolean its
        program computed, where it did; ``kept``: the copies of its donated arguments it
        made, where it did, a :class:`_JoinedCopies`); on a NaN or inf, raise the error
        with ``replay()``'s answer: ``(lowered, args, kwargs)`` of the interpreter's
        replay, or why it cannot be (a donated input lost). Where the call ``donates``
        arguments, read the check at once (its copies are kept no longer than that), and
        where its program made no copies, keep host copies of its results (a later call
        may be given them). Otherwise the check is read one call behind (``behind``): it is
        dispatched now and read at the next call or the block's end (:meth:`settle`)."""
        import jax

        number = self.calls[wrapped] = self.calls.get(wrapped, 0) + 1
        compared = bool(self.compare_every) and number % self.compare_every == 0
        copied_here = donates and kept is None   # (its results copied to the host for a later call's replay)
        leaves = [] if flag is not None and not (copied_here or compared) else \
            [leaf for leaf in jax.tree.leaves(output) if isinstance(leaf, jax.Array)]
        if copied_here:
            copies = [_host_copy(leaf) for leaf in leaves]
        if flag is not None:
            verdict = flag
            if self.behind and not donates:
                flag.copy_to_host_async()
        elif copied_here:
            elsewhere = [leaf for leaf, copy in zip(leaves, copies) if copy is None]   # (other processes' shards)
            verdict = not any(_nonfinite(copy) for copy in copies if copy is not None) and _all_finite(elsewhere)
        else:
            verdict = _all_finite(leaves, wait=not self.behind)
        self.settle()
        where = flag if flag is not None else (leaves[0] if leaves else None)   # (a call's results: one platform)
        self._pending = (verdict, wrapped, number, where, replay)
        if donates or not self.behind or compared:
            self.settle()
        if compared:
            self._compare(_name(wrapped), number, where, replay)
        if copied_here:
            self._kept[wrapped] = ([weakref.ref(leaf) for leaf in leaves], copies)

    def settle(self) -> None:
        """Read the check of the last call not yet read, and raise its error if it returned
        a NaN or inf (at the next call, at the block's end)."""
        if self._pending is None:
            return
        (verdict, wrapped, number, where, replay), self._pending = self._pending, None
        if not np.asarray(verdict):   # (a JAX array: np.asarray is a tenth of bool()'s cost)
            raise self._error(_name(wrapped), number, _platforms(where), replay)

    def _compare(self, name: str, number: int, where: Any, replay) -> None:
        """Compare call ``number`` with the interpreter (:func:`compare` on the call's
        program and inputs, on the platform of ``where``, one of its results or its
        check's boolean); raise a
        :class:`DivergentCall` where a result differs beyond rounding noise."""
        with _guard_at_work():
            inputs = replay()
            if isinstance(inputs, str):   # (why it cannot be replayed: this call is not compared)
                return
            platform = next(iter(where.sharding.device_set)).platform if where is not None else "cpu"
            comparison = compare(inputs[0], *inputs[1], backend=platform, **inputs[2])
        self.compared.append((name, number))
        if not comparison.explained:
            raise DivergentCall(f"call {number} of {name} differs from the interpreter's run of the same program on "
                                f"the same inputs beyond rounding noise:\n{comparison}", name, number, comparison)

    def _error(self, name: str, number: int, platforms: str, replay) -> NonFiniteCall:
        """The error of call ``number`` of ``name``, with the interpreter's replay. Where the
        interpreter cannot run the program lowered for another platform (a TPU's passes
        host callbacks' operands over transfer channels), the function lowered for the CPU
        is replayed instead, and the error says so."""
        heading = f"call {number} of {name} returned a NaN or inf on {platforms}"
        try:
            inputs, report = _replayed(replay)
        except Exception as failure:  # noqa: BLE001 - the backend's NaN is still the news, with why no replay
            said = f"{type(failure).__name__}: {failure}"
            try:
                inputs, report = (None, None) if platforms == "cpu" else _replayed(lambda: replay("cpu"))
            except Exception:  # noqa: BLE001 - the first failure is the one to tell
                inputs = None
            if inputs is None:
                error = NonFiniteCall(f"{heading}; the interpreter could not replay it: {said}", name, number, None,
                                      None)
                error.__cause__ = failure
                return error
            heading += (f"; the interpreter could not run its program for {platforms} ({said.splitlines()[0]}), "
                        "so it replayed the function lowered for the CPU")
        if isinstance(inputs, str):
            return NonFiniteCall(f"{heading}; it cannot be replayed: {inputs}", name, number, None, None)
        if report is None:
            message = (f"{heading}; the interpreter's replay of the same program on the same inputs is finite: "
                       "the backend made the value, not the program. Next: si.passes(error.lowered, *error.arguments, "
                       "**error.keyword_arguments) (or `stablehlo-interp passes` on the module) names the compiler "
                       "pass after which the program computes something else")
        else:
            message = f"{heading}; the interpreter replayed it on the same inputs:\n{report}"
        return NonFiniteCall(message, name, number, inputs, report)

    def _replay(self, function, args: tuple, kwargs: dict, kept: _JoinedCopies | None = None,
                platform: str | None = None):
        """A fast-path call's replay: the jitted function's lowering for the call (JAX's
        cached one: the module it compiled; for ``platform`` where given), and its
        dynamic arguments, each donated one replaced by the copy its program made
        (``kept``), else each deleted (donated) array by the host copy kept of it; why
        not, where one has none."""
        import jax

        def lowered():
            if platform is None:
                return function.lower(*args, **kwargs)
            return lower_for(function.trace(*args, **kwargs), platform)

        info = function._jit_info
        dynamic = [value for index, value in enumerate(args) if index not in set(info.static_argnums)]
        if kept is not None:   # (flat as JAX flattens a call's dynamic arguments)
            named = {name: value for name, value in kwargs.items() if name not in set(info.static_argnames)}
            leaves, tree = jax.tree.flatten((dynamic, named))
            dynamic, named = jax.tree.unflatten(tree, kept.restored(leaves))
            return lowered(), dynamic, {**kwargs, **named}

        copies = {id(reference()): (kept, index) for references, kept in self._kept.values()
                  for index, reference in enumerate(references) if reference() is not None}
        missing = []

        def restored(leaf):
            if not (isinstance(leaf, jax.Array) and leaf.is_deleted()):
                return leaf
            if id(leaf) not in copies:
                missing.append(leaf)
                return None
            kept, index = copies[id(leaf)]
            return kept[index]

        replay_args, replay_kwargs = jax.tree.map(restored, (dynamic, dict(kwargs)))
        if missing:
            name = _name(function._fun)
            return ("a donated argument was deleted by the call and no earlier call inside si.debug_nans() made it "
                    "(the guard keeps the results of calls with donated arguments). Enter the block before the call "
                    f"that made the argument, or jit {name} without donate_argnums")
        return lowered(), replay_args, replay_kwargs


def _guard() -> DebugNans | None:
    """The guard on in this thread, if any."""
    hook = _hook_state().value
    return hook if isinstance(hook, DebugNans) else None


def _run_python_pjit(p, args_flat, fun, args, kwargs):
    """JAX's ``pjit._run_python_pjit`` checked: the path of a call the C++ fast path does not
    take (a function's first call, one with effects or host callbacks), which calls no
    post-call hook. Donated arguments are copied to the host before the call."""
    guard = _guard()
    if guard is None or _busy() or not _checked(fun):
        return _original_run_python_pjit(p, args_flat, fun, args, kwargs)
    donated = p.params["donated_invars"]
    before = [_host_copy(value) if flag else value for value, flag in zip(args_flat, donated)]
    checking = _with_check(p, args_flat)
    _take_checked()
    result = _original_run_python_pjit(checking or p, args_flat, fun, args, kwargs)
    checked = _take_checked()   # (put aside by the results' tree as JAX put them together)
    if result[5] is not None:   # the executable: a call that ran (not one traced inside another)
        guard.after_call(fun, result[0], any(donated),
                         lambda platform=None: _replay_flat(p, args_flat, before, platform), *checked)
    return result


def _with_check(p, args_flat):
    """The parameters of a call whose program also computes its check (``p`` with the
    check's boolean as one more result, and a result tree that takes it off again), or
    None where the check is a program of its own: a sharded program, one without float
    results, one JAX runs by a path of its own. A program that donates arguments also
    copies them, before its results reuse their buffers (its replay's inputs, kept until
    the check says the call is finite: one call's donated inputs; the arguments of each
    dtype joined into one vector, one loop of XLA's for all, where a host copy per result
    cost 3 to 7 us each on XLA's CPU and a synchronous transfer each on a TPU, 23x the
    step, and a copy per result in the program a kernel each)."""
    from jax._src import config, core

    params = p.params
    closed = params["jaxpr"]
    if (closed.jaxpr.is_high or config.debug_key_reuse.value or not core.trace_state_clean()
            or not any(_inexact(aval.dtype) for aval in closed.out_avals)):
        return None
    if not _on_one_device(params, args_flat):
        return None
    jaxpr, layout = _checked_jaxpr(closed, tuple(params["donated_invars"]))
    added = len(jaxpr.out_avals) - len(closed.out_avals)   # (the copies' vectors, the boolean)
    checked = dict(params, jaxpr=jaxpr, out_shardings=(*params["out_shardings"], *[_unspecified()] * added),
                   out_layouts=(*params["out_layouts"], *[None] * added))
    registry = _default_registry()
    leaf = registry.flatten(0)[1]
    tree = _checked_tree(registry, layout, p.out_tree, _tuple_tree(registry, [leaf] * (added - 1)), leaf)
    return p._replace(params=checked, out_tree=tree)


def _on_one_device(params, args_flat) -> bool:
    """Whether the call's program runs on one device: no mesh around it, no sharding over
    several devices asked for, no argument on several."""
    import jax
    from jax._src.sharding_impls import UnspecifiedValue

    if not params["ctx_mesh"].empty:
        return False
    devices = set()
    for sharding in (*params["in_shardings"], *params["out_shardings"]):
        if not isinstance(sharding, UnspecifiedValue):
            devices |= set(getattr(sharding, "device_set", (None, None)))
    for value in args_flat:
        if isinstance(value, jax.Array):
            devices |= value.sharding.device_set
    return len(devices) <= 1 and None not in devices


_CHECKED_JAXPRS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # JAX's jaxpr -> {donated: with the check}


def _checked_jaxpr(closed, donated: tuple) -> tuple:
    """``closed`` (a call's ClosedJaxpr, JAX's cached one) with more results, its equations
    appended: copies of the arguments ``donated`` flags (:func:`_joined_copies`: XLA
    reads an argument before the results that reuse its buffer overwrite it), then the
    check of its float results (:func:`_finite_flag`); and the copies' layout (None
    without). One per jaxpr and donation, so that JAX's caches of lowerings and
    executables, keyed by the jaxpr, hold it."""
    import jax
    from jax._src import core

    made = _CHECKED_JAXPRS.setdefault(closed, {})
    if donated in made:
        return made[donated]
    jaxpr = closed.jaxpr
    copied = [index for index, flag in enumerate(donated) if flag]
    layout = _copies_layout([closed.in_avals[index] for index in copied], copied) if copied else None
    results = len(jaxpr.outvars)

    def copies_and_check(*values):
        copies = _joined_copies(values[results:], layout) if copied else []
        return (*copies, _finite_flag([value for value in values[:results] if _inexact(value.dtype)], []))

    with _guard_at_work():
        added = jax.make_jaxpr(copies_and_check)(*[jax.ShapeDtypeStruct(aval.shape, aval.dtype) for aval in
                                                   [*closed.out_avals, *(closed.in_avals[i] for i in copied)]])
    given = dict(zip(added.jaxpr.invars, [*jaxpr.outvars, *(jaxpr.invars[index] for index in copied)]))

    def outer(var):
        return given.get(var, var) if isinstance(var, core.Var) else var

    equations = [equation.replace(invars=[outer(var) for var in equation.invars]) for equation in added.jaxpr.eqns]
    paths = jaxpr.debug_info.safe_result_paths(len(jaxpr.outvars))
    copies = len(added.jaxpr.outvars) - 1
    joined = jaxpr.replace(constvars=[*jaxpr.constvars, *added.jaxpr.constvars],
                           outvars=[*jaxpr.outvars, *map(outer, added.jaxpr.outvars)], eqns=[*jaxpr.eqns, *equations],
                           effects=jaxpr.effects | added.jaxpr.effects,
                           debug_info=jaxpr.debug_info._replace(result_paths=(
                               *paths, *[f"si.debug_nans's copies {index}" for index in range(copies)],
                               "si.debug_nans's check")))
    made[donated] = checked = (core.ClosedJaxpr(joined, [*closed.consts, *added.consts]), layout)
    return checked


def _copies_layout(avals, arguments) -> tuple:
    """Where the copy of each donated argument lies among the copies: ``(argument, copy,
    start, shape)``, ``argument`` its index among the call's flat arguments, the
    arguments of a dtype joined into one vector (``start`` in it), one of an extended
    dtype (a PRNG key) a copy of its own (``start`` None)."""
    copies: dict = {}   # a dtype (or an extended argument's index) -> (its copy's number, elements so far)
    layout = []
    for index, (argument, aval) in enumerate(zip(arguments, avals)):
        key = index if _extended(aval.dtype) else aval.dtype
        copy, start = copies.setdefault(key, (len(copies), 0))
        copies[key] = (copy, start + math.prod(aval.shape))
        layout.append((argument, copy, None if key == index else start, aval.shape))
    return tuple(layout)


def _joined_copies(values, layout) -> list:
    """The copies of ``values`` as :func:`_copies_layout` lays them out."""
    import jax.numpy as jnp

    groups: dict = {}
    own = set()   # the copies of one result each (an extended dtype's)
    for value, (_, copy, start, _) in zip(values, layout):
        if start is None:
            own.add(copy)
        groups.setdefault(copy, []).append(value if start is None else jnp.ravel(value))
    return [group[0] if copy in own else jnp.concatenate(group) for copy, group in groups.items()]


def _extended(dtype) -> bool:
    import jax

    return jax.dtypes.issubdtype(dtype, jax.dtypes.extended)


class _JoinedCopies:
    """The copies a call's program made of its donated arguments (:func:`_copies_layout`)."""

    def __init__(self, vectors: tuple, layout: tuple) -> None:
        self.vectors, self.layout = vectors, layout

    def restored(self, arguments: list) -> list:
        """The call's flat arguments, each donated one replaced by its copy."""
        restored = list(arguments)
        for argument, copy, start, shape in self.layout:
            vector = self.vectors[copy]
            restored[argument] = vector if start is None else \
                np.asarray(vector)[start:start + math.prod(shape)].reshape(shape)
        return restored


class _Checked:
    """A node of a result tree: a call's results, the copies of them its program made (if
    any), its check's boolean; its data, the copies' layout. Putting one together (JAX's
    C++ fast path does, from the executable's results) puts the boolean and the copies
    aside for the post-call hook (:func:`_take_checked`) and gives the results alone."""

    __slots__ = ()

    @staticmethod
    def children(node):
        raise TypeError("si.debug_nans's result node is only ever put together, never taken apart")

    @staticmethod
    def together(layout, children):
        results, kept, flag = children
        _own.checked = (flag, _JoinedCopies(kept, layout) if layout else None)
        return results


def _take_checked() -> tuple:
    """``(flag, copies)`` the last call's results put aside (``()``: none did), taken."""
    checked = getattr(_own, "checked", ())
    _own.checked = ()
    return checked


def _checked_tree(registry, layout, results, kept, flag):
    """The tree (in ``registry``) of a call's results, the copies laid out as ``layout``,
    its check's boolean: a :class:`_Checked` node of the trees of each."""
    from jax._src.lib import pytree

    _register_checked()
    return pytree.PyTreeDef.from_node_data_and_children(registry, (_Checked, layout), [results, kept, flag])


def _tuple_tree(registry, trees):
    from jax._src.lib import pytree

    return pytree.treedef_tuple(registry, list(trees))


@functools.cache
def _register_checked() -> None:
    from jax._src import tree_util

    for registry in (tree_util.default_registry, tree_util.dispatch_registry):
        registry.register_node(_Checked, _Checked.children, _Checked.together)


def _get_fastpath_data(executable, out_tree, args_flat, out_flat, *rest):
    """JAX's ``pjit._get_fastpath_data`` for a program with the check: the data of the
    function's own results, then of the copies, then of the check's boolean, in a tree
    that puts them aside (:class:`_Checked`)."""
    from jax._src import pjit, tree_util

    original = _jax_own(pjit, "_get_fastpath_data")
    node = out_tree.node_data()
    if node is None or node[0] is not _Checked:
        return original(executable, out_tree, args_flat, out_flat, *rest)
    results = out_tree.children()[0]
    data = original(executable, results, args_flat, out_flat[:results.num_leaves], *rest)
    if data is None:
        return None
    # the copies and the boolean as JAX hands results to its fast path: a PRNG key as its data
    registry = tree_util.dispatch_registry
    copies, flag = out_flat[results.num_leaves:-1], out_flat[-1]
    copies_leaves, copies_tree = registry.flatten(tuple(copies), None)
    flag_leaves, flag_tree = registry.flatten(flag, None)
    added = [*copies_leaves, *flag_leaves]
    if not all(isinstance(value, type(flag)) for value in added):
        return None
    tree = _checked_tree(registry, node[1], data.out_pytree_def, copies_tree, flag_tree)
    return data._replace(out_pytree_def=tree, out_avals=[*data.out_avals, *(value.aval for value in added)],
                         out_committed=[*data.out_committed, *(value._committed for value in added)])


def _default_registry():
    from jax._src import tree_util

    return tree_util.default_registry


def _unspecified():
    from jax._src.sharding_impls import UNSPECIFIED

    return UNSPECIFIED


def _replay_flat(p, args_flat, before, platform: str | None = None):
    """A Python-path call's replay: its lowering (JAX's cached one; for ``platform``
    where given), its dynamic arguments as copied before the call."""
    from jax._src import pjit, stages

    traced = stages.Traced(list(map(pjit.convert_to_metaty, args_flat)), p.params, p.in_tree, p.out_tree,
                           p.consts)
    replay_args, replay_kwargs = p.in_tree.unflatten(before)
    return (traced.lower() if platform is None else lower_for(traced, platform)), replay_args, replay_kwargs


def _replayed(replay) -> tuple:
    """``(inputs, report)``: ``replay()``'s answer (or why there is none) and
    :func:`find_nonfinite`'s report on it."""
    with _guard_at_work():
        inputs = replay()
        return inputs, None if isinstance(inputs, str) else find_nonfinite(inputs[0], *inputs[1], **inputs[2])


def _compiled_call(compiled, *args, **kwargs):
    """JAX's ``stages.Compiled.__call__`` checked: a call of a function compiled ahead of
    time (``jax.jit(f).lower(...).compile()``), whose program is JAX's, not one with the
    check: its float results are checked by a program of its own after the call (as a
    sharded program's are). Donated arguments are copied to the host before the call.
    Its replay needs the program's StableHLO, which a ``Compiled`` does not keep: the
    guard keeps the ``Lowered`` of each function compiled inside a guard."""
    import jax

    guard = _guard()
    original = _jax_own(type(compiled), "__call__")
    if guard is None or _busy():
        return original(compiled, *args, **kwargs)
    donated = [info.donated for info in jax.tree.leaves(compiled.args_info, is_leaf=_is_arg_info)]
    leaves, tree = jax.tree.flatten((args, kwargs))
    before = [_host_copy(leaf) if donated_here and isinstance(leaf, jax.Array) else leaf
              for leaf, donated_here in zip(leaves, donated)] if len(donated) == len(leaves) and any(donated) else None
    output = original(compiled, *args, **kwargs)

    def replay(platform=None):   # (a Compiled's program: its own platform's only)
        lowered = _LOWERED.get(compiled)
        if lowered is None:
            return ("it was compiled ahead of time outside si.debug_nans(), and a jax.stages.Compiled keeps no "
                    "StableHLO to replay: compile it inside the block (or call the jitted function)")
        replay_args, replay_kwargs = (args, kwargs) if before is None else jax.tree.unflatten(tree, before)
        return lowered, list(replay_args), replay_kwargs

    guard.after_call(compiled, output, False, replay)
    if before is not None:
        guard.settle()   # (the host copies of its inputs are not kept beyond the call)
    return output


def _is_arg_info(value) -> bool:
    from jax._src.stages import ArgInfo

    return isinstance(value, ArgInfo)


def _compile_kept(lowered, *args, **kwargs):
    """JAX's ``stages.Lowered.compile``, the ``Lowered`` kept for the replay of the
    ``Compiled``'s calls."""
    compiled = _jax_own(type(lowered), "compile")(lowered, *args, **kwargs)
    _LOWERED[compiled] = lowered
    return compiled


_LOWERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # a Compiled made inside a guard -> its Lowered


def _original_run_python_pjit(*arguments):
    from jax._src import pjit

    return _jax_own(pjit, "_run_python_pjit")(*arguments)


def _jax_own(owner, name: str):
    """JAX's ``owner.name``, where ours replaces it (:func:`_patch`)."""
    return _ORIGINAL.get((owner, name)) or getattr(owner, name)


_ORIGINAL: dict = {}   # (JAX's module or option, attribute) -> JAX's, while ours replaces it


def _checked(wrapped) -> bool:
    """Whether the guard checks a call of the jitted Python function ``wrapped``: one
    jitted outside JAX (a ``jnp`` function or a primitive applied outside ``jit`` is JAX's
    own), or the body ``jax.pmap`` jits for the user's function (:func:`_pmapped`)."""
    if getattr(wrapped, "_apply_primitive", False):
        return False
    return (not (getattr(wrapped, "__module__", None) or "").startswith(("jax.", "jax._src"))
            or _pmapped(wrapped) is not None)


def _pmapped(wrapped):
    """The user's function of the body ``jax.pmap`` jits (JAX 0.10: a ``shard_map`` of a
    function of pmap's own, ``_cached_shard_map``'s ``_fun``, that calls it); None for
    any other function."""
    if getattr(wrapped, "__module__", None) != "jax._src.pmap":
        return None
    body = getattr(wrapped, "__wrapped__", wrapped)   # (shard_map's wrapper of it)
    code = getattr(body, "__code__", None)
    if code is None or code.co_qualname != "_cached_shard_map.<locals>._fun" or "fun" not in code.co_freevars:
        return None
    return body.__closure__[code.co_freevars.index("fun")].cell_contents


def _donates(jit_info) -> bool:
    return bool(jit_info.donate_argnums or jit_info.donate_argnames)


@functools.cache
def _inexact(dtype) -> bool:
    import jax.numpy as jnp

    return jnp.issubdtype(dtype, jnp.inexact)


def _all_finite(leaves, wait: bool = True) -> Any:
    """Whether every float JAX array of ``leaves`` is finite: one jitted program reduces
    them all where they live (one dispatch, one boolean back), or, for arrays on
    different devices, each shard on the host, as ``jax_debug_nans`` checks them.
    ``wait=False``: the program's boolean, a JAX array on its way to the host, not yet
    waited for (``np.asarray`` of it waits)."""
    from jax.sharding import NamedSharding

    whole: list = []
    sharded: list = []
    for leaf in leaves:
        if _inexact(leaf.dtype):
            (whole if len(leaf.sharding.device_set) == 1 else sharded).append(leaf)
    if not whole and not sharded:
        return True
    placements = tuple((leaf.sharding.mesh, leaf.sharding.spec) if isinstance(leaf.sharding, NamedSharding)
                       else None for leaf in sharded)
    with _guard_at_work():
        try:
            verdict = _finite_check()(whole, sharded, placements)
        except ValueError:   # arrays on different devices: no one program takes them all
            return not any(_nonfinite(np.asarray(shard.data)) for leaf in (*whole, *sharded)
                           for shard in leaf.addressable_shards if shard.replica_id == 0)
    if wait:
        return bool(np.asarray(verdict))
    verdict.copy_to_host_async()
    return verdict


def _finite_flag(whole, sharded, placements=()):
    """The check: whether every element of the float arrays ``whole`` (on one device) and
    ``sharded`` (on several; ``placements``: each one's mesh and partition spec, or None)
    is finite. Arrays on one device are joined into one vector per dtype and each vector
    reduced once (XLA fuses the join into the reduction: one loop; a reduction per array
    is a kernel per array, about 3.5x the cost for a step's 40 to 150 small results, and
    so is an op on each array before the join). Sharded arrays are joined the same way
    on each device, block by block (a ``shard_map`` over their mesh, one partial sum per
    device: no block moves), and the partial sums added (one all-reduce of one number
    per device, where one per array was a collective per array); an array of another
    sharding is reduced as XLA partitions it."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec

    def zeros_or_nans(values):
        """0 where an element is finite, NaN where it is not (no finite value overflows)."""
        zeroed = values * 0
        return (jnp.abs(zeroed) if jnp.iscomplexobj(zeroed) else zeroed).astype(jnp.float32)

    def joined_sum(arrays):
        by_dtype: dict = {}
        for array in arrays:
            by_dtype.setdefault(array.dtype, []).append(jnp.ravel(array))
        return sum(jnp.sum(zeros_or_nans(jnp.concatenate(group))) for group in by_dtype.values())

    sums = [joined_sum(whole)] if whole else []
    by_mesh: dict = {}
    for leaf, placement in zip(sharded, placements or [None] * len(sharded)):
        if placement is None:
            sums.append(jnp.sum(zeros_or_nans(leaf)))
        else:
            by_mesh.setdefault(placement[0], []).append((leaf, placement[1]))
    for mesh, placed in by_mesh.items():
        every_device = PartitionSpec(mesh.axis_names)

        def partial_sum(*blocks):
            return jnp.reshape(joined_sum(blocks), (1,))

        partials = jax.shard_map(partial_sum, mesh=mesh, in_specs=tuple(spec for _, spec in placed),
                                 out_specs=every_device)(*[leaf for leaf, _ in placed])
        sums.append(jnp.sum(partials))
    return jnp.isfinite(sum(sums))


@functools.cache
def _finite_check():
    """The check as a program of its own, run after a call (:func:`_finite_flag`)."""
    import jax

    return jax.jit(_finite_flag, static_argnums=2)


@contextlib.contextmanager
def _guard_at_work() -> Iterator[None]:
    """The guard's own jitted calls (its check, a replay's) are not checked."""
    outer = _busy()
    _own.active = True
    try:
        yield
    finally:
        _own.active = outer


def _busy() -> bool:
    return getattr(_own, "active", False)


def _host_copy(leaf) -> Any:
    """A NumPy copy of a JAX array put together from its shards (None where this process
    does not hold all of them); of a PRNG key (no NumPy dtype), a copy where it lives."""
    if _extended(leaf.dtype):
        return leaf.copy()
    if len(leaf.sharding.device_set) == 1:
        return np.array(leaf.addressable_data(0))
    if not leaf.is_fully_addressable:
        return None
    copy = np.empty(leaf.shape, leaf.dtype)
    for shard in leaf.addressable_shards:
        if shard.replica_id == 0:
            copy[shard.index] = np.asarray(shard.data)
    return copy


def _platforms(array) -> str:
    """The platform a JAX array (a call's result, its check's boolean) lives on."""
    found = sorted({device.platform for device in array.sharding.device_set}) if array is not None else []
    return " and ".join(found) or "the backend"


def _name(wrapped) -> str:
    """The jitted Python function's name, and where it is defined: ``step (train.py:12)``;
    the name alone for a library's wrapper that took the user's function's name (Equinox's
    ``filter_jit`` jits a function of its own named as the user's: its code is not theirs);
    for a function compiled ahead of time, the name JAX gave its program."""
    from jax._src.stages import Compiled

    if isinstance(wrapped, Compiled):
        call = getattr(wrapped._executable, "unsafe_call", None)   # a MeshExecutable's, named "jit(step)"
        program = call.name.removeprefix("jit(").removesuffix(")") if call is not None else "a function"
        return f"{program} (compiled ahead of time)"
    pmapped = _pmapped(wrapped)
    if pmapped is not None:
        return f"{_name(pmapped)} (pmap)"
    name = getattr(wrapped, "__qualname__", None) or getattr(wrapped, "__name__", None) or repr(wrapped)
    code = getattr(wrapped, "__code__", None)
    if code is None or code.co_name != getattr(wrapped, "__name__", code.co_name):
        return name
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


@functools.cache
def _jit_key():
    """A setting of ours in the key of JAX's C++ jit cache, on while a guard is: a
    function's first call under a guard misses that cache (its compiled program is
    JAX's cached one) and takes the Python path, where donated arguments are copied
    before the call."""
    from jax._src import config

    return config.config_ext.Config("stablehlo_interp_debug_nans", False, include_in_jit_key=True)


def _hook_state():
    """JAX's per-call hook (the C++ jit calls it after each call; jax/_src/api.py)."""
    from jax._src import api

    return api._post_hook_state


@contextlib.contextmanager
def debug_nans(compare_every: int | None = None) -> Iterator[DebugNans]:
    """Inside the block (this thread), a call of a jitted function that returns a NaN or
    inf raises a :class:`NonFiniteCall` (a ``FloatingPointError``) with the interpreter's
    replay of it, at the next call or at the block's end (module docstring). ``compare_every=N``: also every N-th
    call of each function is compared with the interpreter (:func:`compare`), and the
    first that differs beyond rounding noise raises a :class:`DivergentCall`. Yields the
    guard (its ``calls`` count each function's calls; ``compared`` lists those compared)."""
    if compare_every is not None and (isinstance(compare_every, bool) or not isinstance(compare_every, int)
                                      or compare_every < 1):
        raise ValueError(f"compare_every is the number of calls between two compared calls, a positive int "
                         f"(or None: none compared), not {compare_every!r}")
    state = _hook_state()
    outer = state.value
    guard = DebugNans(outer.previous if isinstance(outer, DebugNans) else outer,   # (a block in a block: one check)
                      compare_every)
    previous = state.swap_local(guard)   # (JAX's "unset" marker when no block set one)
    previous_key = _jit_key().swap_local(True)
    _patch(+1)
    _blocks().append(guard)
    try:
        try:
            yield guard
        except Exception:
            guard.settle()   # the last call's NaN, if it made one, is the news (the block's error its context)
            raise
        guard.settle()
    finally:
        _blocks().pop()
        _patch(-1)
        _jit_key().swap_local(previous_key)
        state.swap_local(previous)


def _blocks() -> list:
    """This thread's guards of the blocks it is inside, the innermost last."""
    if not hasattr(_own, "blocks"):
        _own.blocks = []
    return _own.blocks


def install_from_environment(environ: Any = os.environ) -> DebugNans | None:
    """Turn the guard on for the whole process (every thread) when
    ``STABLEHLO_INTERP_DEBUG_NANS`` is set to anything but ``0``; the guard, or None."""
    if environ.get(VARIABLE, "") in ("", "0"):
        return None
    state = _hook_state()
    current = state.get_global()
    if isinstance(current, DebugNans):
        return current
    guard = DebugNans(current, behind=False)   # (no block's end to read the last call's check at)
    state.set_global(guard)
    _jit_key().set_global(True)
    _PROCESS_GUARD.append(guard)
    _patch(+1)   # for the rest of the process
    return guard


_PROCESS_GUARD: list = []   # the environment form's guard, once on


def _keep_block_guard() -> None:
    """Put this thread's innermost block's guard back as JAX's post-call hook, where JAX
    has just set it (JAX's own ``jax_debug_nans`` hook, or None: ``jnp.var`` traces
    under ``config.debug_nans(False)``, which resets this thread's hook), chaining to
    what JAX set."""
    blocks = getattr(_own, "blocks", None)
    state = _hook_state()
    if blocks and state.value is not blocks[-1]:
        blocks[-1].previous = state.value
        state.set_local(blocks[-1])


def _keep_process_guard() -> None:
    """The same for the environment form's guard, where JAX has just set the hook of
    every thread (``jax.config.update("jax_debug_nans", ...)``)."""
    state = _hook_state()
    if _PROCESS_GUARD and state.get_global() is not _PROCESS_GUARD[0]:
        _PROCESS_GUARD[0].previous = state.get_global()
        state.set_global(_PROCESS_GUARD[0])


def _then(jax_hook, ours):
    """JAX's hook of an option, then ours."""

    def hook(value):
        jax_hook(value)
        ours()

    return hook


def _replacements():
    """What a guard replaces while one is on: (JAX's module or option, attribute, ours)."""
    from jax._src import config, pjit, stages

    yield pjit, "_run_python_pjit", _run_python_pjit
    yield pjit, "_get_fastpath_data", _get_fastpath_data
    yield stages.Compiled, "__call__", _compiled_call
    yield stages.Lowered, "compile", _compile_kept
    for option in (config.debug_nans, config.debug_infs):   # (their hooks set JAX's post-call hook)
        yield option, "_update_thread_local_hook", _then(option._update_thread_local_hook, _keep_block_guard)
        yield option, "_update_global_hook", _then(option._update_global_hook, _keep_process_guard)


def _patch(change: int) -> None:
    """Count a guard in (+1) or out (-1): what :func:`_replacements` names is ours while
    one is on (and, as for every tool, this package's frames are no source lines of the
    programs JAX traces under it)."""
    _hide_our_frames()
    with _PATCH_LOCK:
        _USERS[0] += change
        if _USERS[0] == 1 and not _ORIGINAL:
            for owner, name, ours in _replacements():
                _ORIGINAL[owner, name] = getattr(owner, name)
                setattr(owner, name, ours)
        elif _USERS[0] == 0 and _ORIGINAL:
            for (owner, name), original in _ORIGINAL.items():
                setattr(owner, name, original)
            _ORIGINAL.clear()


_PATCH_LOCK = threading.Lock()
_USERS = [0]   # the guards on

