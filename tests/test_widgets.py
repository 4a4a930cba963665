"""The notebooks' figures on a projector (dynamics.demo.widgets): drawn from hand-made arrays (no
training), sized by ``for_screen`` and measured as JupyterLab shows them at 1280 × 720 (the
inline backend's PNG at the figure's dpi with a tight bounding box, in an output area of
``OUTPUT_PX``, which tests/test_browser.py measures in a real browser): every text at least
12 px tall, no legend over a curve, the figure as wide as the output area at most; and the
controls: exact η values, every H visible."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from matplotlib import pyplot as plt
from matplotlib.legend import Legend
from matplotlib.text import Text
from PIL import Image
from test_demo import MODULES, RESULT_TYPES, hand_made

from dynamics.demo import attention, step_size
from dynamics.demo.widgets import LR_CHOICES, for_screen, heads_select, lr_slider, run_controls
from dynamics.errors import ConfigError
from dynamics.experiments import emergence as ex

OUTPUT_PX = 844  # the output area under a widget, JupyterLab 4 at 1280 × 720 with the file browser open
MIN_PX = 12.0


def _screen_figure(module, heads=(1, 4, 16, 64), steps=10):
    s = dataclasses.replace(module.QUICK, heads=heads, steps=steps, log_points=7)
    if module is attention:
        s = dataclasses.replace(s, heads=heads[:3], snapshots=4)
    r = RESULT_TYPES[module](**hand_made(module, s))
    if module is step_size:  # bit-identical runs: some differences exactly 0
        odd = np.arange(r.max_diff.size).reshape(r.max_diff.shape) % 2 == 1
        r = r._replace(max_diff=np.where(odd, r.max_diff, 0.0))
    return for_screen(module.draw(r, s)), r


_DRAWN: dict = {}


def _drawn(module):
    """``_screen_figure(module)``, built once per module and worker for the tests below, which only
    read it, and drawn at once: its legends' boxes and its lines' pixels as they are on that first
    draw (what a fresh figure shows; a later tight-bbox PNG may re-fit the layout by a hundredth of
    a pixel) come with it. Open until this file's tests are done (closing drops its Agg canvas)."""
    if module not in _DRAWN:
        fig, r = _screen_figure(module)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = [
            ([t.get_text() for t in legend.get_texts()], legend.get_window_extent(renderer))
            for legend in fig.findobj(Legend)
        ]
        lines = [
            line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
            for ax in fig.axes
            for line in ax.lines
        ]
        _DRAWN[module] = fig, r, (legends, lines)
    return _DRAWN[module]


@pytest.fixture(scope="module", autouse=True)
def _close_drawn():
    yield
    for fig, _, _ in _DRAWN.values():
        plt.close(fig)
    _DRAWN.clear()


def _png_width(fig) -> int:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight")  # what the inline backend sends
    return Image.open(buf).size[0]


def _assert_readable(fig) -> None:
    """As wide as the output area at most, every drawn text at least ``MIN_PX`` tall there."""
    width = _png_width(fig)
    assert width <= OUTPUT_PX, f"{width} px: JupyterLab would shrink it into {OUTPUT_PX} px"
    scale = min(1.0, OUTPUT_PX / width)
    small = [
        (t.get_text(), round(t.get_fontsize() * fig.dpi / 72 * scale, 1))
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() * fig.dpi / 72 * scale < MIN_PX
    ]
    for ax in fig.axes:  # tick labels (drawn ones)
        for t in ax.get_xticklabels() + ax.get_yticklabels():
            if t.get_visible() and t.get_text() and t.get_fontsize() * fig.dpi / 72 * scale < MIN_PX:
                small.append((t.get_text(), t.get_fontsize()))
    assert not small, f"texts under {MIN_PX} px on screen: {small[:10]}"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_screen_figure_is_readable_at_projector_size(module):
    fig, _, _ = _drawn(module)
    _assert_readable(fig)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_no_legend_covers_a_curve(module):
    """Short runs (10 steps) put curves anywhere: every legend sits outside the plotting areas."""
    _, _, (legends, lines) = _drawn(module)  # as drawn once, fresh
    assert legends
    for texts, box in legends:
        for xy in lines:
            xy = xy[np.all(np.isfinite(xy), axis=1)]
            inside = (xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)
            assert not inside.any(), f"legend {texts} covers a curve"


