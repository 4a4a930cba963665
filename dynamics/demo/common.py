"""Shared pieces of the teaching demos: ``DemoResult``; for computing, a training scan that keeps
what it is asked to observe at the logged steps (``train_logged``), the slot weights that pad H
heads into more stored ones (``first_heads``), the logged steps, DM1 data and a finiteness check;
for drawing, the style, the palette of H, a log iteration axis, and atomic PNG/GIF output
(``save_png``, ``Animation`` + ``save_gif``).

The engine (``dynamics.core.engine``) returns metrics only; the demos need parameters,
attention maps or a linearised model at the logged steps, so they run this small scan
(built from ``dynamics.core.model``, ``dynamics.core.losses`` and the engine's step, ``dynamics.core.update``)
inside their own ``jax.jit``.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.animation import PillowWriter
from matplotlib.figure import Figure
from matplotlib.text import Text
from tqdm.auto import tqdm

from dynamics.config.schema import DataConfig, log_schedule
from dynamics.core import update as upd
from dynamics.core.data import (
    Data,
    make_data,
)
from dynamics.infra.executables import exact_matmuls
from dynamics.infra.files import atomic_write_bytes

# The --quick settings' data (one trial): every demo draws the same shapes, so a test process
# compiles the data generator once for all of them.
QUICK_DATA = dict(n_train=24, n_test=30, T=5, d=8, n_irrelevant=2)
PNG_DPI = 120
GIF_DPI = 100  # the GIF's labels must read on a projector


@dataclass(frozen=True)
class DemoResult:
    """What a demo wrote and the numbers its picture shows (the CLI prints them, the tests check them)."""

    name: str
    files: tuple[Path, ...]
    numbers: dict[str, float] = field(default_factory=dict)
    lines: tuple[str, ...] = ()  # one-line findings, printed by the CLI
    arrays: Any = None  # what the demo's compute returned (numpy arrays): redraw without retraining


def train_logged(
    objective: Callable[[Any], jax.Array],
    params0: Any,
    optimizer: str,
    lr: Any,
    segments: Sequence[int],
    observe: Callable[[Any], Any],
) -> Any:
    """Minimise ``objective`` from ``params0`` with the optimiser part ``optimizer`` and step ``lr``
    (a scalar, or {parameter name: step}) by the engine's update (``dynamics.core.update``);
    ``observe(params)`` at step 0 and after each segment of ``segments[i]`` updates. Returns the
    observations stacked on a leading axis (L,).

    Traceable (call it inside ``jit``/``vmap``): steps run in ``lax.fori_loop`` inside a
    ``lax.scan`` over the segments, as in the engine.
    """

    opt = upd.direction(optimizer)

    def one_step(_, carry):
        p, state = carry
        return upd.update(p, jax.grad(objective)(p), state, opt, lr)

    def segment(carry, n_steps):
        carry = jax.lax.fori_loop(0, n_steps, one_step, carry)
        return carry, observe(carry[0])

    first = observe(params0)
    _, logged = jax.lax.scan(segment, (params0, opt.init(params0)), jnp.array(segments))
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, logged)


def first_heads(n_heads: jax.Array, n_slots: int) -> jax.Array:
    """Slot weights (S,) for ``dynamics.core.model.logits``: 1 for the first ``n_heads`` of ``n_slots``
    stored heads, 0 for the others (``n_heads`` may be traced).

    A weight-0 slot adds exactly nothing to Φ and gets exactly zero gradient, so one compiled
    program with ``n_slots`` stored heads runs every H ≤ ``n_slots`` (a traced H that ``vmap``
    can batch) and is the H-head model.
    """
    return (jnp.arange(n_slots) < n_heads).astype(jnp.zeros(()).dtype)  # (S,)


def schedule(steps: int, log_points: int | None = None) -> tuple[np.ndarray, tuple[int, ...]]:
    """(logged steps (L,), segment lengths (L − 1,)): every step, or ``log_points`` log-spaced ones."""
    points = np.array(log_schedule(steps, log_every=None if log_points else 1, log_points=log_points))
    return points, tuple(int(s) for s in np.diff(points))


def dm1_data(key: jax.Array, trials: int, **fields) -> Data:
    """DM1 (docs/model.md) with ``fields`` of ``DataConfig`` overridden; a leading trial axis."""
    data, _ = make_data(DataConfig(model="dm1", **fields), key, trials)
    return data


def check_finite(name: str, **arrays: np.ndarray) -> None:
    """Demos use fixed, stable settings; a non-finite number means something is broken: say which."""
    for label, value in arrays.items():
        if not np.all(np.isfinite(value)):
            raise FloatingPointError(f"demo {name}: {label} has non-finite values (the run diverged)")


def set_style() -> None:
    sns.set_theme(context="notebook", style="whitegrid")


def panel_row(n: int, figsize: tuple[float, float]) -> tuple[Figure, list]:
    """A constrained-layout figure of ``n`` panels side by side, each in a subfigure of its own, so
    that each panel's legend can sit under it (``legend_below``)."""
    fig = plt.figure(figsize=figsize, layout="constrained")
    return fig, [sub.subplots() for sub in fig.subfigures(1, n)]


def legend_below(ax, **kwargs):
    """The legend of ``ax`` under its panel (a ``panel_row`` subfigure), outside the plotting area:
    it hides no curve whatever the data (inside the axes, a legend covered curves of short runs)."""
    kwargs = {"frameon": False, "loc": "outside lower center", **kwargs}
    return ax.figure.legend(*ax.get_legend_handles_labels(), **kwargs)


def head_palette(heads: Sequence[int]) -> list:
    """One colour per H, ordered light to dark (the sweep figure's 'flare' palette)."""
    return sns.color_palette("flare", n_colors=len(heads))


