"""Write the lab's notebooks (sources only, no outputs). Run: python3 tools/make_notebooks.py"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parents[1] / "notebooks"
PARAM = "# Parameters: SIZE scales the work (1.0 = full; the test suite runs 0.05).\nSIZE = 1.0"
SETUP = "%matplotlib inline\nimport numpy as np\nimport matplotlib.pyplot as plt\nimport fp8emu\nfrom fp8emu.lab import analysis, plots"

NOTEBOOKS = {
    "01_formats_tour": [
        "# A tour of the formats\nEvery format fp8emu knows, its range and precision, and where its values lie.",
        PARAM, SETUP,
        "print(fp8emu.format_table())",
        "f = fp8emu.get_format('e4m3fn')\nprint(f.max, f.min_normal, f.min_subnormal, f.eps)\nprint(f.values()[:16])",
        "## Every value of a format\nThe same table `fp8emu table e4m3fn` prints.",
        "from fp8emu.describe import code_table\nprint('\\n'.join(code_table('e2m1fn').splitlines()))",
        "## Values per binade\nMantissa bits set how many values each binade holds; exponent bits set how many binades there are.",
        "for name in ['e4m3fn', 'e5m2', 'e3m4', 'e2m1fn']:\n    e, c = analysis.values_per_binade(name)\n    print(f'{name:8s} binades {e.min():+d}..{e.max():+d}  values/binade {sorted(set(c.tolist()))}')",
        "fig = plots.figure_values_per_binade(size=SIZE)\nfig",
    ],
    "02_rounding_and_saturation": [
        "# Rounding and saturation\nHow each rounding mode treats the same inputs, what overflow does with and without saturation, "
        "and the bias of each mode.",
        PARAM, SETUP,
        "x = np.array([1.0625, 1.1875, -1.0625, 300.0, 464.0, 1e6, -1e6])\nfor mode in ['rne', 'rna', 'rtz', 'rup', 'rdn', 'rto']:\n"
        "    print(f'{mode:4s}', fp8emu.quantize(x, 'e4m3fn', rounding=mode))",
        "## Overflow: NaN (OCP non-saturating) vs clamping to ±448\n",
        "print(fp8emu.quantize(x, 'e4m3fn'))\nprint(fp8emu.quantize(x, 'e4m3fn', saturate=True))\nprint(fp8emu.quantize(x, 'e5m2'))  # e5m2 has Inf",
        "## Stochastic rounding is unbiased on average\n",
        "draws = max(64, int(4000 * SIZE))\nb = analysis.rounding_bias('e4m3fn', [1.03125, 1.09375], draws=draws)\n"
        "{k: v.round(5).tolist() for k, v in b.items()}",
        "t = analysis.stochastic_variance('e4m3fn', np.linspace(1, 2, 21)[:-1] + 0.01, bits=(1, 2, 4, 8), draws=draws)\nprint(t)",
        "fig = plots.figure_rounding_bias(size=SIZE)\nfig",
    ],
    "03_error_vs_dynamic_range": [
        "# Error vs dynamic range\nSQNR of each format as the input's scale sweeps 48 binades, for heavy- and light-tailed "
        "inputs, unscaled and with one per-tensor scale.",
        PARAM, SETUP,
        "n = max(256, int(16384 * SIZE))\nscales = np.logspace(-20, 20, 21, base=2)\n"
        "t = analysis.sweep_scale(['e4m3fn', 'e5m2', 'bfloat16'], analysis.DISTRIBUTIONS, scales, n=n, recipes=('none', 'tensor'))\nlen(t)",
        "for d in analysis.DISTRIBUTIONS:\n    r = t.where(format='e4m3fn', distribution=d)\n"
        "    best = r.where(recipe='none')['sqnr_db'].max()\n    scaled = r.where(recipe='tensor')['sqnr_db'][0]\n"
        "    print(f'{d:10s} best unscaled {best:5.1f} dB   per-tensor scaled {scaled:5.1f} dB')",
        "SQNR weighs each error by the signal's energy, so a distribution with outliers is judged mostly on its "
        "largest values. The next cell computes what the table says about the per-tensor scale, rather than asserting it.",
        "scaled = {d: t.where(format='e4m3fn', distribution=d).where(recipe='tensor')['sqnr_db'][0] for d in analysis.DISTRIBUTIONS}\n"
        "lo, hi = min(scaled.values()), max(scaled.values())\n"
        "print(f'one per-tensor scale puts every distribution at {lo:.1f}-{hi:.1f} dB (E4M3 keeps 3 fraction bits)')\n"
        "worse = [d for d in analysis.DISTRIBUTIONS if scaled[d] < t.where(format='e4m3fn', distribution=d)"
        ".where(recipe='none')['sqnr_db'].max() - 1]\n"
        "print('more than 1 dB below the best unscaled placement:', ', '.join(worse) or 'none')",
        "fig = plots.figure_sqnr_vs_scale(size=SIZE)\nfig",
        "fig = plots.figure_relative_error(size=SIZE)\nfig",
    ],
    "04_scaling_recipes": [
        "# Scaling recipes\nPer-tensor current and delayed scaling, and finer granularity: row-wise, 1x128, 128x128, MX and NVFP4.",
        PARAM, SETUP + "\nfrom fp8emu import scaling",
        "x = np.random.default_rng(0).standard_normal((64, 256))\nx[:, 7] *= 100  # an outlier channel\n"
        "for name, st in [('tensor', scaling.quantize_tensorwise(x, 'e4m3fn')),\n"
        "                 ('row', scaling.quantize_axiswise(x, 'e4m3fn', axis=-1)),\n"
        "                 ('1x128', scaling.quantize_blockwise(x, 'e4m3fn', block=(1, 128))),\n"
        "                 ('mx32', scaling.quantize_mx(x, 'e4m3fn', block=32)),\n"
        "                 ('nvfp4', scaling.quantize_nvfp4(x))]:\n"
        "    print(f'{name:7s} SQNR {analysis.sqnr_db(x, np.asarray(st.dequantize(np.float64))):5.1f} dB')",
        "## Delayed scaling\nThe scale comes from the history of amax values, so a sudden spike overflows once.",
        "ds = scaling.DelayedScaling('e4m3fn', amax_history_len=8)\nfor step in range(6):\n"
        "    amax = 100.0 if step == 3 else 1.0\n    st = ds.quantize(np.array([amax, -amax / 2]))\n"
        "    print(step, float(np.ravel(ds.scale)[0]), np.asarray(st.dequantize(np.float64)))",
        "fig = plots.figure_delayed_scaling(size=SIZE)\nfig",
        "fig = plots.figure_granularity(size=SIZE)\nfig",
    ],
    "05_gemm_accumulation": [
        "# GEMM accumulation\nFP8 tensor cores on Hopper accumulate with limited precision; DeepSeek-V3 noticed the error "
        "growing with K and promoted partial sums to FP32 every 128 elements. Reproduced on the CPU.",
        PARAM, SETUP + "\nfrom fp8emu.gemm import scaled_mm",
        "g = np.random.default_rng(0)\nk = 512 if SIZE < 1 else 4096\n"
        "a = fp8emu.encode(g.uniform(0, 448, (4, k)), 'e4m3fn')\nb = fp8emu.encode(g.uniform(0, 448, (k, 4)), 'e4m3fn')\n"
        "ref = scaled_mm(a, b, a_format='e4m3fn', b_format='e4m3fn', accumulator='exact')\n"
        "for acc in ['fp32', 'hopper-fast', 'hopper']:\n"
        "    out = scaled_mm(a, b, a_format='e4m3fn', b_format='e4m3fn', accumulator=acc)\n"
        "    print(f'{acc:12s} max rel err {np.max(np.abs(out - ref) / np.abs(ref)):.2e}')",
        "fig = plots.figure_gemm_accumulation(size=SIZE)\nfig",
        "## Every tensor core with public evidence\nThe instruction catalogue (`fp8emu.gemm.presets()`) describes each "
        "FP8/FP6/FP4 matrix instruction as data (products per step, alignment bits, result rounding) with the evidence "
        "behind it: public GPU recordings reproduced, or random MMAs equal to MMA-Sim.",
        "from fp8emu.gemm import instructions, presets\nfor p in presets():\n"
        "    print(f\"{p['name']:30s} {p['evidence'][0]}\")",
        "# one large product and 31 small ones, 15 binades below: where the presets' alignment differs\n"
        "one = np.ones((1, 32))\nx = fp8emu.encode(np.concatenate([[[256.0]], np.full((1, 31), 2.0 ** -7)], axis=1), 'e4m3fn')\n"
        "got = {}\nfor name in ['ada-mma', 'hopper-wgmma', 'blackwell-mma', 'blackwell-tcgen05-f8f6f4', 'rtx-blackwell-mma']:\n"
        "    d = instructions.mma(x, fp8emu.encode(one.T, 'e4m3fn'), instruction=name, a_format='e4m3fn')\n"
        "    got[name] = float(d[0, 0])\n"
        "    print(f'{name:26s} 256 + 31 * 2**-7 -> {got[name]:.9f}   (exact {256 + 31 * 2.0 ** -7})')\n"
        "assert len(set(got.values())) > 1, 'inputs where the presets differ'",
        "fig = plots.figure_tensor_core_catalogue(size=SIZE)\nfig",
    ],
    "06_fp8_training": [
        "# FP8 training, measured\nThe same MLP, same data, same initialization: float32 vs FP8 linear layers "
        "(E4M3 forward, E5M2 backward, delayed scaling with an amax history).",
        PARAM, SETUP + "\nfrom fp8emu.lab import train",
        "res = train.compare(steps=max(20, int(400 * SIZE)), n_train=max(512, int(8192 * SIZE)), n_test=max(256, int(2048 * SIZE)))\nprint(train.summary(res))",
        "fig, ax = plt.subplots(figsize=(7, 4))\nfor name, r in res.items():\n    ax.plot(r['loss'], label=name)\n"
        "ax.set_yscale('log'); ax.set_xlabel('step'); ax.set_ylabel('loss (nats)'); ax.legend(); fig",
    ],
    "07_checkpoint_study": [
        "# Studying a checkpoint\nWhat happens to a model's tensors under E4M3 per-tensor scaling, 1x128 blocks, MXFP8, "
        "MXFP4, NVFP4 and calibrated scales? `fp8emu study` answers it for real checkpoints; here we walk through a "
        "study of the small demo checkpoint that ships with fp8emu (the training demo's learned weights plus "
        "synthetic LLM-like tensors with outlier channels and heavy tails).",
        PARAM, SETUP + "\nimport pathlib, tempfile\nfrom fp8emu.lab import report, study\nfrom fp8emu.lab.recipes import recipe_matrix",
        "ckpt = study.demo_checkpoint()\nrefs, skipped = study.discover([ckpt])\nprint(len(refs), 'tensors')\n"
        "for r in refs[:6]:\n    print(f'{r.name:45s} {str(r.shape):12s} {r.dtype}')",
        "## The recipe matrix\nEvery recipe is a small named object; `fp8emu study --list-recipes` lists them. "
        "A small SIZE studies a few tensors under a few recipes, among them Transformer Engine's row-scaled "
        "NVFP4 (`nvfp4-rowscaled`) and TE-exact Four Over Six (`nvfp4-4over6-te`).",
        "print(len(recipe_matrix()), 'recipes, e.g.', list(recipe_matrix())[:4])\n"
        "recipes = None if SIZE >= 1 else ['tensor-e4m3fn', 'row-e4m3fn', 'block1x128-e4m3fn', 'mx-e4m3fn-floor',\n"
        "                                  'mx-e2m1fn-floor', 'nvfp4', 'nvfp4-rowscaled', 'nvfp4-4over6-te',\n"
        "                                  'calib-p99.99-e4m3fn', 'calib-kl-e4m3fn']\n"
        "include = None if SIZE >= 1 else ['activations.*', '*.k_proj.*', '*.down_proj.*', 'mlp.layers.0.*', 'model.norm.*']\n"
        "out = pathlib.Path(tempfile.mkdtemp()) / 'study'\n"
        "res = study.run_study([ckpt], out, recipes=recipes, include=include, progress=False)\n"
        "print(res['computed'], 'tensors,', len(res['rows']), 'rows in', out / 'results.csv')",
        "## Summary per recipe\nMedian and worst SQNR over the tensors, and the element-weighted fractions that "
        "overflowed the format's real rounding threshold, saturated at max, flushed to zero or became subnormal.",
        "for s in report.summarize(res['rows']):\n"
        "    print(f\"{s['recipe']:22s} median {s['median_sqnr_db']:6.1f} dB  worst {s['min_sqnr_db']:6.1f} dB  \"\n"
        "          f\"overflow {s['frac_overflow']:.1e}  flushed {s['frac_flushed']:.1e}\")",
        "## One tensor, every metric\nActivations with a few outlier feature channels: one per-tensor scale serves "
        "the outliers, finer scales serve everybody.",
        "for r in res['rows']:\n    if r['tensor'] == 'activations.layers.0.mlp_input':\n"
        "        print(f\"{r['recipe']:22s} SQNR {r['sqnr_db']:5.1f} dB  rel RMS {r['rel_rms_err']:.3f}  \"\n"
        "              f\"max rel {r['max_rel_err']:.2f}  subnormal {r['frac_subnormal']:.4f}  clip {r['clip_threshold']}\")",
        "fig = report.figure_heatmap(res['rows'])\nfig",
        "fig = report.figure_sqnr_vs_range(res['rows'])\nfig",
        "## What calibration buys\nA floating-point format keeps its relative precision over many binades, so "
        "clipping outliers (KL, percentiles) rarely pays in E4M3 and can cost a lot: compare the calibrated "
        "recipes with plain amax scaling.",
        "rows = {(r['tensor'], r['recipe']): r['sqnr_db'] for r in res['rows']}\n"
        "for t in sorted({r['tensor'] for r in res['rows']}):\n"
        "    if (t, 'calib-kl-e4m3fn') in rows:\n"
        "        print(f\"{t:45s} amax {rows[(t, 'tensor-e4m3fn')]:6.1f}  KL {rows[(t, 'calib-kl-e4m3fn')]:6.1f} dB\")",
        "## Resuming\nRerunning into the same folder skips the tensor x recipe pairs already in results.csv.",
        "again = study.run_study([ckpt], out, recipes=recipes, include=include, progress=False, report=False)\n"
        "print(again['computed'], 'tensors recomputed,', again['skipped'], 'skipped')",
        "## The same metrics on Dask arrays\n`fp8emu.dask` gives NumPy-identical results on `dask.array` inputs "
        "(the `fp8emu study --workers N` and `--scheduler ADDRESS` options run the whole study on a cluster).",
        "import dask.array as da\nimport fp8emu.dask as fd\n"
        "x = [r for r in refs if r.name == 'activations.layers.0.mlp_input'][0].read()\n"
        "m = fd.study_metrics(da.from_array(x, chunks=(32, 256)), ['mx-e4m3fn-floor'], rows_per_chunk=128)[0]\n"
        "print(m['recipe'], round(m['sqnr_db'], 2), 'dB')\n"
        "print(bool((fd.quantize_mx(da.from_array(x, chunks=(32, 64)), 'e4m3fn').compute().codes == "
        "fp8emu.quantize_mx(x, 'e4m3fn').codes).all()))",
    ],
    "08_block_scaled": [
        "# Block-scaled GEMM: MXFP8, MXFP4, NVFP4 and the Hadamard transform\n"
        "Blackwell multiplies MX and NVFP4 operands directly: every product carries its two block scales. "
        "Here each recipe's GEMM (exact accumulator) is compared with the exact float64 product of the "
        "unquantized, heavy-tailed inputs.",
        PARAM, SETUP + "\nfrom fp8emu import scaling\nfrom fp8emu.gemm import block_scaled_mm",
        "g = np.random.default_rng(0)\nk = 256 if SIZE < 1 else 4096\n"
        "x = g.standard_t(3, (16, k))\nx[:, g.choice(k, 8, replace=False)] *= 30.0\n"
        "w = g.standard_normal((k, 16)) / np.sqrt(k)\nref = x @ w\n"
        "recipes = {\n"
        "    'MXFP8': (scaling.quantize_mx(x, 'e4m3fn'), scaling.quantize_mx(w, 'e4m3fn', axis=0)),\n"
        "    'MXFP4': (scaling.quantize_mx(x, 'e2m1fn'), scaling.quantize_mx(w, 'e2m1fn', axis=0)),\n"
        "    'NVFP4': (scaling.quantize_nvfp4(x), scaling.quantize_nvfp4(w, axis=0)),\n"
        "    'NVFP4 + RHT': (scaling.quantize_nvfp4(x, random_hadamard_transform=True),\n"
        "                    scaling.quantize_nvfp4(w, axis=0, random_hadamard_transform=True)),\n"
        "}\n"
        "for name, (a, b) in recipes.items():\n"
        "    out = block_scaled_mm(a, b, accumulator='exact').astype(np.float64)\n"
        "    print(f'{name:12s} relative error {np.linalg.norm(out - ref) / np.linalg.norm(ref):.4f}')",
        "## The kernel's buffers\nPacked FP4 (two codes per byte) and the swizzled 128x4 scale layout, "
        "as cuBLASLt receives them; importing them back gives the same tensor.",
        "from fp8emu import layouts\na = recipes['NVFP4'][0]\nbuf = layouts.export_kernel_buffers(a)\n"
        "print(buf['data'].shape, buf['scales'].shape)\n"
        "back = layouts.import_kernel_buffers(buf['data'], buf['scales'], fmt='nvfp4', k=k, "
        "global_scale=buf['global_scale'], global_amax=buf['global_amax'])\n"
        "print(np.array_equal(back.codes, a.codes))",
        "fig = plots.figure_block_scaled_gemm(size=SIZE)\nfig",
        "## Transformer Engine's NVFP4 options, bit for bit\n`scaling.quantize_nvfp4_te` with a frozen "
        "`scaling.NVFP4Quantizer` reproduces TE's reference quantizer byte for byte: Four Over Six as TE selects "
        "it (MAE by default, global E4M3 bound 256) and row-scaled NVFP4 (one global amax per row). The study "
        "recipes `nvfp4-4over6-te` and `nvfp4-rowscaled` use them.",
        "te = {\n"
        "    'NVFP4 (TE default)': scaling.NVFP4Quantizer(),\n"
        "    'NVFP4 4over6 (TE, MAE, 256)': scaling.NVFP4Quantizer(nvfp4_use_4over6=True, nvfp4_e4m3_max=256),\n"
        "    'NVFP4 row-scaled (TE)': scaling.NVFP4Quantizer(row_scaled_nvfp4=True),\n"
        "}\n"
        "for name, q in te.items():\n"
        "    t = scaling.quantize_nvfp4_te(x, q)\n"
        "    err = np.linalg.norm(t.dequantize().astype(np.float64) - x) / np.linalg.norm(x)\n"
        "    print(f'{name:30s} relative quantization error of x {err:.4f}')",
    ],
    "09_fp8_attention": [
        "# FP8 attention, emulated step by step\n"
        "`fp8emu.attention` runs a flash-attention forward pass the way a kernel computes it: Q/K/V cast "
        "to FP8 with descales, S = QK^T through a tensor-core accumulator model, online softmax over key "
        "blocks with exp2 and FA3's max-offset pre-scale, P cast to e4m3, O += PV with a promotion "
        "interval. Every step is a field of a frozen `AttentionRecipe`; named recipes follow FA3, FA4, "
        "FlashInfer, vLLM and Triton (their docstrings cite the source files and commits). exp2 is a "
        "stated model (correctly rounded float32), so results are algorithm-exact, not bit-exact.",
        PARAM, SETUP + "\nimport dataclasses\nfrom fp8emu import attention as fa\nfrom fp8emu.lab import attention as al",
        "## One call\nThe report counts P saturations and underflows per head and row, and compares O with "
        "float64 attention of the inputs (total error) and of the dequantized inputs (the kernel's own error).",
        "n = 1024 if SIZE < 1 else 8192\nq, k, v = al.make_qkv('gaussian', queries=16, context=n, head_dim=128, v_mean=0.5)\n"
        "res = fa.attention(q, k, v, 'fa3-fp8')\nprint(res.report)\n"
        "print('kernel error', res.report.kernel_rms_rel_error)",
        "## The named recipes",
        "for name in fa.RECIPES:\n"
        "    r = fa.attention(q, k, v, name).report\n"
        "    print(f'{name:24s} RMS rel. error {r.rms_rel_error[0]:.4f}  saturated {r.p_saturated.sum():4d}  '\n"
        "          f'underflow {r.p_underflow.sum():5d}')",
        "## P saturation (flash-attention #2716)\nWith a rescale threshold of 4 the row max may be stale, "
        "so P = exp2(x + 8) reaches 2^12 and saturates at 448 while the float32 row sum counts it in full.",
        "qs = (al.make_qkv('gaussian', queries=64, context=1024, seed=11)[0] * 0.6).astype(np.float32)\n"
        "bad = fa.attention(qs, k[:, :1024], v[:, :1024], 'fa4-sm100-fp8-pre2717').report\n"
        "good = fa.attention(qs, k[:, :1024], v[:, :1024], 'fa4-sm100-fp8').report\n"
        "print(bad.flags)\nprint('error ratio', bad.rms_rel_error[0] / good.rms_rel_error[0])",
        "## Promotion interval (vllm-project/flash-attention#122)\nThe tensor-core accumulator keeps about "
        "13 fraction bits below the largest term; a P·V partial sum that is rarely added into a float32 O "
        "loses the small contributions of later blocks.",
        "fa3 = fa.get_recipe('fa3-fp8')\n"
        "for pe in (1, 4, 64, None):\n"
        "    r = fa.attention(q, k, v, dataclasses.replace(fa3, promote_every=pe)).report\n"
        "    print(pe, f'{r.kernel_rms_rel_error[0]:.4f}')",
        "## The study\n`fp8emu attention-study` runs the same grid from the command line "
        "(`--figure`, `--csv`, `--workers` for Dask).",
        "fig = al.figure_attention(size=SIZE)\nfig",
    ],
    "10_lm_study": [
        "# The language-model study: FP8/FP4 training of a small GPT, recipe by recipe\n"
        "`fp8emu train-study` trains a byte-level GPT on Python's `pydoc_data` documentation text in fp32, "
        "bf16 and every recipe x GPU stack of `fp8emu.torch`, several seeds each, and reports validation-loss "
        "curves, the gap to bf16 with a confidence interval, per-layer diagnostics and the perplexity of the "
        "trained model at inference (the guide: `docs/guides/lm-study.md`). Part (a) runs a tiny study live "
        "through the library calls behind the command (it needs torch); part (b) draws the committed study "
        "from `docs/data/lm-study/*.csv` with the report's own figure functions, and every finding below is "
        "computed from those files: the notebook reads whichever recipe x stack pairs they hold.",
        PARAM,
        SETUP + "\n" + """\