def test_step_size_draws_bars_of_exactly_zero():
    fig, r, _ = _drawn(step_size)
    ax = fig.axes[2]
    bottom = ax.get_ylim()[0]
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert len(bars) == r.max_diff.size
    assert all(p.get_y() + p.get_height() > bottom * 2 for p in bars), "a bar is hidden below the axis"
    zero_marks = [t for t in ax.texts if t.get_text() == "0"]
    assert len(zero_marks) == int((r.max_diff == 0).sum())


def test_controls_show_exact_step_sizes_and_every_head():
    pytest.importorskip("ipywidgets", reason="needs the notebook extra")
    lr = lr_slider(1.0)
    for value in (2.0, 3.0, 5.0):
        lr.value = value
        assert lr.value == value and lr.label == f"{value:g}"
    assert set(LR_CHOICES) <= set(lr.options and dict(lr.options).values())
    heads = heads_select([1, 2, 4, 8, 16, 32, 64], (1, 4, 16, 64))
    assert heads.rows == len(heads.options) == 7 and heads.value == (1, 4, 16, 64)


def _emergence_grid(optimizer="sgd", T=(4, 8, 16), trials=2):
    """A grid over T shaped as ``run`` returns it, from hand-made curves (no training): the
    attention reaches ½ at step 6·T and the test loss halves at step 4·T, except trial 1 at the
    last T, whose attention never does."""
    import types

    cfg = ex.config({"d": 8, "copies": 1, "repetition": 0.0}, copy_logits="free", optimizer=optimizer,
                    trials=trials, steps=200)  # fmt: skip
    steps = np.arange(0, 201, 2)
    x = np.asarray(T, np.float64)[:, None, None]
    attn = np.where(steps >= 6 * x, 0.9, 1 / x) * np.ones((1, trials, 1))  # (T, trials, L)
    attn[-1, 1] = 1 / x[-1, 0, 0]
    loss = np.where(steps >= 4 * x, 0.3, 1.0) * np.ones((1, trials, 1))
    grid = types.SimpleNamespace(axes=(("T", tuple(T)),))
    curves = {"attn_relevant": attn[None], "test_loss": loss[None]}
    return types.SimpleNamespace(config=cfg, grid=grid, steps=steps, curves=curves)


def test_emergence_report_and_figure_from_hand_made_curves():
    import math

    from figures.emergence import emergence_figure, report

    result = _emergence_grid()
    lines = report(result)
    eta = 2 * result.config.optim.lr  # the step on the paper's ½ loss
    for T, line in zip((4, 8, 16), lines[:3], strict=True):
        star = math.sqrt(math.pi / 2) * math.sqrt(8) * T / eta  # docs/frontier.md's t*, by hand
        emerged = "1/2" if T == 16 else "2/2"
        assert line == f"T = {T}: t_att {6 * T} ± 0 ({emerged}), t_loss {4 * T} ± 0 (2/2); t*/η = {star:.0f}"
    assert lines[3] == "t_att ∝ T^1.00 [1.00, 1.00], t_loss ∝ T^1.00 [1.00, 1.00]; closed form T^1"
    fig = for_screen(emergence_figure(result))
    assert "closed form t*" in [t.get_text() for t in fig.axes[2].get_legend().get_texts()]
    _assert_readable(fig)
    plt.close(fig)
    adam = _emergence_grid("adam")
    assert "t*/η" not in report(adam)[0] and report(adam)[3].endswith("(online SGD's; none for Adam)")
    fig = emergence_figure(adam)
    assert "closed form t*" not in [t.get_text() for t in fig.axes[2].get_legend().get_texts()]
    plt.close(fig)


