"""
FP8 GEMM accumulation error vs K
================================

Median relative error of an FP8 GEMM's float32 output against the exact sum of the same quantized
operands, as K grows, for the tensor-core models the language-model study's stacks use (Hopper with
TE's split accumulator, Hopper fast accumulation, Blackwell ``kind::f8f6f4``, the exact sum) and
bf16 output rounding, on Gaussian and all-positive operands.  Drawn from the committed
``docs/data/lm-study/k_drift.csv`` (``python3 tools/make_k_drift.py`` remakes it and
``figures/lm_study_k_drift.png``); the language-model study guide's section "Fast accumulation and
K" states what it shows.
"""

from pathlib import Path

from fp8emu.lab import drift

root = Path.cwd()
while not (root / "figures").is_dir():      # the gallery runs from docs/examples
    root = root.parent
fig = drift.figure_k_drift(drift.read_csv(root / "docs" / "data" / "lm-study" / "k_drift.csv"))