import csv
import math
import tempfile
from pathlib import Path

import matplotlib.image
from matplotlib.figure import Figure
from IPython.display import Markdown, display

ROOT = Path.cwd()
while not (ROOT / 'docs' / 'data' / 'lm-study').is_dir() and ROOT != ROOT.parent:
    ROOT = ROOT.parent
# The committed study; a `fp8emu train-study --out` folder works too (it also holds diagnostics.csv).
DATA = ROOT / 'docs' / 'data' / 'lm-study'

from fp8emu.lab import lm_study as report   # tables and figures: NumPy and matplotlib only

try:
    import torch
    HAVE_TORCH = True
except ModuleNotFoundError:
    HAVE_TORCH = False
if HAVE_TORCH:
    from fp8emu.torch.study import runs
    from fp8emu.torch.study.model import ModelConfig
    from fp8emu.torch.study.train import TrainConfig""",
        "## (a) A tiny study, live\n"
        "`runs.plan_runs` checks every input and lists the runs (baselines first; the first seed of each "
        "recipe x stack records diagnostics); `runs.execute` trains them and writes one hashed result file "
        "per run, so a rerun into the same folder resumes; `report` (`fp8emu.lab.lm_study`) makes the tables and figures. These are "
        "the calls behind `fp8emu train-study`. The model is one layer, wide enough for NVFP4's block sizes "
        "(a layer a recipe cannot take stays unswapped, so each run prints how many it swapped); SIZE sets "
        "the steps, the seeds and whether NVFP4 on b200 runs beside TE's delayed scaling on h100 (recording "
        "diagnostics makes a step several times slower).",
        """\
