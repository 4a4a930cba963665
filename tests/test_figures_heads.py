"""figures.heads: the per-head figure of one run draws the same from memory and from a folder, leaves
out the panels its data lack, shows on its heatmaps the curves' values, keeps one colour per head,
marks a diverged run and refuses a bad H, trial or step in one line."""

import dataclasses

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from test_figures import check_pdf, check_png  # noqa: E402

from dynamics import run_sweep  # noqa: E402
from dynamics.cli.figures import main  # noqa: E402
from dynamics.config.schema import preset  # noqa: E402
from dynamics.core.data import planted_names  # noqa: E402
from dynamics.sweeps.result_files import write_results  # noqa: E402
from figures import heads_figure, plot_heads  # noqa: E402
from figures.heads import DIVERGED_COLOR, choose_steps, head_palette, head_run  # noqa: E402

DIRECTIONS = ["k_star_0", "k_star_1", "v_star_0", "v_star_1"]
STEPS = 6


@pytest.fixture(scope="module")
def real():
    """A small real sweep (H = 1, 3; two trials) with the per-head curves it logs today."""
    return run_sweep(
        preset("fig2"),
        progress=False,
        heads=[1, 3],
        steps=STEPS,
        trials=2,
        n_train=12,
        n_test=10,
        tokens=4,
        width=8,
        irrelevant_means=2,
        init="normal",
        head_sims=True,  # as tests/test_api.py's run: one compile serves both files
    )


def with_directions(result, *, key=True, attention=True, diverge=None, names=DIRECTIONS):
    """``result`` with planted-direction curves (head_u_cos, head_key_cos: head h of trial j drifts to
    direction (h + j) mod P) as the contract lays them out: (n_H, trials, L, H_max, P), NaN past H.
    ``diverge=(i, trial, step)``: that run diverges at that logged step (its curves NaN from there).
    ``names``: the directions' names; a saved result needs its data model's own (the loader checks them)."""
    n_h, trials, L, h_max = result.curves["head_u_norm"].shape
    P, t = len(names), np.linspace(0.0, 1.0, L)
    rng = np.random.default_rng(1)
    u = np.full((n_h, trials, L, h_max, P), np.nan)
    for i, H in enumerate(result.heads):
        for j in range(trials):
            for h in range(H):
                start = rng.uniform(0.0, 0.3, P)
                u[i, j, :, h] = start * (1 - t[:, None])
                u[i, j, :, h, (h + j) % P] = start[(h + j) % P] + (0.95 - start[(h + j) % P]) * t
    curves = {k: np.array(v, float) for k, v in result.curves.items()}
    curves["head_u_cos"] = u
    if key:
        curves["head_key_cos"] = 0.9 * u[..., ::-1]
    else:
        curves.pop("head_key_cos", None)  # the real run's own, for the planted directions it has
    if not attention:
        curves["head_attn_relevant"][:] = np.nan
    div = np.array(result.diverged_at)
    if diverge is not None:
        i, j, step = diverge
        div[i, j] = step
        for k, v in curves.items():
            if k != "head_steps":  # the per-head view's step axis, no curve
                v[i, j, result.steps >= step] = np.nan
    extra = {**result.extra, "directions": list(names)}
    return dataclasses.replace(result, curves=curves, diverged_at=div, extra=extra)


def without_directions(result):
    """``result`` as a data model without planted directions logs it: no direction cosines."""
    curves = {k: v for k, v in result.curves.items() if k not in ("head_u_cos", "head_key_cos")}
    extra = {k: v for k, v in result.extra.items() if k != "directions"}
    return dataclasses.replace(result, curves=curves, extra=extra, planted={})


def titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


def images(fig) -> list:
    return [im for ax in fig.axes for im in ax.get_images()]


def curve_axes(fig) -> dict:
    """The curve panels by title (the heatmaps' titles are 't = …')."""
    return {ax.get_title(): ax for ax in fig.axes if ax.get_title() and not ax.get_title().startswith("t = ")}


def head_lines(ax, L: int) -> list:
    """The per-head lines of a curve panel (not the vertical step marks)."""
    return [line for line in ax.get_lines() if len(line.get_xdata()) == L]


@pytest.mark.slow
def test_memory_and_folder_draw_the_same(real, tmp_path):
    for k, result in enumerate((real, with_directions(real, names=planted_names(real.config.data)))):
        folder = tmp_path / f"r{k}"
        write_results(result, folder)
        a, b = heads_figure(result, trial=1), heads_figure(folder, trial=1)
        assert a._suptitle.get_text() == b._suptitle.get_text()
        assert "H = 3, trial 1" in a._suptitle.get_text() and "softmax attention, query: first" in (
            a._suptitle.get_text()
        )
        assert len(a.axes) == len(b.axes) and titles(a) == titles(b)
        for x, y in zip(images(a), images(b), strict=True):
            np.testing.assert_array_equal(x.get_array().filled(np.nan), y.get_array().filled(np.nan))
        plt.close("all")


@pytest.mark.slow
def test_panels_are_drawn_only_where_there_are_data(real):
    fig = heads_figure(without_directions(real))  # a data model that plants no direction
    assert not images(fig)
    assert set(curve_axes(fig)) == {"attention on relevant tokens", "‖U_h‖", "‖W_h‖_F"}
    assert "planted directions" in fig._supxlabel.get_text()

    fig = heads_figure(with_directions(real))
    assert len(images(fig)) == 2 * 3  # U and key rows at three steps
    assert len(curve_axes(fig)) == 5 and fig._supxlabel is None

    fig = heads_figure(with_directions(real, key=False, attention=False))
    assert len(images(fig)) == 3
    assert set(curve_axes(fig)) == {"|cos(U_h, best direction)|", "‖U_h‖", "‖W_h‖_F"}
    note = fig._supxlabel.get_text()
    assert "attention on relevant tokens" in note and "key direction" in note
    plt.close("all")


