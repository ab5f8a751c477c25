"""fp8emu: a bit-exact NumPy reference emulator for FP8 and other narrow float formats.

Examples
--------
>>> import numpy as np, fp8emu
>>> fp8emu.encode(np.array([1.0, 300.0]), "e4m3fn").tolist()
[56, 121]
>>> fp8emu.__version__ == fp8emu.version.__version__
True
"""

# The two dependencies every module needs: a missing one is named with the way to install it, not left
# to surface as a bare ModuleNotFoundError deep inside the package.
import sys as _sys

try:
    import ml_dtypes as _ml_dtypes  # noqa: F401
    import numpy as _numpy  # noqa: F401
except ImportError as _e:
    raise ImportError(
        f"fp8emu needs {_e.name or 'numpy and ml_dtypes'}, which is not installed in this Python "
        f"({_sys.executable}). Install fp8emu with its dependencies: "
        "pip install -e '.[dev]' from a clone (or pip install numpy ml_dtypes matplotlib)") from _e

from .parallel import get_threads, set_threads
from .formats import Format, format_names, format_table, get_format, register_format
from .rounding import ROUNDING_MODES
from .profiles import Profile, get_profile, profile_names
from .codec import as_ml_dtypes, decode, encode, quantize
from .scaling import (
    HYBRID, DelayedScaling, ScaledTensor, current_scale, quantize_axiswise, quantize_blockwise,
    quantize_mx, quantize_nvfp4, quantize_tensorwise, recipe_formats,
)
from .gemm import MODELS, GemmModel, Policy, block_scaled_mm, get_model, scaled_mm, step_row
from .testing import assert_close_ulp, assert_fp8_equal, compare_codes, golden_vectors, save_golden

from .version import __version__

__all__ = [
    "set_threads", "get_threads",
    "Format", "format_names", "format_table", "get_format", "register_format", "ROUNDING_MODES",
    "Profile", "get_profile", "profile_names",
    "encode", "decode", "quantize", "as_ml_dtypes", "__version__",
    "HYBRID", "DelayedScaling", "ScaledTensor", "current_scale", "quantize_axiswise",
    "quantize_blockwise", "quantize_mx", "quantize_nvfp4", "quantize_tensorwise", "recipe_formats",
    "scaled_mm", "block_scaled_mm", "GemmModel", "Policy", "step_row", "MODELS", "get_model",
    "assert_fp8_equal", "compare_codes", "assert_close_ulp", "golden_vectors", "save_golden",
]
