"""Live checks on a GPU: each needs CUDA (torch, and Triton or JAX where named) and skips cleanly without.

- :mod:`fp8emu.gpu.validate`: the GPU libraries' casts and ``torch._scaled_mm`` against the profiles
  (``fp8emu validate-gpu``).
- :mod:`fp8emu.gpu.tc_questions`: discriminating tensor-core test vectors whose recorded outputs tell
  the candidate models apart (``fp8emu validate-gpu --tc-questions``).
"""
