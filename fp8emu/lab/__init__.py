"""The numerics lab: error metrics and sweeps, figures, the training demo.

Submodules (imported on demand, since :mod:`~fp8emu.lab.plots` needs matplotlib):

- :mod:`fp8emu.lab.analysis`: error metrics and seeded, vectorised sweeps.
- :mod:`fp8emu.lab.plots`: the figures (object API; no backend is switched).
- :mod:`fp8emu.lab.train`: a NumPy MLP trained in float32 and in emulated FP8.
"""
