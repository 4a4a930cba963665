"""mhsim's dynamics: the multi-head attention model, losses, optimisers and the training engine.

The names below are imported on first use (PEP 562), so that ``python -m dynamics.run
--help`` and the config layer do not import JAX.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if sys.argv[:1] == ["-m"]:  # Python is starting `python -m dynamics…`: Ctrl-C exits 130 from here on
    from dynamics.infra import interrupts

    interrupts.early()

_EXPORTS = {
    "dynamics.api": ("load_results", "load_runs", "run_grid", "run_sweep", "save_results", "with_overrides"),
    "dynamics.experiments.bottleneck": ("ExpressivityConfig", "HeadsConfig", "run_expressivity", "run_heads"),
    "dynamics.sweeps.sweep_result": ("SweepResult",),
    "dynamics.config.schema": (
        "PRESETS",
        "Config",
        "ConfigError",
        "DataConfig",
        "ModelConfig",
        "OptimConfig",
        "SweepConfig",
        "preset",
    ),
    "dynamics.core.data": ("Data",),
    "dynamics.sweeps.trials": ("TrialData", "trial_data"),
    "dynamics.core.engine": ("METRICS",),
    "dynamics.core.losses": ("Loss", "error_rate", "margin_loss", "mean_loss"),
    "dynamics.core.model": (
        "Init",
        "KeyQuery",
        "Norm",
        "Query",
        "attention",
        "attention_scores",
        "head_norm",
        "head_outputs",
        "key_query_matrix",
        "logits",
    ),
    "dynamics.core.inits": ("init_params", "param_count"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = list(_MODULE_OF)


def __getattr__(name: str):
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'dynamics' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from dynamics.api import load_results, load_runs, run_grid, run_sweep, save_results, with_overrides  # noqa: F401
    from dynamics.config.schema import (  # noqa: F401
        PRESETS,
        Config,
        ConfigError,
        DataConfig,
        ModelConfig,
        OptimConfig,
        SweepConfig,
        preset,
    )
    from dynamics.core.data import Data  # noqa: F401
    from dynamics.core.engine import METRICS  # noqa: F401
    from dynamics.core.inits import init_params, param_count  # noqa: F401
    from dynamics.core.losses import Loss, error_rate, margin_loss, mean_loss  # noqa: F401
    from dynamics.core.model import (  # noqa: F401
        Init,
        KeyQuery,
        Norm,
        Query,
        attention,
        attention_scores,
        head_norm,
        head_outputs,
        key_query_matrix,
        logits,
    )
    from dynamics.experiments.bottleneck import ExpressivityConfig, HeadsConfig, run_expressivity, run_heads  # noqa: F401
    from dynamics.sweeps.sweep_result import SweepResult  # noqa: F401
    from dynamics.sweeps.trials import TrialData, trial_data  # noqa: F401
