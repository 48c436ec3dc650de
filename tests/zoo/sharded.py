"""Programs over 8 devices on a 2-D mesh (``data`` x ``model``): a Flax NNX language model's Adam
step with its parameters and batch sharded as Flax's sharding guide shards them, and a
``shard_map`` training step whose collectives are written by hand.

Each program's ``function`` is a plain JAX function of global values; ``mesh`` and the argument
and result ``PartitionSpec`` trees say how it is laid out on the devices
(``ZooProgram.sharded(platform)`` gives it jitted with those shardings, its arguments placed).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import AbstractMesh, PartitionSpec as P

from . import ZooProgram, as_numpy
from .flax_nnx import TinyLM
from .optax_training import optimizer_step

MESH = (("data", 2), ("model", 4))
LEARNING_RATE = 1e-3


def partitioned(initializer, *axes):
    """``initializer`` whose parameter carries the mesh axes of its dimensions (Flax's
    ``nnx.with_partitioning``, as the sharding guide annotates a model)."""
    return nnx.with_partitioning(initializer, axes)


class MegatronBlock(nnx.Module):
    """A pre-norm decoder block laid out as Megatron-LM lays it out: the attention's heads and
    the MLP's hidden features over ``model`` (column-parallel in, row-parallel out)."""

    def __init__(self, width: int, heads: int, rngs: nnx.Rngs):
        dense = nnx.initializers.lecun_normal()
        self.attention_norm = nnx.LayerNorm(width, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(
            num_heads=heads, in_features=width, decode=False, use_bias=False, rngs=rngs,
            kernel_init=partitioned(dense, None, "model", None),        # q, k, v: (width, heads, head)
            out_kernel_init=partitioned(dense, "model", None, None))   # out: (heads, head, width)
        self.mlp_norm = nnx.LayerNorm(width, rngs=rngs)
        self.mlp_in = nnx.Linear(width, 4 * width, rngs=rngs, kernel_init=partitioned(dense, None, "model"),
                                 bias_init=partitioned(nnx.initializers.zeros_init(), "model"))
        self.mlp_out = nnx.Linear(4 * width, width, rngs=rngs, kernel_init=partitioned(dense, "model", None))

    def __call__(self, h, mask):
        h = h + self.attention(self.attention_norm(h), mask=mask)
        return h + self.mlp_out(nnx.gelu(self.mlp_in(self.mlp_norm(h))))


class ShardedLM(TinyLM):
    """A decoder-only LM whose token embeddings and output head are split over ``model`` by
    vocabulary (Megatron's vocabulary-parallel layers: the lookup and the loss's label
    gather read a split dimension), the position embeddings by features, and its blocks as
    :class:`MegatronBlock` (:class:`~.flax_nnx.TinyLM`'s forward pass)."""

    def __init__(self, vocab: int, width: int, heads: int, depth: int, context: int, rngs: nnx.Rngs):
        embedding = nnx.initializers.normal(1.0)
        self.token_embedding = nnx.Embed(vocab, width, rngs=rngs, embedding_init=partitioned(embedding, "model", None))
        self.position_embedding = nnx.Embed(context, width, rngs=rngs,
                                            embedding_init=partitioned(embedding, None, "model"))
        self.blocks = nnx.List([MegatronBlock(width, heads, rngs) for _ in range(depth)])
        self.final_norm = nnx.LayerNorm(width, rngs=rngs)
        self.head = nnx.Linear(width, vocab, rngs=rngs,
                               kernel_init=partitioned(nnx.initializers.lecun_normal(), None, "model"),
                               bias_init=partitioned(nnx.initializers.zeros_init(), "model"))


def flax_nnx_lm(vocab=64, width=32, heads=4, depth=2, context=16, batch=8) -> ZooProgram:
    """The LM's Adam step on next-token cross-entropy: parameters and Adam's moments sharded by
    the model's annotations, the batch over ``data``; results laid out as their arguments."""
    with nnx.use_eager_sharding(False):   # annotated, built on one device: placed by ZooProgram.sharded
        model = ShardedLM(vocab, width, heads, depth, context, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model, nnx.Param)
    param_specs = nnx.to_pure_dict(nnx.get_partition_spec(state))
    params = as_numpy(nnx.to_pure_dict(state))
    optimizer = optax.adam(LEARNING_RATE)
    opt_state = as_numpy(optimizer.init(params))
    opt_specs = optax.tree_map_params(optimizer, lambda _, spec: spec, opt_state, param_specs,
                                      transform_non_params=lambda _: P(), is_leaf=lambda x: isinstance(x, P))

    def step(params, opt_state, tokens):
        def loss_fn(p):
            logits = nnx.merge(graphdef, p)(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean(), None

        return optimizer_step(optimizer, loss_fn, params, opt_state)[0]

    tokens = np.random.default_rng(0).integers(0, vocab, (batch, context + 1), dtype=np.int32)
    return ZooProgram(
        name="sharded_flax_nnx_lm", function=step, args=(params, opt_state, tokens), libraries=("flax", "optax"),
        description=f"Flax NNX decoder-only LM ({depth} blocks, width {width}, {heads} heads, vocab {vocab}, "
                    f"context {context}, batch {batch}) on a 2x4 data x model mesh, Megatron-style: one Adam step",
        mesh=MESH, in_specs=(param_specs, opt_specs, P("data", None)),
        out_specs={"loss": P(), "grads": param_specs, "params": param_specs, "opt_state": opt_specs})


def shard_map_mlp(features=32, hidden=128, classes=8, batch=16) -> ZooProgram:
    """An MLP classifier's SGD step written per device with ``shard_map``: the batch over
    ``data``, the hidden layer over ``model`` (column- then row-parallel, a ``psum`` joining
    the partial logits); the gradients reduce-scattered over ``data`` (``psum_scatter``), each
    device updating its slice of them and gathering the rest back (``all_gather``), ZeRO's
    way; the loss passed around the ``data`` ring (``ppermute``) and added up."""
    mesh = AbstractMesh(tuple(size for _, size in MESH), tuple(name for name, _ in MESH))
    data = dict(MESH)["data"]
    rng = np.random.default_rng(3)
    params = {"w1": (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32),
              "w2": (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32)}
    param_specs = {"w1": P(None, "model"), "w2": P("model", None)}

    def local_step(params, x, labels):
        def loss_fn(p):
            logits = jax.lax.psum(jax.nn.relu(x @ p["w1"]) @ p["w2"], "model")
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        new = {}
        for name, grad in grads.items():   # ZeRO: each data device updates 1/data of the rows
            rows = jax.lax.psum_scatter(grad, "data", scatter_dimension=0, tiled=True) / data
            size = rows.shape[0]
            mine = jax.lax.dynamic_slice_in_dim(params[name], jax.lax.axis_index("data") * size, size)
            new[name] = jax.lax.all_gather(mine - 0.1 * rows, "data", axis=0, tiled=True)
        ring = [(i, (i + 1) % data) for i in range(data)]
        total, passed = loss, loss
        for _ in range(data - 1):
            passed = jax.lax.ppermute(passed, "data", ring)
            total = total + passed
        return new, jnp.reshape(total / data, (1,))   # the mean loss, on each data device

    # check_vma=False: JAX cannot tell that all_gather's results are the same on each data device
    step = jax.shard_map(local_step, mesh=mesh, in_specs=(param_specs, P("data", None), P("data")),
                         out_specs=(param_specs, P("data")), check_vma=False)
    x = rng.standard_normal((batch, features)).astype(np.float32)
    labels = rng.integers(0, classes, batch, dtype=np.int32)
    return ZooProgram(
        name="sharded_shard_map_mlp", function=step, args=(params, x, labels), libraries=("optax",),
        description=f"shard_map MLP ({features}-{hidden}-{classes}, batch {batch}) on a 2x4 data x model mesh: "
                    "one SGD step with psum, psum_scatter, all_gather and ppermute",
        mesh=MESH, in_specs=(param_specs, P("data", None), P("data")), out_specs=(param_specs, P("data")))
