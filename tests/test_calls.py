"""si.run and the tools call a JAX function, a jitted one, a Lowered or an Exported the way
JAX calls it (positional and keyword arguments, pytrees, static and unused arguments) and
return its output pytree; a loaded Program keeps the module's form. XLA CPU is the oracle."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stablehlo_interp as si

X = np.arange(3, dtype=np.float32)
CPU = jax.devices("cpu")[0]


def on_cpu(jitted, *args, **kwargs):
    """What ``jax.jit`` returns on XLA CPU, with NumPy leaves."""
    with jax.default_device(CPU):
        return jax.tree.map(np.asarray, jitted(*args, **kwargs))


def assert_same_tree(actual, expected):
    """Same pytree, NumPy leaves of the same dtypes and values (sin may differ from XLA's
    by an ulp of its result, which later sums can leave as an absolute error)."""
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        assert type(got) is np.ndarray and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def scale(a, n):
    return a * n


def halves(tree):
    return {"sum": tree["a"] + tree["b"], "parts": (tree["a"] / 2, tree["b"] / 2)}


def weighted(a, b=1.0):
    return a * b


FIVE_CALLS = {
    "jitted function": (lambda: jax.jit(lambda a: a * 2), jax.jit(lambda a: a * 2), (X,), {}),
    "unused argument": (lambda: jax.jit(lambda a, y: a * 2).lower(X, X), jax.jit(lambda a, y: a * 2), (X, X), {}),
    "static argument": (lambda: jax.jit(scale, static_argnums=1).lower(X, 3), jax.jit(scale, static_argnums=1),
                        (X, 3), {}),
    "pytree": (lambda: jax.jit(halves).lower({"a": X, "b": X + 1}), jax.jit(halves), ({"a": X, "b": X + 1},), {}),
    "keyword argument": (lambda: jax.jit(weighted).lower(X, b=2.0), jax.jit(weighted), (X,), {"b": 2.0}),
}


@pytest.mark.parametrize("case", FIVE_CALLS)
def test_the_five_calls_of_the_issue_return_what_jit_returns(case):
    target, jitted, args, kwargs = FIVE_CALLS[case]
    assert_same_tree(si.run(target(), *args, **kwargs), on_cpu(jitted, *args, **kwargs))


def test_a_loaded_program_keeps_the_module_form_and_calls_as_the_function():
    lowered = jax.jit(lambda a, unused, b: {"r": a * b}).lower(X, X, np.float32(3))
    program = si.load(lowered)
    assert [str(t) for t in program.functions["main"].arg_types] == ["tensor<3xf32>", "tensor<f32>"]
    (flat,) = program.run(X, np.float32(3))                  # the module's form: @main's arguments
    (same,) = si.run(program, X, np.float32(3))
    natural = program.call(X, X, np.float32(3))               # the function's form
    assert_same_tree(natural, {"r": X * 3})
    np.testing.assert_array_equal(flat, X * 3)
    np.testing.assert_array_equal(same, X * 3)
    assert str(program.signature) == "<lambda>(f32[3], f32[3], f32[])"


def test_wrong_arguments_show_the_call_the_function_was_lowered_for():
    lowered = jax.jit(halves).lower({"a": X, "b": X})
    with pytest.raises(si.ArgumentError) as missing_leaf:
        si.run(lowered, {"a": X})
    assert str(missing_leaf.value) == (
        "halves({'a': f32[3], 'b': f32[3]}) is the call halves was lowered for; it was called as "
        "halves({'a': f32[3]}): argument #0 has the structure {'a': *}, the lowering's was {'a': *, 'b': *}")
    two = np.float32(2)   # (a Python float would be f64 with jax_enable_x64)
    with pytest.raises(si.ArgumentError) as wrong_dtype:
        si.run(jax.jit(weighted).lower(X, b=two), X.astype(np.int32), b=2.0)
    assert str(wrong_dtype.value) == (
        "weighted(f32[3], b=f32[]) is the call weighted was lowered for; it was called as weighted(i32[3], b=float): "
        "argument a of @main: expected tensor<3xf32> (float32), got an array of dtype int32")
    with pytest.raises(si.ArgumentError, match=r"called as weighted\(f32\[3\]\): missing keyword argument\(s\) b"):
        si.run(jax.jit(weighted).lower(X, b=two), X)
    with pytest.raises(si.ArgumentError, match=r"scale\(f32\[3\]\) .*\(its static arguments left out\); it was called "
                                               r"as scale\(f32\[2\], int\): no 1 of the 2 positional"):
        si.run(jax.jit(scale, static_argnums=1).lower(X, 3), X[:2], 3)


def test_static_arguments_a_lowering_cannot_place_are_left_out_as_a_compiled_takes_them():
    def f(a, n, m):
        return a * n + m

    lowered = jax.jit(f, static_argnums=1).lower(X, 3, 4)
    with pytest.raises(si.ArgumentError, match="which 1 of the 3 positional arguments are static is ambiguous"):
        si.run(lowered, X, 3, 4)
    expected = on_cpu(jax.jit(f, static_argnums=1), X, 3, 4)
    assert_same_tree(si.run(lowered, X, 4), expected)                          # as lowered.compile()(X, 4)
    assert_same_tree(si.run(jax.jit(f, static_argnums=1), X, 3, 4), expected)  # the jitted function knows


def test_what_a_jax_target_cannot_take():
    lowered = jax.jit(scale, static_argnums=1).lower(X, 3)
    with pytest.raises(si.ModuleError, match="a jax.stages.Compiled holds XLA's compiled executable, not StableHLO: "
                                             "pass the Lowered it was compiled from"):
        si.run(lowered.compile(), X)
    with pytest.raises(si.ModuleError, match=r"a function becomes a module for its arguments: si.run\(f, \*args\)"):
        si.load(scale)
    with pytest.raises(si.ArgumentError, match="function='main' names a function of a module, and a Lowered is "
                                               "called as its JAX function"):
        si.run(lowered, X, 3, function="main")
    with pytest.raises(si.ArgumentError, match=r"keyword arguments \(b\) need a JAX function"):
        si.run(si.load(jax.jit(weighted).lower(X, b=2.0)), X, b=2.0)
    with pytest.raises(si.ArgumentError, match="this module was not lowered from a JAX function: run it with "
                                               r"@main's arguments, program.run\(\*args\)"):
        si.load("func.func @main(%x: tensor<f32>) -> tensor<f32> { return %x : tensor<f32> }").call(np.float32(1))


def test_a_module_for_several_platforms_runs_the_cpu_lowering():
    def f(a, unused):
        return jax.lax.platform_dependent(a, cpu=lambda v: v * 2, default=lambda v: v * 3)

    exported = jax.export.export(jax.jit(f), platforms=("tpu", "cpu"))(X, X)
    assert_same_tree(si.run(exported, X, X), X * 2)
    lowered = jax.jit(f).trace(X, X).lower(lowering_platforms=("cpu", "tpu"))
    assert_same_tree(si.run(lowered, X, X), X * 2)


def test_ordered_effects_pass_tokens_the_function_does_not_see():
    seen = []

    def f(a, unused):
        jax.debug.callback(lambda v: seen.append(np.asarray(v)), a, ordered=True)
        return {"r": a * 2}

    lowered = jax.jit(f).lower(X, X)
    assert str(si.load(lowered).function("main").arg_types[0]) == "!stablehlo.token"
    assert_same_tree(si.run(lowered, X, X), {"r": X * 2})
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], X)


def test_tools_take_the_functions_arguments():
    def f(a, unused, *, b):
        return jnp.log(a * b)

    lowered = jax.jit(f).lower(X, X, b=-1.0)
    report = si.find_nonfinite(lowered, X, X, b=-1.0)
    assert report.op == "stablehlo.log"
    trace = si.trace(f, X + 1, X, b=2.0)
    np.testing.assert_allclose(trace.outputs[0], np.log((X + 1) * 2))
    assert si.compare(jax.jit(f), X + 1, X, b=2.0, backend="cpu").ok


# ----------------------------------------------------------- random calls against XLA CPU

KINDS = ["array", "unused", "static", "tree", "scalar"]


@st.composite
def call_plans(draw):
    positional = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4))
    keywords = draw(st.lists(st.sampled_from(KINDS), max_size=3))
    output = draw(st.sampled_from(["array", "tuple", "dict", "nested"]))
    return positional, keywords, output, draw(st.integers(0, 2**16))


def _value(kind: str, rng):
    if kind == "static":
        return int(rng.integers(1, 4))
    if kind == "scalar":
        return float(rng.standard_normal())
    if kind == "tree":
        return {"u": rng.standard_normal(3).astype(np.float32),
                "v": (rng.standard_normal(3).astype(np.float32), rng.standard_normal(2).astype(np.float32))}
    return rng.standard_normal(3).astype(np.float32)


def _term(kind: str, value, acc):
    if kind == "array":
        return acc + jnp.sin(value)
    if kind == "static":
        return acc * value
    if kind == "tree":
        return acc + value["u"] * value["v"][0]    # value["v"][1] is never used
    if kind == "scalar":
        return acc + value
    return acc


def build_call(plan):
    """A function of the plan's arguments, jitted with its static ones, and one call of it."""
    positional, keywords, output, seed = plan
    rng = np.random.default_rng(seed)
    names = [f"k{i}" for i in range(len(keywords))]

    def function(*args, **kwargs):
        acc = jnp.ones(3, jnp.float32)
        for kind, value in zip(positional, args):
            acc = _term(kind, value, acc)
        for kind, name in zip(keywords, names):
            acc = _term(kind, kwargs[name], acc)
        if output == "array":
            return acc
        if output == "tuple":
            return acc, acc[0]
        if output == "dict":
            return {"y": acc * 2, "z": acc.max()}
        return {"pair": (acc, [acc.min()]), "none": None}

    jitted = jax.jit(function, static_argnums=[i for i, k in enumerate(positional) if k == "static"],
                     static_argnames=[n for n, k in zip(names, keywords) if k == "static"])
    args = tuple(_value(kind, rng) for kind in positional)
    kwargs = {name: _value(kind, rng) for name, kind in zip(names, keywords)}
    return jitted, args, kwargs


