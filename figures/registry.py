"""The figures that ``python -m figures`` knows, and the results cache behind them.

``FIGURES`` maps a figure's name to an :class:`Entry`. An entry knows how to *produce*
its results into a folder and how to *plot* from that folder; ``python -m figures``
does the rest: for each name it reuses ``<out>/<name>/`` when the ``config_hash`` in its
``results.json`` equals ``entry.key()``, produces the results there otherwise (or with
``--force``), then plots ``<out>/<name>.png`` and ``.pdf`` from the saved files only.

The entry interface (all four fields are required):

- ``description: str`` — one line, shown by ``python -m figures --list``.
- ``key() -> str`` — a hash of everything the results depend on (for a sweep,
  ``Config.hash()`` of the validated config). Cheap: no simulation.
- ``produce(results_dir: Path, progress: bool) -> None`` — compute the results and write
  them into ``results_dir``, atomically, with ``results.json`` written last and holding
  ``"config_hash": key()`` (``dynamics.sweeps.result_files.write_results`` does exactly this for a sweep).
  Any other files (``curves.npz``, ...) are the entry's own business.
- ``plot(results_dir: Path, stem: Path) -> list[Path]`` — read the saved files only (never
  run the simulator), write ``stem.png`` and ``stem.pdf``, return the written paths.

Registering a figure is one line at the bottom of this module. A preset sweep is
``sweep_entry("fig2")``; any ``Config`` with its own plot is ``sweep_entry(cfg, "…",
plot=plot_mine)``. An experiment that is not a plain sweep (e.g. the low-rank bottleneck of
docs/bottleneck.md) brings its own three functions, its plot in its own module under ``figures/``
(``figures.sweep.save_figure(fig, stem)`` writes the PNG and PDF atomically), as below::

    FIGURES[bottleneck.HEADS] = Entry(
        PRESETS[bottleneck.HEADS][0], bottleneck.heads_key, bottleneck.produce_heads, plot_bottleneck_heads
    )

Before ``produce`` runs, a stale ``results.json`` (another hash) is removed, so an
interrupted run never leaves new files next to an old ``results.json``: the folder reads
as "no results" and the next call produces them again.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dynamics.config.schema import PRESETS, Config, preset, resolve
from dynamics.experiments import bottleneck, icl, positional_extras, positional_semantic, sparse_token
from dynamics.sweeps.result_files import complete_results_hash, write_results
from dynamics.sweeps.sweep import run_sweep


def lazy_plot(module: str, name: str) -> Callable[[Path, Path], list[Path]]:
    """``plot(results_dir, stem)`` that calls ``module.name(results_dir, stem)``, importing
    ``module`` (and so matplotlib) when it is called, not when the registry is imported."""

    def plot(results_dir: Path, stem: Path) -> list[Path]:
        return getattr(importlib.import_module(module), name)(results_dir, stem)

    plot.__name__ = plot.__qualname__ = name
    return plot


plot_sweep = lazy_plot("figures.sweep", "plot_sweep")
plot_diagnostics = lazy_plot("figures.theory", "plot_diagnostics")
plot_expressivity = lazy_plot("figures.bottleneck", "plot_expressivity")
plot_bottleneck_heads = lazy_plot("figures.bottleneck", "plot_bottleneck_heads")
plot_single_location = lazy_plot("figures.single_location", "plot_single_location")
plot_single_location_grid = lazy_plot("figures.single_location", "plot_grid")
_plot_icl = lazy_plot("figures.icl", "plot_icl")


@dataclass(frozen=True)
class Entry:
    """One figure: how to produce its results into a folder and how to plot from that folder."""

    description: str  # one line for --list
    key: Callable[[], str]  # hash of everything the results depend on; keys the cache
    produce: Callable[[Path, bool], None]  # (results_dir, progress): write results, results.json last
    plot: Callable[[Path, Path], list[Path]]  # (results_dir, stem) -> [stem.png, stem.pdf]


def sweep_entry(
    config: str | Config,
    description: str | None = None,
    plot: Callable[[Path, Path], list[Path]] = plot_sweep,
) -> Entry:
    """An entry that runs ``run_sweep`` on a preset (by name) or a Config and plots it with ``plot``."""
    if not isinstance(config, str | Config):
        raise TypeError(f"config={config!r:.60} must be a preset's name or a Config")
    if not callable(plot):
        raise TypeError(f"plot={plot!r:.60} must be callable as plot(results_dir, stem)")
    if isinstance(config, str):
        from dynamics.sweeps.arguments import as_config

        as_config(config, "sweep_entry")  # a bottleneck preset is not a sweep
        if description is None:
            description = PRESETS[config][0] if config in PRESETS else config
        config = preset(config)
    exp = resolve(config)
    cfg = exp.config

    def produce(results_dir: Path, progress: bool) -> None:
        # Looked up at call time, so tests (and callers) can substitute run_sweep.
        result = run_sweep(exp, progress=progress)
        write_results(result, results_dir)

    return Entry(
        description=description or cfg.name,
        key=cfg.hash,
        produce=produce,
        plot=plot,
    )


def plot_grid(results_dir: Path, stem: Path, **options) -> list[Path]:
    """The grid's figures; ``options``: ``axes`` and ``at`` of ``figures.phase.plot_grid``."""
    from figures.phase import plot_grid

    return plot_grid(results_dir, stem, **options)


