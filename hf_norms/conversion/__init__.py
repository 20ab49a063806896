"""Conversion of LayerNorm checkpoints to another norm_type: checkpoint I/O, conversion, DyT calibration, healing by
distillation, fidelity measurement and its report, and gamma/beta folding. Imports `hf_norms.models` only."""
