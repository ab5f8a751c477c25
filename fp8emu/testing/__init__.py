"""The validation kit: check another implementation's FP8 results against fp8emu in its own tests.

* :func:`assert_fp8_equal` / :func:`compare_codes`: codes from any kernel or
  framework (NumPy, ml_dtypes, torch on any device, JAX) against the
  emulator under a profile, with a report of every kind of difference;
* :func:`assert_close_ulp` / :func:`compare_ulp`: float32/bfloat16/float16
  outputs (e.g. GEMMs) within a number of units in the last place;
* :func:`golden_vectors`, :func:`save_golden`, :func:`load_golden`,
  :func:`rle_table`, :func:`scaled_mm_cases`: golden files (npz, JSON, C/C++/CUDA
  headers, run-length tables) that a kernel test reads without fp8emu;
* the pytest plugin :mod:`fp8emu.testing.plugin` (registered through the
  ``pytest11`` entry point, so installing fp8emu is enough) with the
  ``fp8_golden`` snapshot fixture and the ``--fp8-update-golden`` option.
"""

from .compare import (
    KINDS, Comparison, UlpComparison, assert_close_ulp, assert_fp8_equal, compare_codes, compare_ulp, to_codes,
)
from .golden import (
    FORMAT_VERSION, SOURCE_DTYPES, c_header, golden_vectors, load_golden, rle_table, save_golden, save_rle,
    save_scaled_mm_cases, scaled_mm_cases,
)

__all__ = ["assert_fp8_equal", "compare_codes", "Comparison", "to_codes", "assert_close_ulp", "compare_ulp",
           "UlpComparison", "KINDS", "golden_vectors", "save_golden", "load_golden", "c_header", "rle_table",
           "save_rle", "scaled_mm_cases", "save_scaled_mm_cases", "FORMAT_VERSION", "SOURCE_DTYPES"]
