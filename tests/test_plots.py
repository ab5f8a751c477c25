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
