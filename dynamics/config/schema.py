"""The config layer's names in one place, for code that imports them from here.

A config is resolved in layers: the built-in defaults, then a preset, then a TOML file, then
command-line flags (or keywords). Each job has its module:

- ``dynamics.config.sections``: the sections' dataclasses, ``Config`` and its hash (``digest``);
- ``dynamics.parts.knobs``: how a field is declared as a knob (flag, help, grid type, unit);
- ``dynamics.config.overrides``: ``apply_overrides`` and the parsers of values given as text;
- ``dynamics.config.presets``: the named presets;
- ``dynamics.config.tomlfile``: config files;
- ``dynamics.config.validation``: ``validate``, ``resolve`` (an ``Experiment``) and ``log_schedule``.
"""

from __future__ import annotations

from dynamics.config.overrides import apply_overrides, config_from_dict  # noqa: F401
from dynamics.config.presets import (  # noqa: F401
    ICL_STEPS,
    OWN_RUNNERS,
    PAPER_HEADS,
    PAPER_SIZES,
    PRESETS,
    preset,
    unknown_preset,
)
from dynamics.config.sections import (  # noqa: F401
    DIAGNOSTICS,
    HEAD_METRICS,
    NUMERICS_VERSION,
    SECTIONS,
    Config,
    DataConfig,
    ModelConfig,
    OptimConfig,
    SweepConfig,
    declared,
    digest,
    part_fields,
    user_sources,
)
from dynamics.config.tomlfile import MAX_TOML_BYTES, load_toml, read_toml  # noqa: F401
from dynamics.config.validation import (  # noqa: F401
    Experiment,
    IdenticalTrialsWarning,
    identical_trials,
    log_schedule,
    no_effect,
    resolve,
    user_set,
    validate,
)
from dynamics.errors import ConfigError  # noqa: F401
from dynamics.parts.values import parse_diagnostics, parse_heads, parse_steps  # noqa: F401