@pytest.mark.slow
def test_heatmaps_show_the_curves_at_the_chosen_steps(real):
    result = with_directions(real)
    steps = [0, 2, 5]
    fig = heads_figure(result, H=3, trial=1, steps=steps)
    assert [t for t in titles(fig) if t.startswith("t = ")] == [f"t = {s}" for s in steps]
    maps = images(fig)  # row-major: U at each step, then the key direction
    for r, name in enumerate(("head_u_cos", "head_key_cos")):
        for c, s in enumerate(steps):
            want = result.curves[name][1, 1, list(result.steps).index(s), :3]  # (H, P)
            got = maps[r * len(steps) + c]
            np.testing.assert_allclose(got.get_array().filled(np.nan), want)
            assert got.get_clim() == (0.0, 1.0)
    assert choose_steps(head_run(result), None) == [1, 3, STEPS]  # first after 0, middle, last
    plt.close("all")


def test_one_colour_per_head_in_every_panel(real):
    fig = heads_figure(with_directions(real), H=3)
    palette = [to_rgba(c) for c in head_palette(3)]
    for title, ax in curve_axes(fig).items():
        assert [to_rgba(line.get_color()) for line in head_lines(ax, STEPS + 1)] == palette, title
    legend = fig.subfigs[1].legends[0]
    assert [to_rgba(h.get_color()) for h in legend.legend_handles[:3]] == palette
    assert legend.texts[0].get_text().startswith("head 0: U → k_star_0, key → ")
    heatmap = images(fig)[0].axes
    assert [to_rgba(t.get_color()) for t in heatmap.get_yticklabels()] == palette
    assert len({to_rgba(c) for c in head_palette(16)}) == 16
    plt.close("all")


def test_a_diverged_run_is_marked_and_its_default_steps_come_before(real):
    result = with_directions(real, diverge=(1, 0, 4))
    fig = heads_figure(result, H=3, trial=0)
    assert "DIVERGED at t = 4" in fig._suptitle.get_text()
    assert choose_steps(head_run(result, 3, 0)) == [1, 2, 3]
    for ax in curve_axes(fig).values():
        red = [line for line in ax.get_lines() if to_rgba(line.get_color()) == to_rgba(DIVERGED_COLOR)]
        assert red and red[0].get_xdata()[0] == 4
    plt.close("all")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"H": 2}, "H=2 is not an H of this sweep; it ran H = 1, 3"),
        ({"H": True}, "H=True must be an integer"),
        ({"trial": 2}, "trial=2 is out of range: this sweep ran 2 trials (0 to 1)"),
        ({"trial": -1}, "trial=-1 is out of range"),
        ({"steps": [0, 9]}, "steps: 9 is not a logged step of this run; logged (7): 0, 1, 2, 3, 4, 5, 6"),
        ({"steps": "0"}, "steps='0' must be None, a logged step or a list of them"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(real, kwargs, message):
    with pytest.raises((ValueError, TypeError)) as err:
        heads_figure(with_directions(real), **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_results_without_per_head_curves_are_refused(real):
    bare = dataclasses.replace(
        real, curves={k: v for k, v in real.curves.items() if not k.startswith("head_")}
    )
    with pytest.raises(ValueError, match=r"no per-head curves .*\(--head-metrics on\)"):
        heads_figure(bare)


@pytest.mark.slow
def test_saved_as_png_and_pdf_and_from_the_command_line(real, tmp_path, capsys):
    folder = tmp_path / "run"
    write_results(with_directions(real, names=planted_names(real.config.data)), folder)
    paths = plot_heads(folder, tmp_path / "heads", H=1, steps=[0, STEPS])
    assert [p.name for p in paths] == ["heads.png", "heads.pdf"]
    check_png(paths[0])
    check_pdf(paths[1])

    assert main(["--results", str(folder), "--heads", "--at", "H=3,trial=1", "--steps", "0,3"]) == 0
    assert (folder / "heads-H3-trial1.png").is_file() and (folder / "heads-H3-trial1.pdf").is_file()
    capsys.readouterr()
    for argv, message in (
        (["--at", "H=2"], "H=2 is not an H of this sweep"),
        (["--steps", "0,9"], "9 is not a logged step"),
        (["--at", "lr=1"], "with --heads it takes H= and trial=, not lr"),
        (["--axes", "lr"], "--axes chooses a grid's knobs"),
    ):
        assert main(["--results", str(folder), "--heads", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert main(["--heads"]) == 2
    assert "give its folder with --results DIR" in capsys.readouterr().err


def test_identical_heads_and_zero_vectors_are_named_not_hidden(real):
    result = with_directions(real)
    for v in result.curves.values():  # a symmetric θ(0): head 0 stands for every head
        if v.ndim >= 4:
            v[1, :, :, :3] = v[1, :, :, :1]
    result.curves["head_u_cos"][1, :, 0] = np.nan  # U = 0 at t = 0: no direction
    fig = heads_figure(result, H=3, steps=[0, STEPS])
    assert "the 3 heads are identical" in fig._suptitle.get_text()
    first = images(fig)[0].axes
    assert [t.get_text() for t in first.texts] == ["no value\n(zero vectors: no direction)"]
    assert "identical" not in heads_figure(with_directions(real), H=3)._suptitle.get_text()
    plt.close("all")
