"""Figures render with labelled axes and titles, deterministically."""

import pytest

from fp8emu.lab import plots

QUICK = [n for n in plots.available_figures()
         if n in ("fig1_values_per_binade", "fig2_relative_error", "fig3_sqnr_vs_scale",
                  "fig4_rounding_bias", "fig5_delayed_scaling", "fig6_granularity",
                  "fig7_gemm_accumulation", "fig9_conformance", "fig10_block_scaled_gemm",
                  "fig12_tensor_core_catalogue")]


@pytest.mark.parametrize("name", QUICK)
def test_figure_has_labels_titles_and_data(name):
    fig = plots.FIGURES[name](size=0.05)
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_title()
        assert ax.lines or ax.patches or ax.collections


def test_save_is_deterministic(tmp_path):
    a = plots.save_figures(tmp_path / "a", ["fig4_rounding_bias"], size=0.05)[0].read_bytes()
    b = plots.save_figures(tmp_path / "b", ["fig4_rounding_bias"], size=0.05)[0].read_bytes()
    assert a == b and a[:4] == b"\x89PNG"


def test_unknown_figure_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown figure"):
        plots.save_figures(tmp_path, ["nope"])


def test_available_figures_need_their_modules():
    avail = plots.available_figures()
    assert avail[:4] == ["fig1_values_per_binade", "fig2_relative_error", "fig3_sqnr_vs_scale",
                         "fig4_rounding_bias"]
    assert set(avail) <= set(plots.FIGURES)


# ----------------------------------------------------------------------------- your own data
# The drawn numbers are compared with computations written here (ml_dtypes casts, NumPy formulas).

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from fp8emu.attention import attention  # noqa: E402
from fp8emu.lab.study import demo_checkpoint  # noqa: E402


def _sqnr(x, q):
    return 10 * np.log10(np.sum(x ** 2) / np.sum((q - x) ** 2))


def _labels_and_data(fig):
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
        assert ax.lines or ax.patches


def test_data_granularity_bars_are_the_sqnr_of_the_tensor():
    x = np.random.default_rng(0).standard_normal((32, 256)).astype(np.float32)
    fig = plots.figure_data_granularity(x, label="acts")
    bars = [p.get_width() for p in fig.axes[0].patches][::-1]    # drawn bottom-up
    s = np.float32(448) / np.abs(x).max()
    q = (x * s).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * (np.float32(1) / s)
    assert bars[0] == pytest.approx(_sqnr(x.astype(np.float64), q.astype(np.float64)), abs=1e-9)
    assert "acts, shape (32, 256)" in fig.axes[0].get_title()
    assert fig.axes[0].get_xlabel()


def test_data_sqnr_vs_scale_lines_match_ml_dtypes():
    x = np.random.default_rng(1).laplace(size=2048).astype(np.float32).astype(np.float64)
    scales = [2.0 ** -12, 2.0 ** -4, 1.0, 2.0 ** 8]
    fig = plots.figure_data_sqnr_vs_scale(x, formats=["e4m3fn"], scales=scales)
    _labels_and_data(fig)
    unscaled = fig.axes[0].lines[0]
    assert unscaled.get_label() == "e4m3fn unscaled"
    want = [_sqnr(x * s, np.clip(x * s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64))
            for s in scales]
    assert np.asarray(unscaled.get_ydata()) == pytest.approx(np.minimum(want, 80), abs=1e-9)


def test_data_error_vs_range_draws_the_tensors_binades():
    x = np.random.default_rng(2).lognormal(0, 2, 4000) * np.where(np.arange(4000) % 2, 1, -1)
    x[:7] = 0.0
    fig = plots.figure_data_error_vs_range(x, formats=["e5m2"], recipe="none")
    _labels_and_data(fig)
    e = np.floor(np.log2(np.abs(x[x != 0]))).astype(int)
    exps, counts = np.unique(e, return_counts=True)
    bars = fig.axes[1].patches
    assert [p.get_height() for p in bars] == counts.tolist()
    assert [p.get_x() + p.get_width() / 2 for p in bars] == pytest.approx(exps)
    q = np.clip(x, -57344, 57344).astype(ml_dtypes.float8_e5m2).astype(np.float64)
    rel = np.abs(q - x)[x != 0] / np.abs(x[x != 0])
    mean_line = fig.axes[0].lines[0]
    want = [max(rel[e == b].mean(), 2.0 ** -30) for b in exps]
    assert np.asarray(mean_line.get_ydata()) == pytest.approx(want, rel=1e-12)
    assert "7 zeros" in fig.axes[1].get_title()


def test_data_gemm_error_lines():
    g = np.random.default_rng(3)
    a, b = g.standard_normal((4, 256)), g.standard_normal((256, 3))
    fig = plots.figure_data_gemm_error(a, b, accumulators=["exact", "hopper"], ks=[32, 256])
    _labels_and_data(fig)
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    assert list(lines["exact: accumulation"].get_xdata()) == [32, 256]
    assert max(lines["exact: accumulation"].get_ydata()) <= 3 * 2.0 ** -24
    sa = np.float32(448) / np.float32(np.abs(a).max())
    sb = np.float32(448) / np.float32(np.abs(b).max())
    qa = (a.astype(np.float32) * sa).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) / np.float64(sa)
    qb = (b.astype(np.float32) * sb).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) / np.float64(sb)
    for i, k in enumerate((32, 256)):
        ref = a[:, :k] @ b[:k]
        want = np.linalg.norm(qa[:, :k] @ qb[:k] - ref) / np.linalg.norm(ref)
        assert lines["exact: total"].get_ydata()[i] == pytest.approx(want, rel=1e-5)


