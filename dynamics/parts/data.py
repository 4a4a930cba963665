"""The data models: each a part with its own parameters (their defaults), their check, whether
it knows the relevant tokens, its task, and ``impl``, the data model object it stands for
(``setup(key, params) -> world`` and ``sample(world, key, n)``: ``datamodels.protocol``).
Metadata and checks import no JAX.

A new data model is one module (its object, its parameters' defaults and check) and one line in
``DATA_MODELS``; a user's object is found by its ``"module:attribute"`` name (``Registry.get``).
The built-in models' parameters and checks are in ``dynamics.parts.data_params`` (the in-context
and positional-semantic models': ``dynamics.parts.icl``, ``dynamics.parts.positional``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
from collections.abc import Callable, Mapping
from typing import Any

from datamodels.defaults import DM1_DEFAULTS
from dynamics.errors import ConfigError
from dynamics.parts.data_params import (
    EmergenceParams,
    LocationParams,
    MaxMarginParams,
    MixtureParams,
    MultiLocationParams,
    PlantedParams,
    SparseTokenParams,
    check_emergence,
    check_location,
    check_max_margin,
    check_mixture,
    check_multi_location,
    check_sparse_token,
    emergence_outputs,
)
from dynamics.parts.icl import IclParams, check_icl
from dynamics.parts.positional import (
    PositionalSemanticParams,
    check_positional_semantic,
    check_positional_start,
    positional_leaves_init,
    positional_semantic_outputs,
)
from dynamics.parts.registry import Part, Probe, Registry, first_line, is_user_name

TASKS = ("classification", "regression")


@dataclasses.dataclass(frozen=True)
class DataModel(Part):
    """``schema``: a frozen dataclass of the model's own parameters (its section of the config:
    field types, checked strictly, and defaults); ``sizes``: its default T and d; ``check``:
    validates the resolved values (a ``DataConfig``) with one-line errors; ``relevant_tokens``: the
    test set's relevant-token mask is known (attention metrics, the max-margin diagnostic);
    ``from_file``: the data come from ``data.path`` (the file fixes n, T and d; the task is
    inferred from its targets, ``data_task``); ``task``: classification (±1 labels) or regression
    (real targets); ``sets_init``: its worlds set θ(0) (``initial_params``: ``datamodels.protocol``);
    ``outputs``: o of its vector targets y ∈ R^o as a function of the resolved DataConfig (None: scalar
    targets), what the memory estimate counts before anything is drawn."""

    schema: type | None = None
    sizes: Mapping[str, int] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))
    check: Callable[[Any], None] | None = None
    relevant_tokens: bool = False
    from_file: bool = False
    task: str = "classification"
    sets_init: bool = False
    # the head arrays its worlds always set where the model has them (a user's model: not declared)
    world_params: tuple[str, ...] = ()
    outputs: Callable[[Any], int] | None = None
    # True where a data config's worlds set no θ(0) (a start left to the model's init); None: never
    leaves_init: Callable[[Any], bool] | None = None
    # the model settings its data settings need: (ModelConfig, DataConfig) -> None, one-line errors
    check_model: Callable[[Any, Any], None] | None = None

    @classmethod
    def from_object(cls, name: str, obj: Any) -> DataModel:  # type: ignore[override]
        """A user's data model object (``setup`` and ``sample``; optional ``task``, ``sizes`` or
        ``T`` and ``d``, ``relevant_tokens``) as a part; its parameters are T, d and the sizes."""
        missing = [m for m in ("setup", "sample") if not callable(getattr(obj, m, None))]
        if missing:
            raise ConfigError(
                f"data.model={name!r} has no {' or '.join(missing)}: a data model needs setup and sample"
            )
        task = getattr(obj, "task", "classification")
        if task not in TASKS:
            raise ConfigError(f"data.model={name!r} has task={task!r}; allowed: {', '.join(TASKS)}")
        from dynamics.parts.boundary import check_noise_floor  # lazy: numpy: only for a user's data model

        check_noise_floor(name, getattr(obj, "noise_floor", None))
        declared = getattr(obj, "sizes", None)
        if declared is not None and not isinstance(declared, Mapping):
            raise ConfigError(
                f"data.model={name!r} has sizes={declared!r} (a {type(declared).__name__}); sizes must be "
                "a dict {'T': tokens, 'd': width} (or T and d attributes), or left out"
            )
        sizes = dict(declared or {})
        sizes.update({k: getattr(obj, k) for k in ("T", "d") if isinstance(getattr(obj, k, None), int)})
        return cls(
            name,
            first_line(obj),
            name,
            sizes=types.MappingProxyType(sizes),
            relevant_tokens=bool(getattr(obj, "relevant_tokens", False)),
            task=task,
            sets_init=callable(getattr(obj, "initial_params", None)),
            outputs=_declared_outputs(getattr(obj, "outputs", None)),
        )

    @property
    def parameters(self) -> tuple[str, ...]:
        """The names of its own parameters (its schema's fields)."""
        return tuple(f.name for f in dataclasses.fields(self.schema)) if self.schema else ()

    @property
    def defaults(self) -> dict[str, Any]:
        """T, d and every parameter with its default."""
        own = {f.name: f.default for f in dataclasses.fields(self.schema)} if self.schema else {}
        return {**self.sizes, **own}

    def defaults_for(self, data) -> dict[str, Any]:
        """``defaults``, and for a user's data model that declares no T or d while ``data`` (a
        DataConfig) gives none, the T and d of one traced sample (``boundary.infer_sizes``)."""
        defaults = self.defaults
        missing = [k for k in ("T", "d") if k not in defaults and getattr(data, k) is None]
        if not missing or self.from_file or not is_user_name(self.name) or self.name in DATA_MODELS.names:
            return defaults
        return {**_inferred(self.load(), self.name, data), **defaults}


_INFERRED: dict[tuple[int, Any], tuple[Any, dict[str, int]]] = {}


def _inferred(obj: Any, name: str, data) -> dict[str, int]:
    """``boundary.infer_sizes`` once per object and DataConfig (the config layer resolves often)."""
    try:
        key = (id(obj), data)
        cached = _INFERRED.get(key)
    except TypeError:  # a parameter value that cannot be hashed: no cache
        key, cached = None, None
    if cached is None or cached[0] is not obj:
        from dynamics.parts.boundary import infer_sizes  # lazy: numpy: only for a user's data model

        cached = (obj, infer_sizes(obj, name, data))
        if key is not None:
            _INFERRED[key] = cached
    return cached[1]


def _declared_outputs(value: Any) -> Callable[[Any], int] | None:
    """A user model's ``outputs`` (o of its vector targets: an int, or a function of the resolved
    DataConfig) as a function, or None where it declares none."""
    if callable(value):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return lambda data: value
    return None


def parameter_names() -> tuple[str, ...]:
    """Every registered data model's own parameter names, each once, in registration order."""
    return tuple(dict.fromkeys(n for m in DATA_MODELS.values() for n in m.parameters))


MIXTURE_SIZES = types.MappingProxyType({"T": DM1_DEFAULTS["T"], "d": DM1_DEFAULTS["d"]})
PLANTED_SIZES = types.MappingProxyType({"T": 10, "d": 16})


def _sizes(T: int, d: int) -> Mapping[str, int]:
    return types.MappingProxyType({"T": T, "d": d})


DATA_MODELS: Registry[DataModel] = Registry(
    "data model",
    "data.model",
    (
        DataModel(
            "dm1",
            "DM1: one relevant token carries the class",
            "datamodels.mixture:MIXTURE",
            label="DM1",
            schema=MixtureParams,
            sizes=MIXTURE_SIZES,
            check=check_mixture,
            relevant_tokens=True,
        ),
        DataModel(
            "planted",
            "labels of a planted multi-head teacher",
            "datamodels.planted:PLANTED",
            label="planted teacher-student",
            schema=PlantedParams,
            sizes=PLANTED_SIZES,
        ),
        DataModel(
            "mixture",
            "DM1 with every knob free",
            "datamodels.mixture:MIXTURE",
            label="tokenized mixture",
            schema=MixtureParams,
            sizes=MIXTURE_SIZES,
            check=check_mixture,
            relevant_tokens=True,
        ),
        DataModel("npz", "your own data from --data FILE.npz", label="user data", from_file=True),
        DataModel(
            "sparse-token",
            "positives carry θ·ξ on R random tokens, iid N(0,1) noise",
            "datamodels.sparse_token:SPARSE_TOKEN",
            label="sparse token",
            schema=SparseTokenParams,
            sizes=_sizes(10, 1000),
            check=check_sparse_token,
            relevant_tokens=True,
        ),
        DataModel(
            "single-location",
            "regression y = xᵀv* on one token x ~ N(√(d/2)k*, γ²I) at a random position",
            "datamodels.locations:SINGLE_LOCATION",
            label="single-location regression",
            schema=LocationParams,
            sizes=_sizes(10, 80),
            check=check_location,
            relevant_tokens=True,
            task="regression",
        ),
        DataModel(
            "multi-location",
            "regression y = Σ_f c_f x_fᵀv*_f on F tokens at distinct random positions",
            "datamodels.locations:MULTI_LOCATION",
            label="multi-location regression",
            schema=MultiLocationParams,
            sizes=_sizes(10, 64),
            check=check_multi_location,
            relevant_tokens=True,
            task="regression",
        ),
        DataModel(
            "icl-linreg",
            "in-context linear regression: N = T-1 pairs [x; wᵀx], query [x_q; 0] last, D = d-1",
            "datamodels.icl:ICL_LINREG",
            label="in-context linear regression",
            schema=IclParams,
            sizes=_sizes(32, 5),
            check=check_icl,
            task="regression",
        ),
        DataModel(
            "max-margin",
            "unit-norm tokens, ±1 labels, θ(0) from the world: U = a unit v, W(0) uniform (Tarzanagh et al.)",
            "datamodels.max_margin:MAX_MARGIN",
            label="max-margin token selection",
            schema=MaxMarginParams,
            sizes=_sizes(8, 10),
            check=check_max_margin,
            relevant_tokens=True,
            sets_init=True,
            world_params=("U", "W", "k"),  # a factored Q, K and position logits keep the init's
        ),
        DataModel(
            "emergence",
            "y = W*x ∈ R^d of one token x repeated in the last B positions; x a fixed x̄ with prob. p",
            "datamodels.emergence:EMERGENCE",
            label="single-location regression with repetition",
            schema=EmergenceParams,
            sizes=_sizes(16, 16),
            check=check_emergence,
            relevant_tokens=True,
            task="regression",
            outputs=emergence_outputs,
        ),
        DataModel(
            "positional-semantic",
            "T = 2 tokens p_ℓ + z_ℓ; targets (T, d): (1 − ω) a tied-attention teacher on Z + ω A Z",
            "datamodels.positional_semantic:POSITIONAL_SEMANTIC",
            label="positional vs semantic attention",
            schema=PositionalSemanticParams,
            sizes=_sizes(2, 100),
            check=check_positional_semantic,
            task="regression",
            sets_init=True,
            world_params=("Q",),
            outputs=positional_semantic_outputs,
            leaves_init=positional_leaves_init,
            check_model=check_positional_start,
        ),
    ),
    # A user's model is an object, not one function: its setup and sample are required by
    # DataModel.from_object, and its sample's output is checked where it is traced, before any
    # compile (``boundary.check_sample``, from ``core.data.make_data``'s jax.eval_shape of one trial).
    probe=Probe(
        "setup(key, params) -> world, then sample(world, key, n)",
        "(X (n, T, d), y (n,), mask or None)",
        declares=("setup", "sample"),
        why="a data model needs setup and sample",
    ),
)


def data_task(data) -> str | None:
    """The task of a DataConfig's data: its model's, or for a file, inferred from its targets (all
    ±1 or all 0/1: classification; anything else: regression), None when the file cannot be read
    (validation reports it). A file's task is read once per size and modification time."""
    model = DATA_MODELS[data.model] if data.model in DATA_MODELS else None
    if model is None:
        return None
    if not model.from_file:
        return getattr(model, "task", "classification")
    try:
        stat = os.stat(data.path)
    except (OSError, TypeError):
        return None
    return _cached_task(str(data.path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _cached_task(path: str, size: int, mtime_ns: int) -> str | None:  # size and mtime key the cache
    from datamodels.npz import DataError, infer_task  # lazy: numpy: only for data from a file

    try:
        return infer_task(path)
    except (DataError, OSError):
        return None
