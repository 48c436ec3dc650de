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
  argument is deleted by then. For a function with donated arguments the guard
  keeps a host copy of each call's results, and a donated argument that one of them
  is (a training loop's state, made by the previous step) is replayed from its copy;
  one that no call inside the block made cannot be, and the error says so.
* the Python path (a function's first call, a call with effects) calls no hook: the
  guard wraps ``pjit._run_python_pjit`` while a guard is on, and copies donated
  arguments before the call. A setting of ours in the key of the C++ cache (on
  inside the block) makes a function's first call under a guard take this path
  (its program compiled once, JAX's caches unchanged), so the first step's donated
  state is copied too.

The check of a finite call: one jitted program reduces every float result to a
boolean where it lives (results on one device joined into one vector, a sharded result
reduced per device), dispatched with the call and read one call behind: at the next
checked call or at the block's end, when it is done, so the backend's queue stays full
and no call waits for a round trip to the host. The error of a call is raised at the
next call (naming the call that made the value) or at the block's end. A call with
donated arguments is checked at once, on the host copies kept of its results; so is
every call under the environment form, which has no block's end.
Functions JAX itself jits (``jnp`` functions, single primitives applied outside
``jit``) are not checked: an ``-inf`` that eager code writes on purpose is no alarm.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import contextlib
import functools
import os
import threading
import weakref

import numpy as np

from ..program.calls import _hide_our_frames
from ..errors import InterpreterError
from .compare import compare
from .nonfinite import _nonfinite, find_nonfinite

VARIABLE = "STABLEHLO_INTERP_DEBUG_NANS"
_own = threading.local()   # the guard's own jitted calls (its check, a replay) are not checked


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
        # per function with donated arguments: its last call's results, and their host copies
        self._kept: dict = {}
        self._pending: tuple | None = None   # the last call's check, not yet read: (verdict, name, number, ...)

    def __call__(self, function: Any, args: tuple, kwargs: dict, output: Any) -> None:
        """JAX's post-call hook: a call on the C++ fast path has returned ``output``."""
        if self.previous is not None:
            self.previous(function, args, kwargs, output)
        if _busy() or getattr(function, "_jit_info", None) is None:   # (a pmap: not checked)
            return
        wrapped = function._fun
        if not _checked(wrapped):
            return
        self.after_call(wrapped, output, _donates(function._jit_info), lambda: self._replay(function, args, kwargs))

    def after_call(self, wrapped, output, donates: bool, replay) -> None:
        """Count the call of ``wrapped``, check its ``output``; on a NaN or inf, raise the
        error with ``replay()``'s answer: ``(lowered, args, kwargs)`` of the interpreter's
        replay, or None where a donated input is lost. Where the call ``donates``
        arguments, keep host copies of the results (a later call may be given them), and
        check them there. Otherwise the check is read one call behind (``behind``): it is
        dispatched now and read at the next call or the block's end (:meth:`settle`)."""
        import jax

        number = self.calls[wrapped] = self.calls.get(wrapped, 0) + 1
        leaves = [leaf for leaf in jax.tree.leaves(output) if isinstance(leaf, jax.Array)]
        if donates:
            copies = [_host_copy(leaf) for leaf in leaves]
            elsewhere = [leaf for leaf, copy in zip(leaves, copies) if copy is None]   # (other processes' shards)
            verdict = not any(_nonfinite(copy) for copy in copies if copy is not None) and _all_finite(elsewhere)
        else:
            verdict = _all_finite(leaves, wait=not self.behind)
        self.settle()
        self._pending = (verdict, wrapped, number, _platforms(leaves[:1]), replay)   # (a call's results: one platform)
        if donates or not self.behind or (self.compare_every and number % self.compare_every == 0):
            self.settle()
        if self.compare_every and number % self.compare_every == 0:
            self._compare(_name(wrapped), number, leaves, replay)
        if donates:
            self._kept[wrapped] = [(weakref.ref(leaf), copy) for leaf, copy in zip(leaves, copies)]

    def settle(self) -> None:
        """Read the check of the last call not yet read, and raise its error if it returned
        a NaN or inf (at the next call, at the block's end)."""
        if self._pending is None:
            return
        (verdict, wrapped, number, platforms, replay), self._pending = self._pending, None
        if not bool(verdict):
            raise self._error(_name(wrapped), number, platforms, replay)

    def _compare(self, name: str, number: int, leaves: list, replay) -> None:
        """Compare call ``number`` with the interpreter (:func:`compare` on the call's
        program and inputs, on the platform its results are on); raise a
        :class:`DivergentCall` where a result differs beyond rounding noise."""
        with _guard_at_work():
            inputs = replay()
            if inputs is None:   # a donated input no copy holds: this call is not compared
                return
            platform = next(iter(leaves[0].sharding.device_set)).platform if leaves else "cpu"
            comparison = compare(inputs[0], *inputs[1], backend=platform, **inputs[2])
        self.compared.append((name, number))
        if not comparison.explained:
            raise DivergentCall(f"call {number} of {name} differs from the interpreter's run of the same program on "
                                f"the same inputs beyond rounding noise:\n{comparison}", name, number, comparison)

    def _error(self, name: str, number: int, platforms: str, replay) -> NonFiniteCall:
        """The error of call ``number`` of ``name``, with the interpreter's replay."""
        heading = f"call {number} of {name} returned a NaN or inf on {platforms}"
        try:
            with _guard_at_work():
                inputs = replay()
                report = None if inputs is None else find_nonfinite(inputs[0], *inputs[1], **inputs[2])
        except Exception as failure:  # noqa: BLE001 - the backend's NaN is still the news, with why no replay
            error = NonFiniteCall(f"{heading}; the interpreter could not replay it: {type(failure).__name__}: "
                                  f"{failure}", name, number, None, None)
            error.__cause__ = failure
            return error
        if inputs is None:
            message = (f"{heading}; it cannot be replayed: a donated argument was deleted by the call and no "
                       "earlier call inside si.debug_nans() made it (the guard keeps the results of calls with "
                       f"donated arguments). Enter the block before the call that made the argument, or jit {name} "
                       "without donate_argnums")
            return NonFiniteCall(message, name, number, None, None)
        if report is None:
            message = (f"{heading}; the interpreter's replay of the same program on the same inputs is finite: "
                       "the backend made the value, not the program. Next: si.passes(error.lowered, *error.arguments, "
                       "**error.keyword_arguments) (or `stablehlo-interp passes` on the module) names the compiler "
                       "pass after which the program computes something else")
        else:
            message = f"{heading}; the interpreter replayed it on the same inputs:\n{report}"
        return NonFiniteCall(message, name, number, inputs, report)

    def _replay(self, function, args: tuple, kwargs: dict):
        """A fast-path call's replay: the jitted function's lowering for the call (JAX's
        cached one: the module it compiled), and its dynamic arguments, each deleted
        (donated) array replaced by the host copy kept of it; None when one has none."""
        import jax

        copies = {id(reference()): copy for kept in self._kept.values() for reference, copy in kept
                  if reference() is not None}
        missing = []

        def restored(leaf):
            if not (isinstance(leaf, jax.Array) and leaf.is_deleted()):
                return leaf
            if id(leaf) not in copies:
                missing.append(leaf)
            return copies.get(id(leaf))

        replay_args, replay_kwargs = jax.tree.map(restored, (tuple(args), dict(kwargs)))
        if missing:
            return None
        static = set(function._jit_info.static_argnums)
        dynamic = [value for index, value in enumerate(replay_args) if index not in static]
        return function.lower(*args, **kwargs), dynamic, replay_kwargs


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
    result = _original_run_python_pjit(p, args_flat, fun, args, kwargs)
    if result[5] is not None:   # the executable: a call that ran (not one traced inside another)
        guard.after_call(fun, result[1], any(donated), lambda: _replay_flat(p, args_flat, before))
    return result


def _replay_flat(p, args_flat, before):
    """A Python-path call's replay: its lowering (JAX's cached one), its dynamic arguments
    as copied before the call."""
    from jax._src import pjit, stages

    traced = stages.Traced(list(map(pjit.convert_to_metaty, args_flat)), p.params, p.in_tree, p.out_tree,
                           p.consts)
    replay_args, replay_kwargs = p.in_tree.unflatten(before)
    return traced.lower(), replay_args, replay_kwargs


def _original_run_python_pjit(*arguments):
    from jax._src import pjit

    return _ORIGINAL[0](*arguments) if _ORIGINAL else pjit._run_python_pjit(*arguments)


_ORIGINAL: list = []   # JAX's _run_python_pjit while ours replaces it


def _checked(wrapped) -> bool:
    """Whether the guard checks a call of the jitted Python function ``wrapped``: one
    jitted outside JAX (a ``jnp`` function or a primitive applied outside ``jit`` is JAX's
    own)."""
    if getattr(wrapped, "_apply_primitive", False):
        return False
    return not (getattr(wrapped, "__module__", None) or "").startswith(("jax.", "jax._src"))


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
    waited for (``bool()`` of it waits)."""
    whole: list = []
    sharded: list = []
    for leaf in leaves:
        if _inexact(leaf.dtype):
            (whole if len(leaf.sharding.device_set) == 1 else sharded).append(leaf)
    if not whole and not sharded:
        return True
    with _guard_at_work():
        try:
            verdict = _finite_check()(whole, sharded)
        except ValueError:   # arrays on different devices: no one program takes them all
            return not any(_nonfinite(np.asarray(shard.data)) for leaf in (*whole, *sharded)
                           for shard in leaf.addressable_shards if shard.replica_id == 0)
    if wait:
        return bool(verdict)
    verdict.copy_to_host_async()
    return verdict


@functools.cache
def _finite_check():
    """The check's program. Arrays on one device are joined into one vector per dtype and
    each vector reduced once (XLA fuses the join into the reduction: one loop; a reduction
    per array is a kernel per array, about 3.5x the cost for a step's 40 to 150 small
    results, and so is an op on each array before the join); a sharded array is reduced
    where its shards live (a partial sum per device), as joining it to the others would
    gather it."""
    import jax
    import jax.numpy as jnp

    def zeros_or_nans(values):
        """0 where an element is finite, NaN where it is not (no finite value overflows)."""
        zeroed = values * 0
        return (jnp.abs(zeroed) if jnp.iscomplexobj(zeroed) else zeroed).astype(jnp.float32)

    def all_finite(whole, sharded):
        by_dtype: dict = {}
        for leaf in whole:
            by_dtype.setdefault(leaf.dtype, []).append(jnp.ravel(leaf))
        sums = [jnp.sum(zeros_or_nans(jnp.concatenate(group))) for group in by_dtype.values()]
        sums += [jnp.sum(zeros_or_nans(leaf)) for leaf in sharded]
        return jnp.isfinite(sum(sums))

    return jax.jit(all_finite)


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


def _host_copy(leaf) -> np.ndarray | None:
    """A NumPy copy of a JAX array put together from its shards (None where this process
    does not hold all of them)."""
    if len(leaf.sharding.device_set) == 1:
        return np.array(leaf.addressable_data(0))
    if not leaf.is_fully_addressable:
        return None
    copy = np.empty(leaf.shape, leaf.dtype)
    for shard in leaf.addressable_shards:
        if shard.replica_id == 0:
            copy[shard.index] = np.asarray(shard.data)
    return copy


def _platforms(leaves) -> str:
    found = sorted({device.platform for leaf in leaves for device in leaf.sharding.device_set})
    return " and ".join(found) or "the backend"


def _name(wrapped) -> str:
    """The jitted Python function's name, and where it is defined: ``step (train.py:12)``;
    the name alone for a library's wrapper that took the user's function's name (Equinox's
    ``filter_jit`` jits a function of its own named as the user's: its code is not theirs)."""
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
    try:
        try:
            yield guard
        except Exception:
            guard.settle()   # the last call's NaN, if it made one, is the news (the block's error its context)
            raise
        guard.settle()
    finally:
        _patch(-1)
        _jit_key().swap_local(previous_key)
        state.swap_local(previous)


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
    _patch(+1)   # for the rest of the process
    return guard


def _patch(change: int) -> None:
    """Count a guard in (+1) or out (-1): JAX's ``_run_python_pjit`` is ours while one is on
    (and, as for every tool, this package's frames are no source lines of the programs
    JAX traces under it)."""
    from jax._src import pjit

    _hide_our_frames()
    with _PATCH_LOCK:
        _USERS[0] += change
        if _USERS[0] == 1 and not _ORIGINAL:
            _ORIGINAL.append(pjit._run_python_pjit)
            pjit._run_python_pjit = _run_python_pjit
        elif _USERS[0] == 0 and _ORIGINAL:
            pjit._run_python_pjit = _ORIGINAL.pop()


_PATCH_LOCK = threading.Lock()
_USERS = [0]   # the guards on

