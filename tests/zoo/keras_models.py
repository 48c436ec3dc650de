"""Keras 3 on the JAX backend: a functional-API classifier with BatchNormalization, one step of
Keras's own Adam through the stateless API (``stateless_call``, ``stateless_apply``)."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # Keras reads it when imported, below

import jax
import keras
import numpy as np

from . import ZooProgram, as_numpy

if keras.backend.backend() != "jax":
    raise ImportError(f"keras was imported with the {keras.backend.backend()!r} backend; "
                      "the zoo needs KERAS_BACKEND=jax before keras is first imported")


def mlp_classifier(features=16, width=32, classes=4, batch=16) -> ZooProgram:
    def dense(units, seed, activation=None):   # seeded here: keras.utils.set_random_seed would seed NumPy's global RNG
        return keras.layers.Dense(units, activation=activation,
                                  kernel_initializer=keras.initializers.GlorotUniform(seed=seed))

    inputs = keras.Input((features,))
    h = dense(width, 8, "relu")(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = dense(width, 9, "gelu")(h)
    model = keras.Model(inputs, dense(classes, 10)(h))
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam(learning_rate=1e-3)
    optimizer.build(model.trainable_variables)

    def step(trainable, non_trainable, optimizer_state, x, labels):
        def loss_fn(trainable):
            logits, non_trainable_after = model.stateless_call(trainable, non_trainable, x, training=True)
            return loss_object(labels, logits), non_trainable_after

        (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable)
        trainable, optimizer_state = optimizer.stateless_apply(optimizer_state, grads, trainable)
        return {"loss": loss, "grads": grads, "trainable": trainable, "non_trainable": non_trainable,
                "optimizer_state": optimizer_state}

    rng = np.random.default_rng(8)
    x = rng.standard_normal((batch, features)).astype(np.float32)
    labels = rng.integers(0, classes, batch, dtype=np.int32)
    values = [[np.asarray(v.value) for v in variables] for variables in
              (model.trainable_variables, model.non_trainable_variables, optimizer.variables)]
    return ZooProgram(
        name="keras_mlp", function=step, args=(*as_numpy(values), x, labels),
        libraries=("keras",),
        description=f"Keras 3 (JAX backend) functional classifier with BatchNormalization ({batch}x{features}): "
                    "one step of Keras's Adam, stateless")
