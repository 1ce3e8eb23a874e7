"""attnlib.plot: figures carry the shapes in their titles and reject bad input."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
import torch

from attnlib import AttnlibError, plot


def test_show_matrix_title_has_shape():
    fig = plot.show_matrix(torch.randn(3, 5), "scores")
    assert fig.axes[0].get_title() == "scores\n3 × 5"
    plt.close(fig)


def test_show_matrices_labels_columns_and_axes():
    fig = plot.show_matrices(
        [("A", torch.eye(2)), ("B", torch.ones(3, 3))], col_labels=["k0", "k1", "k2"], xlabel="key"
    )
    a, b = fig.axes
    assert [t.get_text() for t in b.get_xticklabels()] == ["k0", "k1", "k2"]
    assert [t.get_text() for t in a.get_xticklabels()] == ["0", "1"]  # 2 columns: labels do not fit
    assert a.get_xlabel() == b.get_xlabel() == "key"
    plt.close(fig)


def test_show_matrices_with_operators():
    fig = plot.show_matrices([("A", torch.eye(2)), ("B", torch.randn(2, 3)), ("AB", torch.randn(2, 3))], ops=["@", "="])
    assert [ax.get_title() for ax in fig.axes] == ["A\n2 × 2", "B\n2 × 3", "AB\n2 × 3"]
    assert [t.get_text() for t in fig.texts] == ["@", "="]
    plt.close(fig)
    with pytest.raises(AttnlibError, match=r"ops: expected 1 symbols.*received 2"):
        plot.show_matrices([("A", torch.eye(2)), ("B", torch.eye(2))], ops=["@", "="])


def test_attention_heatmap_and_heads_grid():
    w = torch.softmax(torch.randn(2, 4, 4), dim=-1)
    fig = plot.attention_heatmap(w[0], list("abcd"), list("abcd"))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list("abcd")
    plt.close(fig)
    fig = plot.heads_grid(w, list("abcd"), ncols=4)
    assert [ax.get_title() for ax in fig.axes] == ["head 0\n4 × 4", "head 1\n4 × 4"]
    plt.close(fig)
    with pytest.raises(AttnlibError, match=r"weights: expected shape \(n_heads, T_q, T_k\)"):
        plot.heads_grid(torch.zeros(4, 4))
    with pytest.raises(AttnlibError, match=r"m: expected a 1-D or 2-D matrix"):
        plot.show_matrix(torch.zeros(2, 2, 2))


def test_no_negative_zero_in_cells():
    fig = plot.show_matrix(torch.tensor([[-0.001, 0.5], [-0.5, 0.0]]), "m")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["0.00", "0.50", "-0.50", "0.00"]
    plt.close(fig)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (([8, 9], [30.0]), {"read_ms": 20.0}, "one positive finite time per entry of tokens_cached"),
        (([8, 9], [30.0, -1.0]), {"read_ms": 20.0}, "one positive finite time"),
        (([8], ["fast"]), {"read_ms": 20.0}, "two sequences of numbers"),
        (([8], [30.0]), {"read_ms": 0.0}, "read_ms: expected a positive number"),
        (([8], [30.0]), {"read_ms": 20.0, "target": -1}, "target: expected None or a positive number"),
    ],
)
def test_decoding_steps_says_what_it_expected(args, kwargs, match):
    with pytest.raises(AttnlibError, match=match):
        plot.decoding_steps(*args, **kwargs)


def test_score_growth_draws_both_panels_and_says_what_it_expected():
    fig = plot.score_growth(
        [1, 2, 4, 8],
        {"without QK-norm": ([1.5, 6.0, 24.0, 96.0], [0.3, 0.6, 0.9, 1.0]), "QK-norm": ([1.5] * 4, [0.3] * 4)},
        n_keys=16,
        bound=4.0,
        bound_label="√d_head",
    )
    left, right = fig.axes
    assert [line.get_label() for line in left.lines] == ["without QK-norm", "QK-norm", "√d_head"]
    assert [line.get_label() for line in right.lines] == ["without QK-norm", "QK-norm", "one-hot", "uniform: 1/16"]
    assert left.get_xscale() == left.get_yscale() == "log" and right.get_yscale() == "linear"
    assert list(left.lines[0].get_ydata()) == [1.5, 6.0, 24.0, 96.0]
    assert right.lines[3].get_ydata()[0] == 1 / 16 and right.get_ylim()[1] > 1  # one-hot is visible
    plt.close(fig)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (([1], {"a": ([1.0], [0.5])}), {}, "scales: expected at least two positive"),
        (([1, 0], {"a": ([1.0, 1.0], [0.5, 0.5])}), {}, "scales: expected at least two positive"),
        (([1, 2], {}), {}, "series: expected a non-empty dict"),
        (([1, 2], {"a": ([1.0], [0.5, 0.5])}), {}, "one per s"),
        (([1, 2], {"a": ([1.0, -1.0], [0.5, 0.5])}), {}, "positive finite largest"),
        (([1, 2], {"a": ([1.0, 1.0], [0.5, 1.5])}), {}, r"largest weights in \(0, 1\]"),
        (([1, 2], {"a": ([1.0, 1.0], [0.5, 0.5])}), {"n_keys": 0}, "n_keys: expected None or a positive int"),
        (([1, 2], {"a": ([1.0, 1.0], [0.5, 0.5])}), {"bound": -1.0}, "bound: expected None or a positive number"),
    ],
)
def test_score_growth_rejects_bad_input(args, kwargs, match):
    with pytest.raises(AttnlibError, match=match):
        plot.score_growth(*args, **kwargs)
