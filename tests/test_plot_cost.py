"""attnlib.plot.scaling (chapter 11): log-log axes, fitted slopes in the legend, clear errors."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnlib import AttnlibError, plot

TS = [128, 256, 512, 1024]


def test_scaling_draws_each_series_with_its_slope_on_log_axes():
    fig = plot.scaling(
        TS,
        {"quadratic": [3 * t**2 for t in TS], "linear": torch.tensor([5.0 * t for t in TS])},
        ylabel="bytes",
        title="memory",
    )
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [line.get_label() for line in ax.lines]
    assert labels == ["quadratic: slope 2.00", "linear: slope 1.00", "$\\propto T$", "$\\propto T^{2}$"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["128", "256", "512", "1024"]
    assert ax.get_ylabel() == "bytes" and ax.get_title() == "memory"
    # the guides pass through the first series' last point and have the right slopes
    for line, p in zip(ax.lines[2:], (1, 2)):
        x, y = line.get_data()
        assert y[-1] == pytest.approx(3 * 1024**2)
        assert np.log(y[-1] / y[0]) / np.log(x[-1] / x[0]) == pytest.approx(p)
    # the two guides are told apart by their line style, not only by their steepness (same grey)
    assert ax.lines[2].get_linestyle() != ax.lines[3].get_linestyle()
    plt.close(fig)


def test_scaling_fits_the_last_points_and_draws_on_given_axes():
    ys = [10.0, 11.0, 4 * 11.0, 16 * 11.0]  # flat, then quadratic
    fig, axes = plt.subplots(1, 2)
    out = plot.scaling(TS, {"time": ys}, fit_last=3, guides=(), ax=axes[1])
    assert out is fig
    assert [line.get_label() for line in axes[1].lines] == ["time: slope 2.00"]
    plot.scaling(TS, {"time": ys}, guides=(), ax=axes[0])
    assert axes[0].lines[0].get_label() != "time: slope 2.00"  # all four points: a smaller slope
    plt.close(fig)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(xs=[128], series={"a": [1]}), r"xs: expected at least two positive"),
        (dict(xs=[0, 1], series={"a": [1, 2]}), r"xs: expected at least two positive"),
        (dict(xs=TS, series={}), r"series: expected a non-empty dict"),
        (dict(xs=TS, series=[1, 2, 3, 4]), r"series: expected a non-empty dict"),
        (dict(xs=TS, series={"a": [1, 2, 3]}), r"series\['a'\]: expected 4 positive finite numbers"),
        (dict(xs=TS, series={"a": [1, 2, 0, 4]}), r"series\['a'\]: expected 4 positive"),
        (dict(xs=TS, series={"a": [1, 2, 3, 4]}, fit_last=1), r"fit_last: expected None or an int from 2 to 4"),
        (dict(xs=TS, series={"a": [1, 2, 3, 4]}, fit_last=5), r"fit_last: expected None or an int from 2 to 4"),
    ],
)
def test_scaling_rejects_bad_input(kwargs, match):
    with pytest.raises(AttnlibError, match=match):
        plot.scaling(**kwargs)
    plt.close("all")
