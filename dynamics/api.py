"""The notebook API: ``run_sweep(preset("fig2"), heads=[1, 2, 4], steps=500)``, ``load_results(folder)``.

Keyword overrides use the command line's names (``--lr-scaling`` is ``lr_scaling``, ``--width``
is ``width``; ``KNOBS`` of ``dynamics.run``), so what works as a flag works as a keyword. Both
functions return a ``dynamics.sweeps.sweep.SweepResult`` (``.to_dataframe()``, ``.summary_frame()``,
``figures.sweep_figure(result)``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dynamics.config.schema import Config, ConfigError, apply_overrides, preset

ENGINE_KEYWORDS = ("progress", "on_point", "skip_heads", "devices", "packs_per_call", "chunk", "slots")


def _knobs() -> dict[str, tuple[str, str, Any]]:
    from dynamics.cli.run import KNOBS  # argparse only: no JAX

    return {flag[2:].replace("-", "_"): (section, name, typ) for flag, section, name, typ, *_ in KNOBS}


def with_overrides(cfg: Config | str | None = None, **overrides: Any) -> Config:
    """``cfg`` (a Config, a preset's name, or None for the defaults) with fields replaced by the
    command line's names: ``with_overrides("fig2", heads=[1, 4], lr=0.5, data_model="planted")``."""
    if cfg is None:
        cfg = Config()
    elif isinstance(cfg, str):
        cfg = preset(cfg)
    knobs = _knobs()
    sections: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        if key not in knobs:
            import difflib

            close = difflib.get_close_matches(key, list(knobs), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown override {key}={value!r}{hint}; allowed: {', '.join(knobs)}")
        section, name, typ = knobs[key]
        if isinstance(value, str) and typ is not str:
            try:
                value = typ(value)  # "1,2,4" as on the command line
            except (argparse.ArgumentTypeError, ValueError, TypeError) as err:  # the flag's own message
                raise ConfigError(f"{key}={value!r}: {err}") from None
        sections.setdefault(section, {})[name] = value
    return apply_overrides(cfg, sections, "keyword arguments")


def run_sweep(cfg: Config | str | None = None, **kwargs: Any):
    """Run the sweep of ``cfg`` with keyword overrides (``with_overrides``); the engine's own
    keywords (``progress``, ``on_point``, ``devices``, …) pass through to
    ``dynamics.sweeps.sweep.run_sweep``."""
    from dynamics.sweeps.sweep import run_sweep as _run_sweep

    engine = {k: kwargs.pop(k) for k in ENGINE_KEYWORDS if k in kwargs}
    return _run_sweep(with_overrides(cfg, **kwargs), **engine)


def config_from_dict(doc: dict[str, Any]) -> Config:
    """The Config that ``Config.to_dict`` (a results.json's ``config``) describes."""
    doc = dict(doc)
    name = doc.pop("name", "default")
    return apply_overrides(Config(name=name), doc, "results.json config")


def load_results(folder: str | Path):
    """The ``SweepResult`` of a run folder (``results.json`` and ``curves.npz``), equal to the one
    ``run_sweep`` returned when it was written."""
    import numpy as np

    from dynamics.core.engine import METRICS
    from dynamics.sweeps.results import load_results as load_files
    from dynamics.sweeps.sweep import SweepResult

    meta, arrays = load_files(Path(folder))
    return SweepResult(
        config=config_from_dict(meta["config"]),
        heads=np.asarray(arrays["heads"]),
        steps=np.asarray(arrays["steps"]),
        curves={k: arrays[k] for k in METRICS if k in arrays},
        diverged_at=np.asarray(arrays["diverged_at"]),
        wall_time_s=float(meta.get("wall_time_s", 0.0)),
    )
