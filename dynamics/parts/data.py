"""The data models: each a part with its own parameters (their defaults), their check, whether
it knows the relevant tokens, and its per-trial draw (``impl``: ``draw(cfg, key) -> Data``, in
``dynamics.core.data``). Metadata and checks import no JAX.

A new data model is one module (its generator, its parameters' defaults and check, its draw) and
one line in ``DATA_MODELS``.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any

from datamodels.defaults import DM1_DEFAULTS, GEOMETRIES
from dynamics.errors import ConfigError
from dynamics.parts.checks import choice, finite, positive_int
from dynamics.parts.registry import Part, Registry

_DATA = "dynamics.core.data"


@dataclasses.dataclass(frozen=True)
class DataModel(Part):
    """``defaults``: its parameters (T and d included) and their defaults; ``check``: validates the
    resolved parameters (a ``DataConfig``) with one-line errors; ``relevant_tokens``: the test set's
    relevant-token mask is known (attention metrics, the max-margin diagnostic); ``from_file``:
    the data come from ``data.path`` (the file fixes n, T and d)."""

    defaults: Mapping[str, Any] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))
    check: Callable[[Any], None] | None = None
    relevant_tokens: bool = False
    from_file: bool = False


def check_mixture(data) -> None:
    finite("data.zeta", data.zeta, lo=0.0, hi=1.0)
    if data.r is not None:
        positive_int("data.r", data.r)
        if data.r > data.T:
            raise ConfigError(f"data.r={data.r} must be <= data.T={data.T}")
    finite("data.signal", data.signal, lo=0.0)
    finite("data.noise", data.noise, lo=0.0)
    positive_int("data.n_irrelevant", data.n_irrelevant, minimum=0)
    choice("data.geometry", data.geometry, GEOMETRIES)
    if data.d < data.n_irrelevant + 2:
        raise ConfigError(
            f"data.d={data.d} is too small for data.n_irrelevant={data.n_irrelevant}: "
            f"the mixture needs d >= M + 2 = {data.n_irrelevant + 2} orthogonal means"
        )


def check_planted(data) -> None:
    positive_int("data.teacher_heads", data.teacher_heads)
    finite("data.teacher_scale", data.teacher_scale, lo=0.0)
    finite("data.label_noise", data.label_noise, lo=0.0, hi=0.5)


PLANTED_DEFAULTS = types.MappingProxyType(
    dict(T=10, d=16, teacher_heads=1, teacher_scale=1.0, label_noise=0.0)
)

DATA_MODELS: Registry[DataModel] = Registry(
    "data model",
    "data.model",
    (
        DataModel(
            "dm1",
            "DM1: one relevant token carries the class",
            f"{_DATA}:draw_mixture",
            label="DM1",
            defaults=DM1_DEFAULTS,
            check=check_mixture,
            relevant_tokens=True,
        ),
        DataModel(
            "planted",
            "labels of a planted multi-head teacher",
            f"{_DATA}:draw_planted",
            label="planted teacher",
            defaults=PLANTED_DEFAULTS,
            check=check_planted,
        ),
        DataModel(
            "mixture",
            "DM1 with every knob free",
            f"{_DATA}:draw_mixture",
            defaults=DM1_DEFAULTS,
            check=check_mixture,
            relevant_tokens=True,
        ),
        DataModel("npz", "your own data from --data FILE.npz", label="user data", from_file=True),
    ),
)
