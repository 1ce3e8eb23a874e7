"""attnlib.plot's RoPE figures (chapter 19): the wavelengths against context lengths, the frequency ratios of each
scaling, the accuracy against the length; the data drawn is the data given, and bad input is refused clearly."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnlib import AttnlibError, RopeScaling, plot, scaled_frequencies


def test_rope_wavelengths_draws_each_model_and_its_context():
    theta = scaled_frequencies(16, 10000.0, None)[0]
    fig = plot.rope_wavelengths({"a": (2 * math.pi / theta, 4096), "b": ([6.0, 60.0, 600.0], 100)}, title="t")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_title() == "t"
    assert [line.get_label() for line in ax.lines] == ["a", "a: context 4,096", "b", "b: context 100"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), (2 * math.pi / theta).double().numpy())
    assert ax.lines[1].get_ydata()[0] == 4096 and ax.lines[1].get_color() == ax.lines[0].get_color()
    plt.close(fig)


def test_rope_scalings_draws_the_ratio_against_the_wavelength():
    theta = scaled_frequencies(64, 500000.0, None)[0]
    linear = scaled_frequencies(64, 500000.0, RopeScaling("linear", factor=8.0))[0]
    llama3 = scaled_frequencies(64, 500000.0, RopeScaling("llama3", factor=8.0, original_max_position_embeddings=8192))[
        0
    ]
    fig = plot.rope_scalings(theta, {"linear": linear, "llama3": llama3}, original_length=8192)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [line.get_label() for line in ax.lines] == ["linear", "llama3", "training length 8,192"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), 1 / 8, rtol=1e-6)  # interpolation: every ratio 1/8
    np.testing.assert_allclose(ax.lines[1].get_xdata(), (2 * math.pi / theta).double().numpy(), rtol=1e-6)
    ratio = ax.lines[1].get_ydata()
    assert ratio[0] == pytest.approx(1.0) and ratio[-1] == pytest.approx(1 / 8)  # short waves kept, long ones / 8
    assert ax.lines[0].get_linestyle() != ax.lines[1].get_linestyle()  # told apart without colour
    plt.close(fig)


def test_accuracy_by_length_draws_each_variant_and_the_training_length():
    fig = plot.accuracy_by_length([32, 64, 128], {"default": torch.tensor([1.0, 0.5, 0.1]), "PI": [1, 1, 0.9]},
                                  train_length=32)  # fmt: skip
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert [line.get_label() for line in ax.lines] == ["default", "PI", "training length 32"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1.0, 0.5, 0.1])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64", "128"]
    assert ax.lines[0].get_marker() != ax.lines[1].get_marker()
    plt.close(fig)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: plot.rope_wavelengths({}), r"series: expected a non-empty dict"),
        (
            lambda: plot.rope_wavelengths({"a": [1.0, 2.0, 3.0]}),
            r"series\['a'\]: expected a pair \(wavelengths, context\)",
        ),
        (lambda: plot.rope_wavelengths({"a": ([1.0, -2.0], 10)}), r"series\['a'\] wavelengths: expected positive"),
        (lambda: plot.rope_scalings([1.0, 0.1], {"x": [1.0]}), r"series\['x'\]: expected 2 positive finite numbers"),
        (lambda: plot.rope_scalings([1.0, 0.0], {"x": [1.0, 1.0]}), r"theta: expected positive"),
        (lambda: plot.accuracy_by_length([32], {"a": [1.0]}), r"lengths: expected at least two"),
        (lambda: plot.accuracy_by_length([32, 64], {"a": [1.0, 1.5]}), r"series\['a'\]: expected 2 accuracies"),
        (lambda: plot.accuracy_by_length([32, 64], {"a": [1.0, 1.0]}, train_length=0), r"train_length: expected"),
    ],
)
def test_bad_input_is_refused_with_what_was_expected(call, match):
    with pytest.raises(AttnlibError, match=match):
        call()
