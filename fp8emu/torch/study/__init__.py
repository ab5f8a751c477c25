"""The language-model study: a small byte-level GPT trained under every recipe x stack of ``fp8emu.torch``.

Modules:

* :mod:`~fp8emu.torch.study.corpus`: the offline corpus (Python's ``pydoc_data``
  documentation text) and its exact byte-level train/validation split;
* :mod:`~fp8emu.torch.study.model`: the GPT (every projection an ``nn.Linear``,
  so that :func:`fp8emu.torch.emulate` swaps it);
* :mod:`~fp8emu.torch.study.train`: one training run (AdamW, fixed seeds);
* :mod:`~fp8emu.torch.study.runs`: the run matrix, result files (atomic,
  hashed), resume and Dask execution;
* :mod:`fp8emu.lab.lm_study` (no torch needed): CSV, figures and the HTML/Markdown report;
* :mod:`~fp8emu.torch.study.infer`: perplexity of the trained model with FP8/FP4
  weights, activations, KV cache and attention.

The command line is ``fp8emu train-study`` (:mod:`fp8emu.cli.train_study`).
"""
