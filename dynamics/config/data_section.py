"""The data section of a config: which data model, its sizes (n, T, d) and the model's own
parameters (``DataConfig``), and the parameters every results file lists whatever the model
(``first_data_parameters``). The other sections and ``Config`` are in ``dynamics.config.sections``.
No JAX."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynamics import parts
from dynamics.config import idle
from dynamics.config.identity import declared_fields, hashed, kept
from dynamics.errors import ConfigError
from dynamics.parts.knobs import knob, knob_of
from dynamics.parts.value_checks import suggest as _suggest

# The data models whose parameters the first results files listed for every model (None where
# not its own): their data section keeps listing them, so every old run's hash is unchanged.
FIRST_DATA_MODELS = ("dm1", "planted")
_N = "[1, 10000000]"  # examples per trial (the upper bounds catch a typo: an extra zero or three)


@dataclass(frozen=True, init=False)
class DataConfig:
    """The data: which data model, its sizes, and its own parameters (``params``).

    The data model's parameters are its own section, declared by its part's ``schema``
    (``dynamics.parts.DATA_MODELS``): ``DataConfig(model="planted", params={"teacher_heads": 2})``.
    For brevity they may also be named directly — ``DataConfig(model="mixture", zeta=0.3)``,
    ``data.zeta``, ``--zeta``, ``zeta = 0.3`` in a TOML file's ``[data]`` (or ``[data.params]``) —
    and a parameter not set takes the model's default (``resolved``). A parameter named directly
    replaces the same one in ``params``: ``dataclasses.replace(data, zeta=0.5)`` (as a grid sets
    a point's value) changes it.
    """

    model: str = knob(
        "dm1",
        "the data model, a name or your own package.module:name (setup and sample)",
        flag="--data-model",
        choices=parts.DATA_MODELS,
        grid=str,
        hashed="always",
    )
    path: str | None = knob(
        None,
        "an .npz file of X_train, y_train, X_test, y_test (model npz; the flag --data)",
        flag="",
        hashed="always",
    )
    n_train: int = knob(
        100, "training examples per trial", grid=int, unit="n", idle=idle.n_train, hashed="always", within=_N
    )
    n_test: int = knob(
        300,
        "test examples per trial (more: a less noisy test loss)",
        grid=int,
        idle=idle.from_file,
        hashed="always",
        within=_N,
    )
    T: int | None = knob(
        None,
        "tokens per example T (default: the data model's)",
        flag="--tokens",
        grid=int,
        unit="T",
        idle=idle.from_file,
        hashed="always",
        within="[1, 4096]",
    )
    d: int | None = knob(
        None,
        "token width d (default: the data model's)",
        flag="--width",
        grid=int,
        unit="d",
        idle=idle.from_file,
        hashed="always",
        within="[1, 4096]",
    )
    params: tuple[tuple[str, Any], ...] = ()  # the model's own parameters set, (name, value) sorted

    def __init__(self, params: Any = (), **named: Any):
        """The declared fields by keyword (each at its declared default when left out), ``params``,
        and the data model's own parameters by name."""
        fields = {f.name: named.pop(f.name, f.default) for f in declared_fields(DataConfig)}
        known = parts.data.parameter_names()
        unknown = [k for k in named if k not in known]
        if unknown:
            allowed = ", ".join([*_data_field_names(), "params", *known])
            raise ConfigError(
                f"unknown field data.{unknown[0]}{_suggest(unknown[0], [*_data_field_names(), *known])}; "
                f"allowed: {allowed}"
            )
        try:
            merged = dict(params.items() if isinstance(params, Mapping) else params)
        except (TypeError, ValueError):
            raise ConfigError(f"data.params={params!r} must be a table of parameter values") from None
        merged.update(named)
        merged = {k: tuple(v) if isinstance(v, list) else v for k, v in merged.items()}  # TOML lists
        if isinstance(fields["path"], os.PathLike):
            fields["path"] = os.fspath(fields["path"])  # a pathlib.Path is its string (the hash sees that)
        values = dict(fields)
        values["params"] = tuple(sorted((str(k), v) for k, v in merged.items() if v is not None))
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        """A data model's parameter by name (None when it is not set)."""
        if name in parts.data.parameter_names():
            return dict(self.__dict__.get("params", ())).get(name)
        raise AttributeError(f"'DataConfig' object has no attribute {name!r}")

    def resolved(self) -> DataConfig:
        """Fill T, d and every parameter of the data model not set with its default (npz: none)."""
        model = parts.DATA_MODELS[self.model] if self.model in parts.DATA_MODELS else None
        if model is None:
            return self
        defaults = model.defaults_for(self)  # a user's model without sizes: one traced sample's
        T = defaults.get("T") if self.T is None else self.T
        d = defaults.get("d") if self.d is None else self.d
        own = {k: v for k, v in defaults.items() if k not in ("T", "d")}
        return dataclasses.replace(self, T=T, d=d, params={**own, **dict(self.params)})

    def to_dict(self) -> dict[str, Any]:
        """The section as results.json writes it (and the config hash reads it): flat, the first
        data models' parameters listed whatever the model (None where unset), then the model's own
        others, each left out at its default unless declared ``hashed="always"`` (``hashed``)."""
        doc = hashed(self, {f.name: getattr(self, f.name) for f in declared_fields(DataConfig)})
        own = dict(self.params)
        doc.update({k: own.pop(k, None) for k in first_data_parameters()})
        schema = parts.DATA_MODELS[self.model].schema if self.model in parts.DATA_MODELS else None
        fields = {f.name: f for f in dataclasses.fields(schema)} if schema else {}
        doc.update({k: v for k, v in own.items() if k not in fields or kept(fields[k], v)})
        return doc


def _data_field_names() -> list[str]:  # noqa: N802
    return [f.name for f in declared_fields(DataConfig)]


def first_data_parameters() -> tuple[str, ...]:
    """The parameters of ``FIRST_DATA_MODELS`` declared ``hashed="always"`` (those of the first
    results files), in their order: one added to these models later follows the rule."""
    names = []
    for model in FIRST_DATA_MODELS:
        schema = parts.DATA_MODELS[model].schema
        names += [
            f.name for f in dataclasses.fields(schema) if getattr(knob_of(f), "hashed", None) == "always"
        ]
    return tuple(dict.fromkeys(names))
