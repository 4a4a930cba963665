"""Notebook glue for the teaching demos: figures sized for a projector, and the controls of a class.

- ``for_screen(fig)``: a demo's figure (the command line's look: same panels, palette, style)
  resized for JupyterLab's output area at 1280 × 720, with every text at least
  ``MIN_TEXT_PX`` pixels tall there and the heading wrapped to the width;
- ``DemoPanel(module, base)``: ``show(heads, lr, steps)`` runs and draws one setting (prints the
  demo's few summary lines, returns nothing, keeps the arrays in ``.result``); ``controls()``
  the widget: an H list that shows every value, an η slider of exact values, a steps slider and
  a *Run Interact* button, under one line that says how to use them;
- ``heads_select``, ``lr_slider``, ``steps_slider``, ``run_controls``: the parts, for other
  functions (the quick start's sweep explorer).

ipywidgets is imported only by the functions that build widgets (the notebook extra).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from matplotlib import pyplot as plt
from matplotlib.figure import Figure, FigureBase
from matplotlib.legend import Legend
from matplotlib.text import Text

SCREEN_DPI = 100  # the inline backend draws the PNG at the figure's dpi
# Under a widget in JupyterLab at 1280 × 720 (file browser open) a figure has 844 px
# (tests/test_browser.py measures it); the inline backend's tight bounding box adds ≈ 20 px.
SCREEN_WIDTH_PX = 780
MIN_HEIGHT_PX = 500  # a row of three panels with their legends under them
MIN_TEXT_PX = 13.0  # every tick label, legend and title: readable from the back of a room
RUN_LABEL = "Run Interact"
HEAD_CHOICES = (1, 2, 4, 8, 16, 32, 64)
LR_CHOICES = (0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)  # exact values
HOW_TO = (
    "<b>How to use:</b> click an H; <b>Ctrl-click</b> (⌘-click on a Mac) adds or removes one, "
    "<b>Shift-click</b> picks a range. Set η and the steps, then press <b>Run Interact</b>: "
    "nothing runs until you press it."
)


def text_px(text: Text, fig: Figure) -> float:
    """The height of ``text``'s font in the figure's pixels (points × dpi / 72)."""
    return text.get_fontsize() * fig.dpi / 72


def for_screen(
    fig: Figure,
    *,
    width_px: float = SCREEN_WIDTH_PX,
    min_height_px: float = MIN_HEIGHT_PX,
    min_text_px: float = MIN_TEXT_PX,
) -> Figure:
    """Resize ``fig`` for a notebook shown on a projector, in place; returns it.

    The figure becomes ``width_px`` wide at ``SCREEN_DPI`` (so the browser shows it at its own
    size, not shrunk to the output area), as tall as its aspect ratio asks but at least
    ``min_height_px``; every text smaller than ``min_text_px`` grows to it and the heading is
    wrapped to the width. The constrained layout then re-fits the panels.
    """
    w, h = fig.get_size_inches()
    fig.set_dpi(SCREEN_DPI)
    width = width_px / SCREEN_DPI
    fig.set_size_inches(width, max(h * width / w, min_height_px / SCREEN_DPI))
    floor = min_text_px * 72 / SCREEN_DPI  # points
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = axis.get_ticklabels(which="both")
            if labels and min(t.get_fontsize() for t in labels) < floor:
                axis.set_tick_params(which="both", labelsize=floor)
    for text in fig.findobj(Text):
        if text.get_fontsize() < floor:
            text.set_fontsize(floor)
    heading = fig.get_suptitle()
    if heading:
        fig.suptitle(heading, fontsize=max(floor, min(fig._suptitle.get_fontsize(), 12.0)))
    _fit_texts(fig)
    return fig


def _wrap(text: Text, max_px: float, renderer) -> None:
    """Wrap ``text`` onto more lines if it is wider than ``max_px`` (its length along its direction)."""
    box = text.get_window_extent(renderer)
    length = box.height if text.get_rotation() % 180 == 90 else box.width
    if text.get_text() and length > max_px:
        longest = max(len(line) for line in text.get_text().split("\n"))
        chars = max(8, int(longest * max_px / length * 0.95))
        text.set_text("\n".join(textwrap.fill(line, chars) for line in text.get_text().split("\n")))


def _fit_texts(fig: Figure) -> None:
    """Headings, axis labels and legends that the larger fonts made wider than their panel: the
    heading and labels wrap, a legend goes to one column."""
    fig.draw_without_rendering()  # lays out the figure at the new size: the extents below are real
    renderer = fig._get_renderer()
    if fig._suptitle is not None:
        _wrap(fig._suptitle, fig.bbox.width * 0.98, renderer)
    for ax in fig.axes:
        panel = ax.figure.bbox.width  # the subfigure of a panel_row, else the figure
        for text in (ax.title, ax.xaxis.label):
            _wrap(text, min(panel, fig.bbox.width) * 0.95, renderer)
        _wrap(ax.yaxis.label, ax.bbox.height * 1.1, renderer)
    for legend in fig.findobj(Legend):
        parent = legend.parent
        if not isinstance(parent, FigureBase) or not legend.get_texts():
            continue
        # a legend under a panel (common.legend_below) wider than the panel: fewer columns
        handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
        size, ncols = legend.get_texts()[0].get_fontsize(), legend._ncols
        while ncols > 1 and legend.get_window_extent(renderer).width > parent.bbox.width:
            ncols -= 1
            legend.remove()
            legend = parent.legend(
                handles, labels, loc="outside lower center", ncols=ncols, fontsize=size, frameon=False
            )


def heads_select(options: Sequence[int], value: Sequence[int], description: str = "H"):
    """A multi-select list of H that shows every option (no hidden rows, no scrolling)."""
    import ipywidgets as widgets  # lazy: the notebook extra's: the demos run without it

    options = sorted({*options, *value})
    return widgets.SelectMultiple(
        options=options, value=tuple(value), rows=len(options), description=description
    )


def lr_slider(value: float, choices: Sequence[float] = LR_CHOICES, description: str = "η"):
    """A slider over exact step sizes (a log slider cannot land on 2, 3 or 5): reads what runs."""
    import ipywidgets as widgets  # lazy: the notebook extra's: the demos run without it

    options = sorted({*choices, float(value)})
    return widgets.SelectionSlider(
        options=[(f"{v:g}", v) for v in options], value=float(value), description=description
    )


def steps_slider(value: int, max_steps: int = 5000, description: str = "steps"):
    import ipywidgets as widgets  # lazy: the notebook extra's: the demos run without it

    return widgets.IntSlider(value=value, min=10, max=max(max_steps, value), step=10, description=description)


def run_controls(fn: Callable[..., Any], *, how_to: str = HOW_TO, **controls):
    """``fn``'s controls and a *Run Interact* button (``fn`` runs only when pressed; whatever it
    returns is not shown), under the how-to line (``how_to``, HTML: the H, η and steps one by
    default).

    ``fn`` runs with pyplot out of interactive mode and shows its figures itself (``plt.show()``
    or ``display``); a figure it leaves open is shown after it (closed, if it raised). The
    reason: ipykernel 7 fires IPython's post-execute event for every widget message, and
    JupyterLab (4.6 by default: comms over subshells) may hand a widget's messages to the kernel
    on two threads at once, so the inline backend's end-of-cell flush can run in another thread
    while ``fn`` draws. That flush shows every figure made in interactive mode under the other
    message, where no output area shows it, and closes it: the press would show no figure (a
    table shown before the figure makes the frontend send that other message). A figure made
    out of interactive mode is not the flush's to show.
    """
    import ipywidgets as widgets  # lazy: the notebook extra's: the demos run without it

    def quiet(**kwargs) -> None:
        before = set(plt.get_fignums())
        with plt.ioff():
            try:
                fn(**kwargs)  # its return value is dropped: interact would print it under the figure
            except BaseException:
                for num in set(plt.get_fignums()) - before:  # half drawn: not for a later show
                    plt.close(num)
                raise
            if plt.get_fignums():
                plt.show()

    ui = widgets.interactive(quiet, {"manual": True, "manual_name": RUN_LABEL}, **controls)
    return widgets.VBox([widgets.HTML(how_to), ui])


class DemoPanel:
    """One teaching demo in a notebook: ``show`` draws one setting, ``controls`` is its widget.

    ``module`` is a demo module (``dynamics.demo.attention``, ...), ``base`` its ``Settings``
    (H, η and steps are what the controls change). After each run ``result`` holds the arrays
    behind the figure (the module's ``NamedTuple``) and ``settings`` the setting.
    """

    def __init__(self, module, base, *, head_choices: Sequence[int] = HEAD_CHOICES, max_steps: int = 5000):
        self.module, self.base = module, base
        self.head_choices, self.max_steps = tuple(head_choices), max_steps
        self.result = None
        self.settings = base

    def show(self, heads: Sequence[int] | None = None, lr: float | None = None, steps: int | None = None):
        """Train and draw one setting (None: the base's), print the summary lines; returns None."""
        s = replace(
            self.base,
            heads=tuple(sorted(heads)) if heads is not None else self.base.heads,
            lr=float(lr) if lr is not None else self.base.lr,
            steps=int(steps) if steps is not None else self.base.steps,
        )
        if not s.heads:
            print("pick at least one H")
            return
        r = self.module.compute(s)
        for_screen(self.module.draw(r, s))
        plt.show()
        for line in self.module.report(r, s)[1]:
            print(line)
        self.result, self.settings = r, s

    def controls(self):
        """The widget: H, η and steps controls and a *Run Interact* button that calls ``show``."""
        return run_controls(
            self.show,
            heads=heads_select(self.head_choices, self.base.heads),
            lr=lr_slider(self.base.lr),
            steps=steps_slider(self.base.steps, self.max_steps),
        )
