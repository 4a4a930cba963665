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
    """``schema``: a frozen dataclass of the model's own parameters (its section of the config:
    field types, checked strictly, and defaults); ``sizes``: its default T and d; ``check``:
    validates the resolved values (a ``DataConfig``) with one-line errors; ``relevant_tokens``: the
    test set's relevant-token mask is known (attention metrics, the max-margin diagnostic);
    ``from_file``: the data come from ``data.path`` (the file fixes n, T and d)."""

    schema: type | None = None
    sizes: Mapping[str, int] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))
    check: Callable[[Any], None] | None = None
    relevant_tokens: bool = False
    from_file: bool = False

    @property
    def parameters(self) -> tuple[str, ...]:
        """The names of its own parameters (its schema's fields)."""
        return tuple(f.name for f in dataclasses.fields(self.schema)) if self.schema else ()

    @property
    def defaults(self) -> dict[str, Any]:
        """T, d and every parameter with its default."""
        own = {f.name: f.default for f in dataclasses.fields(self.schema)} if self.schema else {}
        return {**self.sizes, **own}


@dataclasses.dataclass(frozen=True)
class MixtureParams:
    """The tokenized mixture's own parameters (DM1's values by default)."""

    zeta: float = DM1_DEFAULTS["zeta"]  # sparsity: r = max(1, round(ζT)) relevant tokens
    r: int | None = DM1_DEFAULTS["r"]  # the number of relevant tokens (overrides zeta)
    signal: float = DM1_DEFAULTS["signal"]  # norm S of every mean
    noise: float = DM1_DEFAULTS["noise"]  # noise level σ, g ~ N(0, I/d)
    n_irrelevant: int = DM1_DEFAULTS["n_irrelevant"]  # M irrelevant means (0 = pure noise)
    geometry: str = DM1_DEFAULTS["geometry"]  # antipodal (μ₋ = −μ₊) or orthogonal class means
    first_relevant: bool = DM1_DEFAULTS["first_relevant"]  # position 1 always relevant


@dataclasses.dataclass(frozen=True)
class PlantedParams:
    """The planted teacher's own parameters."""

    teacher_heads: int = 1  # H*; 1 is realisable by a zero-init student
    teacher_scale: float = 1.0  # β, the std of the teacher's scores
    label_noise: float = 0.0  # probability p of flipping a label


def parameter_names() -> tuple[str, ...]:
    """Every registered data model's own parameter names, each once, in registration order."""
    return tuple(dict.fromkeys(n for m in DATA_MODELS.values() for n in m.parameters))


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


MIXTURE_SIZES = types.MappingProxyType({"T": DM1_DEFAULTS["T"], "d": DM1_DEFAULTS["d"]})
PLANTED_SIZES = types.MappingProxyType({"T": 10, "d": 16})

DATA_MODELS: Registry[DataModel] = Registry(
    "data model",
    "data.model",
    (
        DataModel(
            "dm1",
            "DM1: one relevant token carries the class",
            f"{_DATA}:draw_mixture",
            label="DM1",
            schema=MixtureParams,
            sizes=MIXTURE_SIZES,
            check=check_mixture,
            relevant_tokens=True,
        ),
        DataModel(
            "planted",
            "labels of a planted multi-head teacher",
            f"{_DATA}:draw_planted",
            label="planted teacher-student",
            schema=PlantedParams,
            sizes=PLANTED_SIZES,
            check=check_planted,
        ),
        DataModel(
            "mixture",
            "DM1 with every knob free",
            f"{_DATA}:draw_mixture",
            label="tokenized mixture",
            schema=MixtureParams,
            sizes=MIXTURE_SIZES,
            check=check_mixture,
            relevant_tokens=True,
        ),
        DataModel("npz", "your own data from --data FILE.npz", label="user data", from_file=True),
    ),
)
