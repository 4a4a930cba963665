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
from dynamics.demo.widgets import LR_CHOICES, for_screen, heads_select, lr_slider

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


def _png_width(fig) -> int:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight")  # what the inline backend sends
    return Image.open(buf).size[0]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_screen_figure_is_readable_at_projector_size(module):
    fig, _ = _screen_figure(module)
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
    plt.close(fig)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_no_legend_covers_a_curve(module):
    """Short runs (10 steps) put curves anywhere: every legend sits outside the plotting areas."""
    fig, _ = _screen_figure(module)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = fig.findobj(Legend)
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            for line in ax.lines:
                xy = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
                xy = xy[np.all(np.isfinite(xy), axis=1)]
                inside = (xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)
                assert not inside.any(), f"legend {[t.get_text() for t in legend.get_texts()]} covers a curve"
    plt.close(fig)


def test_step_size_draws_bars_of_exactly_zero():
    fig, r = _screen_figure(step_size)
    ax = fig.axes[2]
    bottom = ax.get_ylim()[0]
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert len(bars) == r.max_diff.size
    assert all(p.get_y() + p.get_height() > bottom * 2 for p in bars), "a bar is hidden below the axis"
    zero_marks = [t for t in ax.texts if t.get_text() == "0"]
    assert len(zero_marks) == int((r.max_diff == 0).sum())
    plt.close(fig)


def test_controls_show_exact_step_sizes_and_every_head():
    pytest.importorskip("ipywidgets", reason="needs the notebook extra")
    lr = lr_slider(1.0)
    for value in (2.0, 3.0, 5.0):
        lr.value = value
        assert lr.value == value and lr.label == f"{value:g}"
    assert set(LR_CHOICES) <= set(lr.options and dict(lr.options).values())
    heads = heads_select([1, 2, 4, 8, 16, 32, 64], (1, 4, 16, 64))
    assert heads.rows == len(heads.options) == 7 and heads.value == (1, 4, 16, 64)
