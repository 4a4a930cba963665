"""Overrides of a config's fields by ``{section: {field: value}}`` (flags, TOML tables, keywords,
presets, a results file's ``config``) and the parsers of the values given as text."""

from __future__ import annotations

import dataclasses
from typing import Any

from dynamics import parts
from dynamics.config.identity import resolved_baselines
from dynamics.config.sections import SECTIONS, Config, _fields, declared
from dynamics.errors import ConfigError
from dynamics.parts.knobs import as_float
from dynamics.parts.value_checks import suggest as _suggest


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
        if key == "data":  # "mixture.r" or a table [data.mixture]: the model's own parameter r
            value = _unqualified(cfg, value, source)
        allowed = _fields(key)
        for fname in value:
            if fname not in allowed:
                raise ConfigError(
                    f"{source}: unknown field {key}.{fname}{_suggest(fname, allowed)}; "
                    f"allowed: {', '.join(allowed)}"
                )
        values = dict(value)
        if key == "data" and "params" in values:  # [data.params]: merged into those set before
            values["params"] = _data_params(cfg, values, source)
        given.update(f"{key}.{name}" for name in (values.get("params") or {}) if key == "data")
        given.update(f"{key}.{name}" for name in values if name != "params")
        values = {name: _coerced(key, name, v, explicit) for name, v in values.items()}
        sections[key] = dataclasses.replace(getattr(cfg, key), **values)
    if explicit:
        return dataclasses.replace(cfg, **sections, given=frozenset(given))
    return dataclasses.replace(cfg, **sections, sourced=True)


def config_from_dict(doc: dict[str, Any]) -> Config:
    """The Config that ``Config.to_dict`` (a results.json's ``config``) describes; its values are
    the file's, not a user's (``explicit=False``)."""
    doc = dict(doc)
    doc.pop("sources", None)  # where a user part's code was: recorded, not a setting
    name = doc.pop("name", "default")
    for section, cls in SECTIONS.items():  # written resolved: a field resolution fills (default None,
        table = doc.get(section)  # declared baseline) left out was at its baseline (optim.task, sweep.x64)
        if isinstance(table, dict):
            doc[section] = {**resolved_baselines(cls), **table}
    return apply_overrides(Config(name=name), doc, "results.json config", explicit=False)


def _data_params(cfg: Config, values: dict[str, Any], source: str) -> dict[str, Any]:
    """``[data.params]`` merged into the parameters set before; a parameter also named directly
    in ``[data]`` with another value is refused (which one would run?)."""
    table = values["params"]
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [data.params] must be a table of fields, got {table!r}")
    for name, value in table.items():
        if name in values and values[name] != value:
            raise ConfigError(
                f"{source}: data.{name} is given twice, {values[name]!r} in [data] and {value!r} in "
                f"[data.params]: give it once"
            )
    return {**dict(cfg.data.params), **{k: _coerced("data", k, v) for k, v in table.items()}}


def _coerced(section: str, name: str, value: Any, explicit: bool = True) -> Any:
    """``value`` through its knob's ``coerce`` (a wrong type refused, a text form read). A results
    file's (not ``explicit``) int for a real stays as written: its recorded config_hash is of it."""
    if name == "params":
        return value
    spec = _coercers().get(f"{section}.{name}")
    if spec is as_float and not explicit:
        return value
    return value if spec is None else spec(f"{section}.{name}", value)


def _coercers() -> dict[str, Any]:
    return {k.key: k.spec.coerce for k in declared() if k.spec.coerce is not None}


def _unqualified(cfg: Config, table: dict[str, Any], source: str) -> dict[str, Any]:
    """``table`` with a data model's parameters named by their model — ``"sparse-token.signal": 6``
    or a table ``[data.sparse-token]`` (``{"sparse-token": {"signal": 6}}``; '_' may stand for
    '-') — as the plain names; refused when the model is not the config's data model, has no
    such parameter, or the same parameter is given another value plainly."""
    model = table.get("model", cfg.data.model)
    out = {k: v for k, v in table.items() if _owner(k.partition(".")[0]) is None or not _qualified(k, v)}
    for name, v in table.items():
        if name in out:
            continue
        owner_text, _, param = name.partition(".")
        owner = _owner(owner_text)
        if owner != model:
            raise ConfigError(
                f"{source}: data.{name} is a parameter of data model {owner!r}; data.model is {model!r}"
            )
        for p, pv in ({param: v} if param else v).items():
            if p not in parts.DATA_MODELS[owner].parameters:
                own = ", ".join(parts.DATA_MODELS[owner].parameters) or "none"
                raise ConfigError(
                    f"{source}: data model {owner!r} has no parameter {p!r}; its parameters: {own}"
                )
            if p in out and out[p] != pv:
                raise ConfigError(f"{source}: data.{p} is given twice, {out[p]!r} and {pv!r}: give it once")
            out[p] = pv
    return out


def _owner(text: str) -> str | None:
    """The data model ``text`` names ('_' for '-' allowed), else None."""
    for name in (text, text.replace("_", "-")):
        if name in parts.DATA_MODELS.names:
            return name
    return None


def _qualified(key: str, value: Any) -> bool:
    return "." in key or isinstance(value, dict)
