"""Differential fuzzing: random StableHLO programs run here and on a backend; what
differs beyond rounding, and what fails, reduced to minimal programs (docs/tools.md)."""
