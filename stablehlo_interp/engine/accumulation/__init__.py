"""Accumulation orders: how sums and products of floats are folded (:mod:`.orders`),
and XLA's CPU backend's vector lanes, measured on this host (:mod:`.xla_cpu`)."""
