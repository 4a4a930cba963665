"""The data models: each a part with its own parameters (their defaults), their check, whether
it knows the relevant tokens, its task, and ``impl``, the data model object it stands for
(``setup(key, params) -> world`` and ``sample(world, key, n)``: ``datamodels.protocol``).
Metadata and checks import no JAX.

A new data model is one module (its object, its parameters' defaults and check) and one line in
``DATA_MODELS``; a user's object is found by its ``"module:attribute"`` name (``Registry.get``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import types
from collections.abc import Callable, Mapping
from typing import Any

from datamodels.defaults import DM1_DEFAULTS, GEOMETRIES, MAX_MARGIN_SETTINGS
from dynamics.errors import ConfigError
from dynamics.parts.icl import IclParams, check_icl
from dynamics.parts.knobs import knob
from dynamics.parts.positional import (
    PositionalSemanticParams,
    check_positional_semantic,
    positional_semantic_outputs,
)
from dynamics.parts.registry import Part, Probe, Registry, first_line, is_user_name
from dynamics.parts.value_checks import choice, finite
from dynamics.parts.values import floats_arg

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
        from dynamics.parts.boundary import check_noise_floor

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


@dataclasses.dataclass(frozen=True)
class MixtureParams:
    """The tokenized mixture's own parameters (DM1's values by default)."""

    zeta: float = knob(
        DM1_DEFAULTS["zeta"],
        "sparsity ζ: r = max(1, round(ζT)) relevant tokens",
        grid=float,
        unit="ζ",
        hashed="always",
        within="[0.0, 1.0]",
    )
    r: int | None = knob(
        DM1_DEFAULTS["r"],
        "number of relevant tokens r (overrides ζ)",
        flag="--relevant",
        grid=int,
        unit="r",
        hashed="always",
        within="[1, inf)",
    )
    signal: float = knob(
        DM1_DEFAULTS["signal"],
        "norm S of the means",
        grid=float,
        unit="S",
        hashed="always",
        within="[0.0, inf)",
        power=4,  # a token scale: ∂L/∂W of the squared loss ∝ (Φ − y)·U·X³ ∝ X⁴
    )
    noise: float = knob(
        DM1_DEFAULTS["noise"],
        "noise level σ, g ~ N(0, I/d)",
        grid=float,
        unit="σ",
        hashed="always",
        within="[0.0, inf)",
        power=4,  # a token scale: ∂L/∂W of the squared loss ∝ (Φ − y)·U·X³ ∝ X⁴
    )
    n_irrelevant: int = knob(
        DM1_DEFAULTS["n_irrelevant"],
        "number M of irrelevant means (0: pure noise)",
        flag="--irrelevant-means",
        grid=int,
        unit="M",
        hashed="always",
        within="[0, inf)",
    )
    geometry: str = knob(
        DM1_DEFAULTS["geometry"],
        "class means antipodal (μ₋ = −μ₊) or orthogonal",
        choices=GEOMETRIES,
        hashed="always",
    )
    first_relevant: bool = knob(DM1_DEFAULTS["first_relevant"], "position 1 always relevant", hashed="always")


@dataclasses.dataclass(frozen=True)
class PlantedParams:
    """The planted teacher's own parameters."""

    teacher_heads: int = knob(
        1,
        "teacher heads H* (1 is realisable by a zero-init student)",
        grid=int,
        unit="H*",
        hashed="always",
        within="[1, 4096]",
    )
    teacher_scale: float = knob(
        1.0,
        "teacher scale β, the std of its scores",
        grid=float,
        unit="β",
        hashed="always",
        within="[0.0, inf)",
        power=1,  # β·s of the teacher, whose labels are signs: as it is
    )
    label_noise: float = knob(
        0.0, "label flip probability p", grid=float, unit="p", hashed="always", within="[0.0, 0.5]"
    )


@dataclasses.dataclass(frozen=True)
class SparseTokenParams:
    """The sparse-token model's own parameters (Barnfield, Cui, Lu 2025)."""

    r: int = knob(
        3,
        "R marked positions of a positive example",
        flag="--relevant",
        grid=int,
        unit="R",
        hashed="always",
        within="[1, inf)",
    )
    positive_rate: float = knob(
        0.2, "probability π of a positive", grid=float, unit="π", hashed="always", within="[0.0, 1.0]"
    )
    signal: float = knob(
        6.0,
        "strength θ of the signal on a marked token",
        grid=float,
        unit="θ",
        hashed="always",
        within="[0.0, inf)",
        power=4,  # a token scale: ∂L/∂W of the squared loss ∝ (Φ − y)·U·X³ ∝ X⁴
    )


@dataclasses.dataclass(frozen=True)
class LocationParams:
    """Single-location regression's own parameters (Marion, Berthier, Biau, Boyer 2025)."""

    gamma: float = knob(
        math.sqrt(0.5),
        "spread γ of the relevant token around √(d/2)·k*",
        grid=float,
        unit="γ",
        hashed="always",
        within="[0.0, inf)",
        power=4,  # a token scale: ∂L/∂W of the squared loss ∝ (Φ − y)·U·X³ ∝ X⁴
    )
    epsilon: float = knob(  # a target scale: the squared loss and the noise floor ∝ ε²
        0.1,
        "target noise ε (noise floor ε²)",
        grid=float,
        unit="ε",
        hashed="always",
        within="[0.0, inf)",
        power=2,
    )