live = None
if not HAVE_TORCH:
    print('torch is not installed, so part (a) is skipped (pip install "fp8emu[torch]"); '
          'part (b) reads the committed study.')
else:
    steps = max(6, int(120 * SIZE))
    cfg = runs.StudyConfig(
        model=ModelConfig(n_layer=1, d_model=64, n_head=2, seq_len=16, batch=4),
        train=TrainConfig(steps=steps, warmup=max(1, steps // 10), eval_every=max(2, steps // 6),
                          eval_windows=4, final_windows=8),
        pairs=(('te-delayed', 'h100'),) if SIZE < 1 else (('te-delayed', 'h100'), ('te-nvfp4', 'b200')),
        seeds=(0, 1) if SIZE < 1 else (0, 1, 2))
    specs = runs.plan_runs(cfg)
    with tempfile.TemporaryDirectory(prefix='lm-study-') as out:
        live = runs.execute(out, cfg, specs, progress=False)['done']
        report.write_tables(live, out)
        live_tables = report.guide_tables(out)
    for r in live:
        print(f"{r['run_id']:20s} {len(r['swapped'])} layers emulated, final validation loss "
              f"{r['final_val_loss']:.4f} nats/byte, {1e3 * r['s_per_step']:.0f} ms/step")""",
        "### The live study's tables and figures\nIts tables (`gaps.csv` as the guide prints it: paired by "
        "seed, 95 % t interval), its validation loss (mean over seeds, band from the lowest to the highest "
        "seed), its gap to bf16 and "
        "the per-layer diagnostics of the first emulated run. With so few steps and seeds the gaps are noise; "
        "the point is the pipeline.",
        """\
if live:
    display(Markdown(live_tables))
    display(report.figure_curves(live))
    display(report.figure_gaps(report.gap_rows(live)))
    display(report.figure_diagnostics(next(r for r in live if r.get('diagnostics'))))""",
        "## (b) The committed study\n"
        "`docs/data/lm-study` holds the CSV tables of the study in the guide; `provenance.csv` names the "
        "command, corpus, versions and date. The curves are rebuilt from `curves.csv` into the shape "
        "`report.figure_curves` draws.",
        """\
TEXT = {'run_id', 'recipe', 'stack', 'label', 'config', 'weights', 'activations', 'attention', 'layer',
        'pass', 'item', 'value'}


def read(name, folder=DATA):
    \"\"\"Rows of folder/name.csv: numbers as int or float (empty: NaN), the text columns as text.\"\"\"
    def conv(key, v):
        if key in TEXT:
            return v
        if v == '':
            return math.nan
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return v
    with open(Path(folder) / f'{name}.csv', newline='', encoding='utf-8') as f:
        return [{k: conv(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def curve_results(rows):
    \"\"\"curves.csv as the per-run dicts report.figure_curves takes (runs in the file's order).\"\"\"
    by = {}
    for c in rows:
        r = by.setdefault(c['run_id'], {'run_id': c['run_id'], 'points': [], 'spec': {
            'recipe': c['recipe'], 'stack': c['stack'] or None, 'seed': c['seed']}})
        r['points'].append((c['step'], c['val_loss']))
    for r in by.values():
        r['eval_steps'], r['val_loss'] = (list(t) for t in zip(*sorted(r.pop('points'))))
    return list(by.values())


study_runs, gaps, inference = read('runs'), read('gaps'), read('inference')
study = curve_results(read('curves'))
prov = {r['item']: r['value'] for r in read('provenance')}
for key in ('command', 'date_utc', 'fp8emu', 'torch', 'corpus'):
    if key in prov:
        print(f'{key:9s} {prov[key]}')
print(f"{len(study_runs)} runs, {sum(g['stack'] != '' for g in gaps)} recipe x stack pairs in {DATA.name}")""",
        "### Validation loss, one figure per GPU stack\n"
        "Mean over seeds with a band from the lowest to the highest seed; the fp32 (dotted) and bf16 (dashed) "
        "baselines are in every panel.",
        """\
stacks = list(dict.fromkeys(r['spec']['stack'] for r in study if r['spec']['stack'] is not None))
for stack in stacks:
    display(report.figure_curves([r for r in study if r['spec']['stack'] in (None, stack)]))""",
        "### Final gap to bf16\n"
        "Final validation loss minus bf16's at the same seed, averaged over seeds, with its 95 % Student-t "
        "interval (none where a pair ran one seed).",
        """\
fig = report.figure_gaps(gaps)
twins = sum(len(g) - 1 for g in report.identical_results(study_runs, read('curves')))
n_pairs = sum(g['stack'] != '' for g in gaps)
fig.axes[0].set_title(f'{n_pairs} pairs, {n_pairs - twins} distinct results (identical bits share a result)',
                      fontsize=9)
fig""",
        "### The tables: gap to bf16 and inference perplexity\n"
        "The guide's tables, made by `report.guide_tables` from `runs.csv`, `gaps.csv` and `inference.csv`.",
        "display(Markdown(report.guide_tables(DATA)))",
        "### Per-layer diagnostics over training\n"
        "For each emulated layer, pass and operand: the GEMM's relative error against float64, the fractions "
        "underflowed and saturated, and the amax, averaged over each evaluation interval of a pair's first "
        "seed. `diagnostics.csv` is written into the study's output folder; where `DATA` has none, the "
        "committed figure (drawn by the same function when the study ran) is shown.",
        """\
DIAG_RUN = 'te-delayed@h100-s0'   # any run_id of diagnostics.csv
if (DATA / 'diagnostics.csv').exists():
    diag = read('diagnostics')
    ids = list(dict.fromkeys(d['run_id'] for d in diag))
    run_id = DIAG_RUN if DIAG_RUN in ids else ids[0]
    print(f'diagnostics.csv: {len(ids)} runs; drawing {run_id}')
    fig = report.figure_diagnostics({'run_id': run_id, 'diagnostics': [d for d in diag if d['run_id'] == run_id]})
else:
    png_path = ROOT / 'figures' / 'lm_study_diagnostics.png'
    print(f'{DATA.name} has no diagnostics.csv: showing {png_path.relative_to(ROOT)}')
    png = matplotlib.image.imread(png_path)
    fig = Figure(figsize=(png.shape[1] / 100, png.shape[0] / 100))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.imshow(png)
    ax.set_axis_off()
fig""",
        "### Accumulation length (`k_drift.csv`)\n"
        "Where the study folder holds `k_drift.csv` (how far fast accumulation drifts as the GEMM's K grows), "
        "it is shown here: its rows as a table and, when it has a `k` column, each numeric column against K "
        "with one line per combination of its text columns. Without the file this part is skipped.",
        """\
def markdown_table(rows, limit=40):
    cols = list(rows[0])
    cell = lambda v: f'{v:.6g}' if isinstance(v, float) else str(v)  # noqa: E731
    lines = ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    lines += ['| ' + ' | '.join(cell(r[c]) for c in cols) + ' |' for r in rows[:limit]]
    more = f'\\n\\n({len(rows) - limit} more rows in the file)' if len(rows) > limit else ''
    return '\\n'.join(lines) + more


if not (DATA / 'k_drift.csv').exists():
    print(f'{DATA.name} has no k_drift.csv: skipped')
else:
    kd = read('k_drift')
    print(f'k_drift.csv: {len(kd)} rows')
    if kd:
        display(Markdown(markdown_table(kd)))
        kcol = next((c for c in kd[0] if c.lower() == 'k'), None)
        texts = [c for c in kd[0] if isinstance(kd[0][c], str)]
        nums = [c for c in kd[0] if c != kcol and c not in texts and c != 'seed'
                and all(isinstance(r[c], (int, float)) for r in kd)
                and not all(isinstance(r[c], float) and math.isnan(r[c]) for r in kd)]
        if kcol and nums:
            kfig = Figure(figsize=(5 * len(nums), 3.8))
            for ax, col in zip(kfig.subplots(1, len(nums), squeeze=False)[0], nums):
                for key in dict.fromkeys(tuple(r[c] for c in texts) for r in kd):
                    pts = sorted((r[kcol], r[col]) for r in kd if tuple(r[c] for c in texts) == key)
                    ax.plot(*zip(*pts), marker='o', ms=3, label=' '.join(map(str, key)) or col)
                ax.set_xscale('log', base=2)
                ax.set_xlabel(kcol)
                ax.set_title(col, fontsize=9)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=6)
            kfig.tight_layout()
            display(kfig)""",
        "## Findings, computed from the CSV\n"
        "Every number below is read from the files above when this cell runs (nothing is typed in), so "
        "they follow the study as it is regenerated. Every pair's gap at a seed subtracts the same bf16 run, so "
        "the per-pair intervals move together and counting those that exclude zero is no test: the verdict "
        "comes from one joint analysis over the distinct results (`report.joint_analysis`, identical results "
        "once), and a pair's own interval only says how small a gap it could resolve.",
        """\
def interval(g):
    if g['diverged']:
        return f"{int(g['diverged'])} of {int(g['seeds'])} seeds diverged"
    if math.isnan(g['gap_to_bf16']):
        return 'no bf16 run at its seeds'
    if math.isnan(g['gap_ci95_low']):
        return 'no interval (one seed)'
    return f"95 % interval [{g['gap_ci95_low']:+.4f}, {g['gap_ci95_high']:+.4f}]"


base = {g['recipe']: g for g in gaps if g['stack'] == ''}
pairs = [g for g in gaps if g['stack'] != '']
by_pair = {(g['recipe'], g['stack']): g for g in pairs}
emulated = [r for r in study_runs if r['stack'] != '']
seed_counts = sorted({int(g['seeds']) for g in pairs})
facts = [f"**The study.** {len(study_runs)} runs of {', '.join(sorted({str(r['steps']) for r in study_runs}))} "
         f"steps: fp32 and bf16 with {int(base['bf16']['seeds'])} seeds each, {len(pairs)} recipe x stack pairs "
         f"on {len({g['stack'] for g in pairs})} stacks with {' or '.join(map(str, seed_counts))} seeds each; "
         f"diverged runs: {sum(r['diverged'] for r in study_runs)}."]
if 'fp32' in base:
    facts.append(f"**The noise floor.** fp32 ends {base['fp32']['gap_to_bf16']:+.4f} nats/byte from bf16 "
                 f"({interval(base['fp32'])}): read every recipe's gap against that spread.")
curve_rows = read('curves')
same = report.identical_results(study_runs, curve_rows)
twins = {lab for grp in same for lab in grp[1:]}
if same:
    facts.append(f"**Identical results.** {len(same)} groups of pairs give the same losses bit for bit at every "
                 f"seed ({'; '.join(' = '.join(grp) for grp in same)}): the {len(pairs)} pairs are "
                 f"{len(pairs) - len(twins)} distinct results, each counted once below.")
own = [g for g in pairs if g['label'] not in twins and not math.isnan(g['gap_ci95_low'])]
if own:
    halves = sorted((g['gap_ci95_high'] - g['gap_ci95_low']) / 2 for g in own)
    facts.append(f"**What one pair resolves.** The median 95 % half-width of a pair's own interval is "
                 f"{halves[len(halves) // 2]:.4f} nats/byte: a smaller gap to bf16 is not excluded. "
                 f"{sum(g['gap_ci95_low'] > 0 or g['gap_ci95_high'] < 0 for g in own)} of {len(own)} intervals "
                 "exclude zero, a count that is no test (they share bf16's runs).")
try:
    j = report.joint_analysis(study_runs, curve_rows)
except ValueError as exc:   # too few results or seeds, or a diverged run
    facts.append(f"**No joint analysis:** {exc}.")
else:
    sh = j['shift']
    differ = j['p_F'] < 0.05 or j['p_max'] < 0.05
    facts.append(
        f"**One joint test over the {len(j['labels'])} distinct results.** A shift common to all against bf16: "
        f"{sh['mean']:+.4f} (95 % interval [{sh['ci_low']:+.4f}, {sh['ci_high']:+.4f}], over "
        f"{len(j['seeds'])} seeds); differences among them: F({j['df'][0]}, {j['df'][1]}) = {j['F']:.2f}, "
        f"p = {j['p_F']:.2f}, resolving +-{j['pair_diff_half']:.4f} between two results; the farthest from "
        f"the mean of all, {j['max_dev_label']} at {j['dev'][j['max_dev_label']]:+.4f}, against "
        f"+-{j['max_dev_crit']:.4f} for every result at once (permutation p = {j['p_max']:.2f}). "
        + ("The results differ." if differ else "No result is resolved from the others, and "
           + ("the common shift from bf16 is resolved." if sh['ci_low'] > 0 or sh['ci_high'] < 0
              else "no shift from bf16 is resolved, at these resolutions.")))
finite = [g for g in pairs if not math.isnan(g['gap_to_bf16'])]
if finite:
    lo = min(finite, key=lambda g: g['gap_to_bf16'])
    hi = max(finite, key=lambda g: g['gap_to_bf16'])
    facts.append(f"**Extremes.** The lowest mean gap: {lo['label']}, {lo['gap_to_bf16']:+.4f} ({interval(lo)}); "
                 f"the highest: {hi['label']}, {hi['gap_to_bf16']:+.4f} ({interval(hi)}).")
final = {(r['recipe'], r['stack'], r['seed']): r['final_val_loss'] for r in study_runs}


def compare(head, a, b, b_name):
    \"\"\"One finding: pair a's final loss minus pair b's, paired by seed (report.gap_stats), or why none.\"\"\"
    seeds = sorted(s for (r, st, s) in final if (r, st) == (a['recipe'], a['stack'])
                   and (b['recipe'], b['stack'], s) in final)
    d = report.gap_stats([final[(a['recipe'], a['stack'], s)] - final[(b['recipe'], b['stack'], s)]
                          for s in seeds])
    if math.isnan(d['mean']):
        return f"{head}: no paired number ({a['label']}: {interval(a)}; {b['label']}: {interval(b)})."
    ci = 'no interval' if math.isnan(d['ci_low']) else f"95 % interval [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]"
    return (f"{head} ends {d['mean']:+.4f} nats/byte from {b_name}, paired over {d['n']} seeds ({ci}); "
            f"to bf16: {a['gap_to_bf16']:+.4f} against {b['gap_to_bf16']:+.4f}.")


for (recipe, stack), g in by_pair.items():
    if (recipe, stack + '-fast') in by_pair:
        facts.append(compare(f"**Fast accumulation in every pass, {recipe}.** On {stack}-fast it",
                             by_pair[(recipe, stack + '-fast')], g, stack))
for (recipe, stack), g in by_pair.items():
    for (other, ostack), a in by_pair.items():
        if ostack == stack and other.startswith(recipe + '-no-'):
            facts.append(compare(f"**{recipe} without {other[len(recipe) + 4:]}** ({stack})", a, g,
                                 f"{recipe} with it"))
if emulated:
    cost = [g['slowdown_vs_fp32'] for g in pairs]
    facts.append(f"**Cost.** An emulated training step took {min(cost):.0f}x to {max(cost):.0f}x an fp32 "
                 f"step ({sum(r['wall_s'] for r in emulated) / 60:.1f} min of emulated runs in all).")
quant = [r for r in inference if r['config'] not in ('bf16', 'fp32')]
if quant:
    worst = max(quant, key=lambda r: abs(r['ppl_ratio_to_bf16'] - 1))
    facts.append(f"**Inference.** The bf16 model's validation perplexity is "
                 f"{next(r['perplexity'] for r in inference if r['config'] == 'bf16'):.3f}; its {len(quant)} "
                 f"quantized configurations give {min(r['ppl_ratio_to_bf16'] for r in quant):.4f}x to "
                 f"{max(r['ppl_ratio_to_bf16'] for r in quant):.4f}x that, the furthest being "
                 f"{worst['config']} ({worst['perplexity']:.3f}).")
display(Markdown('\\n'.join(f'- {f}' for f in facts)))""",
        "## (c) Forks from a shared checkpoint\n"
        "`docs/data/lm-forks` holds the fork study (`fp8emu train-study --forks`): every pair and baseline "
        "trained its last steps from one float32 checkpoint on the same batches, and its trained weights were "
        "evaluated in float32 on the whole validation split. `fp8emu.lab.lm_forks` makes its tables and "
        "compares the resolution of the two designs (the median seed-to-seed sd of a pair's paired gap).",
        """\
from fp8emu.lab import lm_forks

FORKS = ROOT / 'docs' / 'data' / 'lm-forks'
display(Markdown(lm_forks.guide_tables(FORKS, DATA)))""",
        "### Gap to bf16 per pair, in both designs\n"
        "Left: from scratch, each run's own forward; right: forked, float32 on the whole split (its own axis).",
        "fig = lm_forks.figure_resolution(FORKS, DATA)\nfig",
    ],
}


def main():
    HERE.mkdir(exist_ok=True)
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        for c in cells:
            is_md = c.startswith("#") and not c.startswith("# Parameters")
            is_md = is_md or (not any(t in c for t in ("=", "(", "import")) and not c.startswith("fig"))
            nb.cells.append(new_markdown_cell(c) if is_md else new_code_cell(c))
        nb.cells[1].metadata["tags"] = ["parameters"]
        for i, cell in enumerate(nb.cells):
            cell.id = f"{name[:2]}-{i}"
        nbformat.write(nb, HERE / f"{name}.ipynb")


if __name__ == "__main__":
    main()