def grid_entry(name: str) -> Entry:
    """An entry that runs a grid preset (``dynamics.config.grid_axes.GRID_PRESETS``) and draws its
    phase diagram."""
    from dynamics.config.grid_axes import GRID_PRESETS, grid_preset, resolve_grid

    grid = resolve_grid(*grid_preset(name))

    def produce(results_dir: Path, progress: bool) -> None:
        # JAX: only when the grid runs
        from dynamics.sweeps.grid_runner import run_grid_experiment, write_grid

        result = run_grid_experiment(grid, progress=progress)
        result.extra.update(complete=True)
        write_grid(result, results_dir)

    return Entry(description=GRID_PRESETS[name][0], key=grid.hash, produce=produce, plot=plot_grid)


def specialisation_entries() -> dict[str, Entry]:
    """The head-specialisation figure (erf, softmax, softmax1 runs of the preset) and its grid."""
    from dynamics.experiments import specialisation as spec

    plot = lazy_plot("figures.specialisation", "plot_specialisation")
    plot_grid_heads = lazy_plot("figures.specialisation", "plot_specialisation_grid")
    figure = Entry(PRESETS[spec.NAME][0] + " (erf, softmax, softmax1)", spec.key, spec.produce, plot)
    return {spec.NAME: figure, spec.GRID: dataclasses.replace(grid_entry(spec.GRID), plot=plot_grid_heads)}


def sparse_token_entry(name: str) -> Entry:
    """A sparse-token grid preset (``dynamics.experiments.sparse_token``): the grid with the signed
    cosines with ξ, drawn against α₀ = n/d."""
    from dynamics.config.grid_axes import GRID_PRESETS

    plot = lazy_plot("figures.sparse_token", "plot_sparse_token")

    def produce(results_dir: Path, progress: bool) -> None:
        sparse_token.produce(name, results_dir, progress)

    return Entry(GRID_PRESETS[name][0], lambda: sparse_token.key(name), produce, plot)


PRESET_FIGURES = ("fig2", "fig3-gd", "fig3-adam", "planted-gd", "planted-adam")

FIGURES: dict[str, Entry] = {name: sweep_entry(name) for name in PRESET_FIGURES}
for _name in ("theory-dm1", "theory-dm1-constant"):  # the diagnostics figure
    FIGURES[_name] = sweep_entry(_name, plot=plot_diagnostics)
