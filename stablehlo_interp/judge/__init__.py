"""Rounding noise: whether a difference between two runs of a program is one an
implementation may make. Each op's rounding bound, runs of a program with every op
moved within its bound (:mod:`.bounds`), the difference between two values and its
tolerances (:mod:`.difference`), and how a value prints (:mod:`.summary`). ``compare``,
``conform``, ``fuzz`` and the per-device check judge by them."""
