"""Flax NNX models trained with Optax: a small transformer language model and a CNN with BatchNorm."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from . import ZooProgram, as_numpy
from .optax_training import optimizer_step

LEARNING_RATE = 1e-3


class DecoderBlock(nnx.Module):
    """Pre-norm decoder block: causal self-attention and a GELU MLP, each with a residual."""

    def __init__(self, width: int, heads: int, rngs: nnx.Rngs):
        self.attention_norm = nnx.LayerNorm(width, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(num_heads=heads, in_features=width, decode=False, rngs=rngs)
        self.mlp_norm = nnx.LayerNorm(width, rngs=rngs)
        self.mlp_in = nnx.Linear(width, 4 * width, rngs=rngs)
        self.mlp_out = nnx.Linear(4 * width, width, rngs=rngs)

    def __call__(self, h, mask):
        h = h + self.attention(self.attention_norm(h), mask=mask)
        return h + self.mlp_out(nnx.gelu(self.mlp_in(self.mlp_norm(h))))


class TinyLM(nnx.Module):
    def __init__(self, vocab: int, width: int, heads: int, depth: int, context: int, rngs: nnx.Rngs):
        self.token_embedding = nnx.Embed(vocab, width, rngs=rngs)
        self.position_embedding = nnx.Embed(context, width, rngs=rngs)
        self.blocks = nnx.List([DecoderBlock(width, heads, rngs) for _ in range(depth)])
        self.final_norm = nnx.LayerNorm(width, rngs=rngs)
        self.head = nnx.Linear(width, vocab, rngs=rngs)

    def __call__(self, tokens):
        h = self.token_embedding(tokens) + self.position_embedding(jnp.arange(tokens.shape[-1]))
        mask = nnx.make_causal_mask(tokens)
        for block in self.blocks:
            h = block(h, mask)
        return self.head(self.final_norm(h))


class SmallCNN(nnx.Module):
    """Two conv -> BatchNorm -> ReLU -> pool stages (``width`` then ``2 * width`` features)
    and a linear classifier."""

    def __init__(self, channels: int, classes: int, rngs: nnx.Rngs, width: int = 8):
        self.conv1 = nnx.Conv(channels, width, kernel_size=(3, 3), rngs=rngs)
        self.norm1 = nnx.BatchNorm(width, momentum=0.9, rngs=rngs)
        self.conv2 = nnx.Conv(width, 2 * width, kernel_size=(3, 3), strides=(2, 2), rngs=rngs)
        self.norm2 = nnx.BatchNorm(2 * width, momentum=0.9, rngs=rngs)
        self.classify = nnx.Linear(2 * width, classes, rngs=rngs)

    def __call__(self, images):
        h = nnx.relu(self.norm1(self.conv1(images)))
        h = nnx.max_pool(h, window_shape=(2, 2), strides=(2, 2))
        h = nnx.relu(self.norm2(self.conv2(h)))
        return self.classify(h.mean(axis=(1, 2)))


def adam_step(graphdef, loss_of_model, *, other_state: bool = False):
    """A pure Adam training step ``step(params, [state,] opt_state, *batch)`` over a model's
    parameters (pure dicts), with :func:`optimizer_step`'s results, and the model's updated
    non-parameter state (BatchNorm statistics) when it has one."""
    optimizer = optax.adam(LEARNING_RATE)

    def step(params, *rest):
        state, (opt_state, *batch) = (rest[0], rest[1:]) if other_state else ((), rest)

        def loss_fn(p):
            model = nnx.merge(graphdef, p, *([state] if other_state else []))
            loss = loss_of_model(model, *batch)
            return loss, nnx.to_pure_dict(nnx.state(model, nnx.BatchStat))

        results, new_state = optimizer_step(optimizer, loss_fn, params, opt_state)
        return {**results, "state": new_state} if other_state else results

    return step, optimizer


def transformer_lm(vocab=64, width=32, heads=4, depth=2, context=16, batch=4) -> ZooProgram:
    graphdef, params = nnx.split(TinyLM(vocab, width, heads, depth, context, rngs=nnx.Rngs(0)), nnx.Param)
    params = as_numpy(nnx.to_pure_dict(params))

    def next_token_loss(model, tokens):
        logits = model(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    step, optimizer = adam_step(graphdef, next_token_loss)
    tokens = np.random.default_rng(0).integers(0, vocab, (batch, context + 1), dtype=np.int32)
    return ZooProgram(
        name="flax_nnx_transformer_lm", function=step,
        args=(params, as_numpy(optimizer.init(params)), tokens), libraries=("flax", "optax"),
        description=f"Flax NNX decoder-only LM ({depth} blocks, width {width}, {heads} heads, vocab {vocab}, "
                    f"context {context}): one Adam step on next-token cross-entropy")


def cnn_batchnorm(size=12, channels=3, classes=5, batch=8, width=8) -> ZooProgram:
    model = SmallCNN(channels, classes, rngs=nnx.Rngs(1), width=width)
    model.train()   # BatchNorm normalizes with the batch's statistics and updates its running averages
    graphdef, params, batch_stats = nnx.split(model, nnx.Param, nnx.BatchStat)
    params, batch_stats = as_numpy(nnx.to_pure_dict(params)), as_numpy(nnx.to_pure_dict(batch_stats))

    def classification_loss(model, images, labels):
        return optax.softmax_cross_entropy_with_integer_labels(model(images), labels).mean()

    step, optimizer = adam_step(graphdef, classification_loss, other_state=True)
    rng = np.random.default_rng(1)
    images = rng.standard_normal((batch, size, size, channels)).astype(np.float32)
    labels = rng.integers(0, classes, batch, dtype=np.int32)
    return ZooProgram(
        name="flax_nnx_cnn_batchnorm", function=step,
        args=(params, batch_stats, as_numpy(optimizer.init(params)), images, labels),
        libraries=("flax", "optax"),
        description=f"Flax NNX CNN (2 conv+BatchNorm+ReLU stages of {width} and {2 * width} features, max pool) "
                    f"on {batch} {size}x{size}x{channels} images: one Adam step, BatchNorm statistics updated")
