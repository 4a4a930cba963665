"""Overrides of a config's fields by ``{section: {field: value}}`` (flags, TOML tables, keywords,
presets, a results file's ``config``) and the parsers of the values given as text."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dynamics.config.sections import _NEW_FIELDS, DIAGNOSTICS, SECTIONS, Config, _fields
from dynamics.errors import ConfigError
from dynamics.parts.checks import suggest as _suggest


def apply_overrides(cfg: Config, overrides: dict[str, Any], source: str, *, explicit: bool = True) -> Config:
    """Apply ``{section: {field: value}}`` (and top-level ``name``); unknown keys are errors.
    ``explicit``: a user's own setting (flags, TOML, keywords), remembered in ``Config.given`` so
    that one without effect is refused; False for presets and results files."""
    sections = {}
    given = set(cfg.given)
    for key, value in overrides.items():
        if key == "name":
            cfg = dataclasses.replace(cfg, name=str(value))
            continue
        if key not in SECTIONS:
            allowed = ["name", *SECTIONS]
            raise ConfigError(
                f"{source}: unknown section {key!r}{_suggest(key, allowed)}; allowed: {', '.join(allowed)}"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: [{key}] must be a table of fields, got {value!r}")
        allowed = _fields(key)
        for fname in value:
            if fname not in allowed:
                raise ConfigError(
                    f"{source}: unknown field {key}.{fname}{_suggest(fname, allowed)}; "
                    f"allowed: {', '.join(allowed)}"
                )
        values = dict(value)
        if key == "data" and "params" in values:  # [data.params]: merged into those set before
            if not isinstance(values["params"], dict):
                raise ConfigError(
                    f"{source}: [data.params] must be a table of fields, got {values['params']!r}"
                )
            values["params"] = {**dict(cfg.data.params), **values["params"]}
        given.update(f"{key}.{name}" for name in (values.get("params") or {}) if key == "data")
        given.update(f"{key}.{name}" for name in values if name != "params")
        if "heads" in values:
            values["heads"] = parse_heads(values["heads"])
        if "diagnostics" in values:
            values["diagnostics"] = parse_diagnostics(values["diagnostics"])
        for name in ("readout_steps", "attention_steps"):
            if key == "optim" and name in values:
                values[name] = parse_steps(values[name], f"optim.{name}")
        sections[key] = dataclasses.replace(getattr(cfg, key), **values)
    return dataclasses.replace(cfg, **sections, given=frozenset(given) if explicit else cfg.given)


def config_from_dict(doc: dict[str, Any]) -> Config:
    """The Config that ``Config.to_dict`` (a results.json's ``config``) describes; its values are
    the file's, not a user's (``explicit=False``)."""
    doc = dict(doc)
    doc.pop("sources", None)  # where a user part's code was: recorded, not a setting
    name = doc.pop("name", "default")
    optim = doc.get("optim")
    if isinstance(optim, dict) and "task" not in optim:  # written resolved: left out, it was the default
        doc["optim"] = {**optim, "task": _NEW_FIELDS["optim"]["task"]}
    return apply_overrides(Config(name=name), doc, "results.json config", explicit=False)


def parse_heads(value) -> tuple[int, ...]:
    """'1,2,4' or [1, 2, 4] -> (1, 2, 4); validated later."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        try:
            return tuple(int(p) for p in parts)
        except ValueError:
            raise ConfigError(
                f"heads={value!r} must be a comma-separated list of positive integers"
            ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, Mapping | set | frozenset | bytes):  # their order or items are not a list of H
        raise ConfigError(f"heads={value!r} must be a list of positive integers")
    try:
        return tuple(value)
    except TypeError:
        raise ConfigError(f"heads={value!r} must be a list of positive integers") from None


def parse_steps(value, name: str = "optim.readout_steps") -> tuple[int, int | None] | None:
    """A group's updates [start, stop): 'START:STOP' (either may be left out), [start, stop],
    [start] or None/'all' -> (start, stop) with stop None for 'to the end'; None for all updates.
    Types are checked here, values by ``validate``."""
    if value is None or (isinstance(value, str) and value.strip() in ("all", ":")):
        return None
    if isinstance(value, str) and value.count(":") == 1:
        ends = [p.strip() for p in value.split(":")]
        try:
            start, stop = (int(ends[0]) if ends[0] else 0), (int(ends[1]) if ends[1] else None)
        except ValueError:
            start = stop = "bad"
    elif isinstance(value, list | tuple) and len(value) in (1, 2):
        start, stop = value[0], value[1] if len(value) == 2 else None
    else:
        start = stop = "bad"
    ok = isinstance(start, int) and not isinstance(start, bool)
    ok = ok and (stop is None or (isinstance(stop, int) and not isinstance(stop, bool)))
    if not ok:
        raise ConfigError(
            f"{name}={value!r} must be START:STOP, the 0-based updates start <= t < stop in which the "
            f"group moves (e.g. 0:100; '100:' from update 100 on), or 'all'"
        )
    return None if (start, stop) == (0, None) else (start, stop)


def parse_diagnostics(value) -> tuple[str, ...]:
    """'sharpness,kernel', 'all', 'none' or a list of names -> a tuple of names; validated later."""
    if isinstance(value, str):
        value = [p.strip() for p in value.split(",") if p.strip()]
        if value == ["all"]:
            return DIAGNOSTICS
        if value == ["none"]:
            return ()
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"diagnostics={value!r} must be a comma-separated list of {', '.join(DIAGNOSTICS)}")
