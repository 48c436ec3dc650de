"""Dynamism ops (spec: dynamic_broadcast_in_dim, dynamic_iota, dynamic_pad,
dynamic_reshape, real_dynamic_slice; set_dimension_size as XLA)."""