FIGURES[bottleneck.EXPRESSIVITY] = Entry(
    PRESETS[bottleneck.EXPRESSIVITY][0],
    bottleneck.expressivity_key,
    bottleneck.produce_expressivity,
    plot_expressivity,
)
FIGURES[bottleneck.HEADS] = Entry(
    PRESETS[bottleneck.HEADS][0], bottleneck.heads_key, bottleneck.produce_heads, plot_bottleneck_heads
)
FIGURES[icl.PRESET] = Entry(PRESETS[icl.PRESET][0], icl.key, icl.produce, _plot_icl)
GRID_FIGURES = ("phase-gd", "phase-adam", "heads-vs-samples")
FIGURES.update({name: grid_entry(name) for name in GRID_FIGURES})
FIGURES.update(specialisation_entries())
FIGURES.update({name: sparse_token_entry(name) for name in sparse_token.NAMES})
FIGURES["single-location"] = sweep_entry("single-location", plot=plot_single_location)
FIGURES["max-margin"] = sweep_entry("max-margin", plot=lazy_plot("figures.max_margin", "plot_max_margin"))
FIGURES["max-margin-prompt"] = sweep_entry(
    "max-margin-prompt", plot=lazy_plot("figures.max_margin", "plot_max_margin")
)
FIGURES["single-location-grid"] = dataclasses.replace(
    grid_entry("single-location-grid"), plot=plot_single_location_grid
)
FIGURES["icl-heads"] = sweep_entry("icl-heads", plot=lazy_plot("figures.icl_heads", "plot_icl_heads"))
plot_emergence = lazy_plot("figures.emergence", "plot_emergence")
FIGURES["emergence"] = sweep_entry("emergence", plot=plot_emergence)
FIGURES[positional_semantic.NAME] = Entry(
    "grid: positional vs semantic attention (Cui et al. 2024), d = 100: both starts' test error, "
    "m, θ and objectives against α, the crossing marked",
    positional_semantic.key,
    positional_semantic.produce,
    lazy_plot("figures.positional_semantic", "plot_positional_semantic"),
)
for _grid, _plot in ((positional_extras.PHASE, "plot_phase"), (positional_extras.RANDOM, "plot_random")):
    FIGURES[_grid] = Entry(
        grid_entry(_grid).description,
        positional_extras.key(_grid),
        positional_extras.producer(_grid),
        lazy_plot("figures.positional_beyond", _plot),
    )
for _name in ("emergence-T", "emergence-d", "emergence-B", "emergence-B-tied", "emergence-p"):
    for _grid in (_name, f"{_name}-adam"):
        FIGURES[_grid] = dataclasses.replace(grid_entry(_grid), plot=plot_emergence)


def damaged_npz(results_dir: Path) -> Path | None:
    """The first .npz beside results.json that cannot be read whole (or the missing one), else None."""
    import zipfile

    import numpy as np

    paths = sorted(Path(results_dir).glob("*.npz"))
    if not paths:
        return Path(results_dir) / "curves.npz"
    for path in paths:
        try:
            with np.load(path, allow_pickle=False) as z:
                for name in z.files:
                    z[name]
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, RuntimeError):
            return path
    return None


def ensure_results(entry: Entry, results_dir: Path, *, force: bool = False, progress: bool = True) -> str:
    """Produce ``entry``'s results into ``results_dir`` unless results with its key are there.

    Returns what happened: ``"reused"``, ``"produced"`` (none were there), ``"replaced"``
    (results for a different config were there) or ``"forced"``.
    """
    if not isinstance(entry, Entry):
        raise TypeError(f"entry={entry!r:.80} must be a figures.Entry (FIGURES[name], sweep_entry(...))")
    for name, flag in (("force", force), ("progress", progress)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}={flag!r} must be True or False")
    if isinstance(results_dir, bool) or not isinstance(results_dir, str | os.PathLike):
        raise TypeError(f"results_dir={results_dir!r:.80} must be a path (str or pathlib.Path)")
    if not str(results_dir).strip():
        raise ValueError("results_dir='' is empty: give the folder for this figure's results")
    results_dir = Path(results_dir)
    if results_dir.exists() and not results_dir.is_dir():
        raise ValueError(f"results_dir={str(results_dir)!r} is a file, not a folder")
    found = complete_results_hash(results_dir)
    key = entry.key()
    damaged = damaged_npz(results_dir) if found == key else None
    if damaged is not None:
        warnings.warn(f"{damaged} is missing or damaged: recomputing {results_dir}", stacklevel=2)
    if found == key and not force and damaged is None:
        return "reused"
    (results_dir / "results.json").unlink(missing_ok=True)  # the marker of complete results goes first
    # and with it what only described those results: a grid's summary.csv would stay beside a
    # sweep's new results (and be read as theirs); a grid rewrites its own.
    (results_dir / "summary.csv").unlink(missing_ok=True)
    entry.produce(results_dir, progress)
    if complete_results_hash(results_dir) != key:
        raise RuntimeError(
            f"the entry's produce() wrote no results.json with config_hash={key!r} into {results_dir}"
        )
    if force:
        return "forced"
    return "produced" if found is None else "replaced"