def save_png(fig: Figure, path: Path, *, slide: str | None = None) -> Path:
    """Render ``fig`` to PNG in memory and write it atomically; closes the figure. ``slide``: put
    it on a 16:9 slide with this title first (``to_slide``; the demos' ``--slides``)."""
    if slide is not None:
        fig = to_slide(fig, slide)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


class Animation(NamedTuple):
    """A figure and how to draw each of its frames: what a GIF is made of."""

    fig: Figure
    draw_frame: Callable[[int], None]  # updates ``fig`` in place to show frame i
    frames: tuple[int, ...]  # the frame indices, in playing order


def save_gif(anim: Animation, path: Path, *, fps: float = 6, progress: bool = True) -> Path:
    """An animated GIF of ``anim`` with matplotlib's PillowWriter, one image per frame.

    The writer writes into a temporary folder; the finished file is then moved into place
    atomically, so ``path`` never holds half a GIF. Closes the figure.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, draw_frame, frames = anim
    writer = PillowWriter(fps=fps)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".gif-") as tmp:
        tmp_path = Path(tmp) / path.name
        with writer.saving(fig, str(tmp_path), dpi=GIF_DPI):
            # Lay the figure out once, then freeze it: every frame has the same size and
            # positions, and re-running the layout engine per frame would dominate the time.
            draw_frame(frames[0])
            fig.canvas.draw()
            fig.set_layout_engine("none")
            for i in tqdm(
                frames, desc=f"{path.name} frames", unit="frame", disable=not progress, leave=False
            ):
                draw_frame(i)
                writer.grab_frame()
        atomic_write_bytes(path, tmp_path.read_bytes())
    plt.close(fig)
    return path


SLIDE_SIZE = (16.0, 9.0)  # inches: 16:9, 1920 × 1080 px at PNG_DPI
SLIDE_FONT_SCALE = 1.6  # every text of the figure, so it reads from the back of a lecture hall


def to_slide(fig: Figure, title: str) -> Figure:
    """Turn a demo figure into a 16:9 slide: the slide size, every text enlarged by
    ``SLIDE_FONT_SCALE``, and ``title`` (plain words) instead of the symbol-laden heading."""
    fig.set_size_inches(*SLIDE_SIZE)
    for text in fig.findobj(Text):
        text.set_fontsize(text.get_fontsize() * SLIDE_FONT_SCALE)
    fig.suptitle(title, fontsize=22, fontweight="bold")
    return fig


# The demos keep every head's parameters and per-step records in memory (lazy-vs-rich also a
# linearisation): 10⁵ heads took 19 GB. Teaching needs a few dozen.
MAX_HEADS = 256


def settings_for(module, *, quick: bool = False, **overrides) -> Any:
    """The demo's ``QUICK`` or ``FULL`` settings with ``overrides`` (``heads``, ``lr``, ``steps``; None
    = keep); errors name the bad value."""
    s = module.QUICK if quick else module.FULL
    values = {k: v for k, v in overrides.items() if v is not None}
    if "heads" in values:
        heads = tuple(int(h) for h in values["heads"])
        if not heads or min(heads) < 1 or len(set(heads)) != len(heads) or max(heads) > MAX_HEADS:
            raise ValueError(
                f"--heads={','.join(map(str, heads))} must be distinct integers in [1, {MAX_HEADS}] "
                f"(a demo for a room; python -m dynamics.run takes more heads)"
            )
        values["heads"] = heads
    if "lr" in values and not (np.isfinite(values["lr"]) and values["lr"] > 0):
        raise ValueError(f"--lr={values['lr']} must be a finite number > 0")
    if "steps" in values and not 1 <= values["steps"] <= 10**6:
        raise ValueError(f"--steps={values['steps']} must be an integer in [1, 1000000]")
    return dataclasses.replace(s, **values)


def log_x(steps: np.ndarray) -> np.ndarray:
    """x values for a log iteration axis: step 0 is drawn at 1 (it is still labelled by the data)."""
    return np.maximum(steps, 1)


def demo_run(
    module: str, picture: str, *, compute_progress: bool = True, more_files=None
) -> Callable[..., DemoResult]:
    """The ``run`` of demo module ``module`` (its ``__name__``), the same for every demo:
    ``run(out, *, quick=False, seed=0, progress=True, settings=None, slides=False) -> DemoResult``
    computes with ``settings`` (else the module's ``QUICK`` or ``FULL``), draws the PNG ``picture``
    into ``out`` (16:9 under the module's ``SLIDE_TITLE`` with ``slides``) and reports.
    ``compute_progress``: the module's ``compute`` takes ``progress`` (one compiled program: it
    does not); ``more_files(result, settings, out, progress)``: the other files it writes (a GIF).
    The module's parts are looked up when ``run`` is called."""

    def run(
        out: Path,
        *,
        quick: bool = False,
        seed: int = 0,
        progress: bool = True,
        settings: Any = None,
        slides: bool = False,
    ) -> DemoResult:
        m = sys.modules[module]
        s = settings if settings is not None else (m.QUICK if quick else m.FULL)
        with exact_matmuls():  # full float32 on a GPU too, as the engine
            r = m.compute(s, seed, progress=progress) if compute_progress else m.compute(s, seed)
        png = save_png(m.draw(r, s), out / picture, slide=m.SLIDE_TITLE if slides else None)
        more = more_files(r, s, out, progress) if more_files is not None else ()
        return DemoResult(m.NAME, (png, *more), *m.report(r, s), arrays=r)

    run.__doc__ = (
        f"Compute, draw ``{picture}`` into ``out``, report. "
        "``settings`` replaces QUICK/FULL; ``slides``: a 16:9 picture."
    )
    return run