def check_random_call(plan):
    jitted, args, kwargs = build_call(plan)
    expected = on_cpu(jitted, *args, **kwargs)
    lowered = jitted.lower(*args, **kwargs)
    exported = jax.export.export(jitted)(*args, **kwargs)
    for target in (jitted, lowered, exported):
        assert_same_tree(si.run(target, *args, **kwargs), expected)


@settings(max_examples=25)
@given(call_plans())
def test_random_calls_agree_with_xla(plan):
    check_random_call(plan)


@pytest.mark.slow
@settings(max_examples=400)
@given(call_plans())
def test_random_calls_agree_with_xla_thoroughly(plan):
    check_random_call(plan)


@pytest.mark.parametrize("implementation", ["threefry2x32", "rbg"])
def test_prng_keys_are_passed_as_the_key_data_jax_lowers_them_to(implementation):
    """A typed PRNG key (one, or a batch) is an argument of the lowered program as its key
    data: the bits drawn are XLA's."""
    key = jax.random.key(3, impl=implementation)
    keys = jax.random.split(key, 4)

    def draws(key, keys):
        return jax.random.bits(key, (3,)), jax.vmap(lambda each: jax.random.randint(each, (2,), 0, 1000))(keys)

    lowered = jax.jit(draws).lower(key, keys)
    for ours, xla in zip(si.run(lowered, key, keys), jax.jit(draws)(key, keys)):
        np.testing.assert_array_equal(ours, xla)