def test_data_attention_lines_are_the_error_against_float64_attention():
    g = np.random.default_rng(4)
    q, k, v = g.standard_normal((8, 32)), g.standard_normal((128, 32)), g.standard_normal((128, 32)) + 0.5
    fig = plots.figure_data_attention(q, k, v, recipes=["fa3-fp8"], contexts=[64, 128])
    _labels_and_data(fig)
    line = fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [64, 128]
    for i, n in enumerate((64, 128)):
        s = q @ k[:n].T / np.sqrt(32)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        ref = (p / p.sum(axis=1, keepdims=True)) @ v[:n]
        out = attention(q, k[:n], v[:n], "fa3-fp8").out.reshape(ref.shape).astype(np.float64)
        assert line.get_ydata()[i] == pytest.approx(np.linalg.norm(out - ref) / np.linalg.norm(ref), rel=1e-6)


def test_data_figures_read_a_checkpoint_tensor_by_name():
    fig = plots.figure_data_granularity("model.layers.0.mlp.down_proj.weight", checkpoint=demo_checkpoint())
    assert len(fig.axes[0].patches) == 10
    fig = plots.figure_data_gemm_error("activations.layers.0.mlp_input", "model.layers.0.mlp.up_proj.weight",
                                       b_transposed=True, checkpoint=demo_checkpoint(), accumulators=["fp32"])
    assert list(fig.axes[0].lines[0].get_xdata()) == [16, 32, 64, 128, 256]


def test_data_figures_take_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 128, generator=torch.Generator().manual_seed(0), requires_grad=True)
    fig = plots.figure_data_error_vs_range(x, formats=["e4m3fn"])
    _labels_and_data(fig)


@pytest.mark.parametrize("call, err, match", [
    (lambda: plots.figure_data_sqnr_vs_scale([1.0], formats="e4m3fn"), TypeError, "sequence of format names"),
    (lambda: plots.figure_data_granularity("w", checkpoint=None), TypeError, "checkpoint=PATH"),
    (lambda: plots.figure_data_attention(np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 4)), recipes=["nope"]),
     ValueError, "unknown attention recipe 'nope'"),
    (lambda: plots.figure_data_attention(np.ones((2, 4)), np.ones((3, 4)), np.ones((2, 4))), ValueError,
     "k and v must have shapes"),
    (lambda: plots.figure_data_attention(np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 4)), contexts=[9]),
     ValueError, r"1\.\.3"),
])
def test_data_figures_reject_bad_input(call, err, match):
    with pytest.raises(err, match=match):
        call()


def test_data_block_scaled_gemm_matches_an_ocp_mx_computation():
    # MXFP8 per OCP MX v1.0 with ml_dtypes: per 32 along K, scale 2^(floor(log2 amax) - 8), elements cast
    # (saturating) to e4m3fn; the 'exact' accumulator rounds the exact sum to float32 once.
    g = np.random.default_rng(5)
    a, b = g.standard_normal((3, 128)), g.standard_normal((128, 2))
    fig = plots.figure_data_block_scaled_gemm(a, b, recipes=["mxfp8"], ks=[64, 128])
    _labels_and_data(fig)
    line = fig.axes[0].lines[0]

    def mx(x):          # blocks along the last axis
        blk = x.reshape(x.shape[0], -1, 32)
        e = np.floor(np.log2(np.max(np.abs(blk), axis=-1, keepdims=True))) - 8
        q = np.clip(blk / 2.0 ** e, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * 2.0 ** e
        return q.reshape(x.shape)
    for i, k in enumerate((64, 128)):
        ref = a[:, :k] @ b[:k]
        out = (mx(a[:, :k]) @ mx(b[:k].T).T).astype(np.float32).astype(np.float64)
        assert line.get_ydata()[i] == pytest.approx(np.linalg.norm(out - ref) / np.linalg.norm(ref), rel=1e-9)
    with pytest.raises(ValueError, match="multiples of 32"):
        plots.figure_data_block_scaled_gemm(a, b, ks=[48])
    with pytest.raises(ValueError, match="unknown block-scaled recipe 'mxfp9'"):
        plots.figure_data_block_scaled_gemm(a, b, recipes=["mxfp9"])


def test_data_figures_take_jax_arrays_as_their_numpy_values():
    jnp = pytest.importorskip("jax.numpy")
    x = np.random.default_rng(6).standard_normal((8, 64)).astype(np.float32)
    got = plots.figure_data_granularity(jnp.asarray(x, dtype=jnp.bfloat16))
    want = plots.figure_data_granularity(x.astype(ml_dtypes.bfloat16))
    assert [p.get_width() for p in got.axes[0].patches] == [p.get_width() for p in want.axes[0].patches]


def test_panel_titles_do_not_overlap():
    """Fig 5's two panel titles ran into each other. Every pair of panels in a figure keeps its
    titles' drawn boxes apart (checked on the rendered figure, not on the strings)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = plots.figure_delayed_scaling(size=0.15)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
    assert len(boxes) == 2
    assert not boxes[0].overlaps(boxes[1]), (boxes[0], boxes[1])