def test_emergence_controls_sweep_one_knob_at_a_time():
    from dynamics.config.grid_axes import grid_preset

    assert ex.plan(T=(32, 8, 16), d=(16,), copies=1, repetition=(0.0,)) == (
        "T", (8, 16, 32), {"d": 16, "copies": 1, "repetition": 0.0}
    )  # fmt: skip
    assert ex.plan(T=(16,), d=16, copies=(2,), repetition=0.1)[:2] == (None, ())
    with pytest.raises(ConfigError, match="several values of T and copies: sweep one knob at a time"):
        ex.plan(T=(8, 16), d=16, copies=(1, 2), repetition=0.0)
    with pytest.raises(ConfigError, match="pick at least one value of d"):
        ex.plan(T=16, d=(), copies=1, repetition=0.0)
    # the optimisers' steps are the preset's (SGD) and the -adam grid presets' (Adam)
    assert ex.step_size("sgd") == grid_preset("emergence")[0].optim.lr
    assert ex.step_size("adam") == grid_preset("emergence-d-adam")[0].optim.lr
    with pytest.raises(ConfigError, match="optimizer='gd' is not one of 'sgd', 'adam'"):
        ex.step_size("gd")
    pytest.importorskip("ipywidgets", reason="needs the notebook extra")
    import ipywidgets as widgets

    ui = run_controls(lambda T: None, how_to="<b>pick T</b>", T=widgets.IntSlider(value=4))
    assert ui.children[0].value == "<b>pick T</b>"


def test_a_press_shows_its_figure_though_another_thread_flushes_while_it_draws(monkeypatch):
    """ipykernel 7 fires IPython's post-execute for every widget message, and JupyterLab may hand
    two of a widget's messages to the kernel on two threads at once: the inline backend's flush
    then runs while the press draws (the browser test saw it: the figure shown under the other
    message, where no output area shows it, and closed; none under the widget). Here that flush
    is called from inside the pressed function, in the middle of its drawing."""
    pytest.importorskip("ipywidgets", reason="needs the notebook extra")
    inline = pytest.importorskip("matplotlib_inline.backend_inline", reason="needs the notebook extra")
    import ipywidgets as widgets
    import matplotlib

    stage = ["drawing"]
    shown = []
    monkeypatch.setattr(inline, "display", lambda fig, **_: shown.append((stage[0], fig)))
    backend, interactive = matplotlib.get_backend(), matplotlib.is_interactive()
    plt.close("all")  # what other tests left open: a show shows every open figure
    plt.switch_backend("module://matplotlib_inline.backend_inline")
    matplotlib.interactive(True)  # as %matplotlib inline leaves it
    made = []

    def press(n, show=True):
        stage[0] = "drawing"
        made.append(plt.figure())
        inline.flush_figures()  # the other thread's post-execute
        stage[0] = "its own show" if show else "after it"
        if show:
            plt.show()

    try:
        for show, by in ((True, "its own show"), (False, "after it")):
            shown.clear()
            ui = run_controls(press, n=widgets.IntSlider(value=1), show=widgets.fixed(show))
            ui.children[1].update()  # what the button does
            assert shown == [(by, made[-1])], f"shown by {[s for s, _ in shown]}"
            assert not plt.get_fignums() and matplotlib.is_interactive()
        # a press that raises mid-draw: its half-drawn figure closed, not shown by the next press
        shown.clear()
        ui = run_controls(lambda n: [plt.figure(), 1 / 0], n=widgets.IntSlider(value=1))
        with pytest.raises(ZeroDivisionError):
            ui.children[1].f(n=1)
        assert not plt.get_fignums() and not shown and matplotlib.is_interactive()
    finally:
        inline.show._draw_called, inline.show._to_draw = False, []
        plt.switch_backend(backend)
        matplotlib.interactive(interactive)