@dataclasses.dataclass(frozen=True)
class MultiLocationParams(LocationParams):
    """Multi-location regression's own parameters: F = len(strengths) features."""

    strengths: tuple[float, ...] = knob(
        (1.0, 0.7, 0.5),
        "strengths c_f, one per feature, e.g. 1,0.7,0.5",
        parse=floats_arg,
        hashed="always",
        power=2,  # a target scale: the squared loss ∝ y² ∝ c_f²
    )


@dataclasses.dataclass(frozen=True)
class MaxMarginParams:
    """Max-margin token selection's own parameters (Tarzanagh, Li, Thrampoulidis, Oymak 2023)."""

    setting: str = knob(
        "local",
        "local: unit-norm Gaussian tokens, ±1 labels (local convergence); prompt: the learned-prompt data",
        choices=MAX_MARGIN_SETTINGS,
        hashed="always",
    )
    start_range: float = knob(
        1.0,
        "W(0) and k(0) entries uniform in ±a/√d",
        grid=float,
        unit="a",
        hashed="always",
        within="[0.0, inf)",
        power=2,  # a scale of θ(0), as σ₀: squared
    )


COPY_LOGITS = ("free", "tied")


@dataclasses.dataclass(frozen=True)
class EmergenceParams:
    """The emergence task's own parameters (Zucchet, d'Angelo, Lampinen, Chan 2025)."""

    copies: int = knob(
        1,
        "B in-context copies of the relevant token (the last B positions)",
        grid=int,
        unit="B",
        hashed="always",
        within="[1, inf)",
    )
    copy_logits: str = knob(
        "free",
        "positional attention: each copy its own logit (free), or one shared by the B (tied)",
        choices=COPY_LOGITS,
        hashed="always",
    )
    repetition: float = knob(
        0.0,
        "cross-sample repetition p: the relevant token is a fixed x̄ with probability p",
        grid=float,
        unit="p",
        hashed="always",
        within="[0.0, 1.0]",
    )
    test_repetition: float = knob(
        0.0,
        "the test set's repetition probability (0: tested without repetition)",
        grid=float,
        unit="p_test",
        hashed="always",
        within="[0.0, 1.0]",
    )
    target_noise: float = knob(
        0.0,
        "target noise σ: y = W*x + σg (noise floor σ²)",
        grid=float,
        unit="σ",
        hashed="always",
        within="[0.0, inf)",
        power=2,  # a target scale: the squared loss ∝ y²
    )


_INFERRED: dict[tuple[int, Any], tuple[Any, dict[str, int]]] = {}


def _inferred(obj: Any, name: str, data) -> dict[str, int]:
    """``boundary.infer_sizes`` once per object and DataConfig (the config layer resolves often)."""
    try:
        key = (id(obj), data)
        cached = _INFERRED.get(key)
    except TypeError:  # a parameter value that cannot be hashed: no cache
        key, cached = None, None
    if cached is None or cached[0] is not obj:
        from dynamics.parts.boundary import infer_sizes

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


def emergence_outputs(data) -> int:
    """The emergence model's targets y = W*x ∈ R^d: o = d."""
    return int(data.d)


def parameter_names() -> tuple[str, ...]:
    """Every registered data model's own parameter names, each once, in registration order."""
    return tuple(dict.fromkeys(n for m in DATA_MODELS.values() for n in m.parameters))


def check_mixture(data) -> None:
    if data.r is not None and data.r > data.T:
        raise ConfigError(f"data.r={data.r} must be <= data.T={data.T}")
    choice("data.geometry", data.geometry, GEOMETRIES)
    if data.d < data.n_irrelevant + 2:
        raise ConfigError(
            f"data.d={data.d} is too small for data.n_irrelevant={data.n_irrelevant}: "
            f"the mixture needs d >= M + 2 = {data.n_irrelevant + 2} orthogonal means"
        )


def check_sparse_token(data) -> None:
    if data.r > data.T:
        raise ConfigError(f"data.r={data.r} must be <= data.T={data.T}")


def check_location(data) -> None:
    if data.d < 2:
        raise ConfigError(f"data.d={data.d} must be >= 2: k* and v* are orthonormal")


def check_multi_location(data) -> None:
    F = len(data.strengths)
    if F == 0:
        raise ConfigError("data.strengths=() is empty: give one strength c_f per feature, e.g. 1,0.7,0.5")
    for c in data.strengths:
        finite("data.strengths", c)
    if F > data.T:
        raise ConfigError(f"data.strengths has F={F} features but data.T={data.T}: F <= T distinct positions")
    if data.d < 2 * F:
        raise ConfigError(f"data.d={data.d} must be >= 2F = {2 * F}: the F keys and F values are orthonormal")


def check_max_margin(data) -> None:
    choice("data.setting", data.setting, MAX_MARGIN_SETTINGS)
    if data.T < 2:
        raise ConfigError(f"data.T={data.T}: max-margin token selection needs T >= 2 tokens")
    if data.setting == "prompt" and (data.d < 3 or data.T < 3):
        raise ConfigError(
            f"data.setting='prompt' needs d >= 3 (two shift coordinates and a score) and T >= 3; "
            f"got d={data.d}, T={data.T}"
        )


def check_emergence(data) -> None:
    if data.copies > data.T:
        raise ConfigError(
            f"data.copies={data.copies} must be <= data.T={data.T} (the copies fill the last B positions)"
        )
    choice("data.copy_logits", data.copy_logits, COPY_LOGITS)


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
    from datamodels.npz import DataError, infer_task

    try:
        return infer_task(path)
    except (DataError, OSError):
        return None
