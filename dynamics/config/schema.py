"""Experiment configuration: frozen dataclasses per concern, presets, TOML, validation.

A config is resolved in layers: the built-in defaults, then a preset, then a TOML
file, then command-line flags. Every value is validated before anything is
compiled (``validate``, one check per section); errors name the field, the bad value and
what is allowed. ``resolve`` validates and plans the logged steps once (an ``Experiment``);
``digest`` is the one hash behind every ``config_hash``. The mixture's defaults and
geometries live with their generator in ``datamodels.mixture`` and are imported here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynamics import parts
from dynamics.errors import ConfigError
from dynamics.parts.checks import MAX_LOGGED_STEPS
from dynamics.parts.checks import choice as _choice
from dynamics.parts.checks import finite as _finite
from dynamics.parts.checks import positive_int as _positive_int
from dynamics.parts.checks import suggest as _suggest

# The parts' names, read from their registries (dynamics.parts): the one home of each choice.
DATA_MODELS = parts.DATA_MODELS.names
OPTIMIZERS = parts.OPTIMIZERS.names
LR_SCALINGS = {name: p.exponent for name, p in parts.LR_SCALINGS.items()}  # η(H) = η₀ · H^p
QUERIES = parts.QUERIES.names
NORMS = parts.NORMS.names
KEY_QUERIES = parts.KEY_QUERIES.names
INITS = parts.INITS.names
LOSSES = parts.LOSSES.names
# Theory diagnostics along training (dynamics.theory.replay); off by default.
DIAGNOSTICS = ("sharpness", "kernel", "maxmargin")

# The parameters of the built-in data models: a results.json's "data" section and the config hash
# list every one of them (None where the model has none), as they always did, so every old run's
# hash is unchanged; a data model registered later lists its own only when it is the model.
SYNTHETIC_FIELDS = (
    "T",
    "d",
    "zeta",
    "r",
    "signal",
    "noise",
    "n_irrelevant",
    "geometry",
    "first_relevant",
    "teacher_heads",
    "teacher_scale",
    "label_noise",
)
_DATA_FIELDS = ("model", "path", "n_train", "n_test", "T", "d")
# Data-model parameters added after results existed, left out of to_dict (and the hash) at their
# default, so a config that does not use them keeps its hash.
_NEW_DATA_PARAMS: dict[str, Any] = {"whiten": False}


@dataclass(frozen=True, init=False)
class DataConfig:
    """The data: which data model, its sizes, and its own parameters (``params``).

    The data model's parameters are its own section, declared by its part's ``schema``
    (``dynamics.parts.DATA_MODELS``): ``DataConfig(model="planted", params={"teacher_heads": 2})``.
    For brevity they may also be named directly — ``DataConfig(model="mixture", zeta=0.3)``,
    ``data.zeta``, ``--zeta``, ``zeta = 0.3`` in a TOML file's ``[data]`` (or ``[data.params]``) —
    and a parameter not set takes the model's default (``resolved``).
    """

    model: str = "dm1"  # a name in dynamics.parts.DATA_MODELS (dm1, planted, mixture, npz, ...)
    path: str | None = None  # .npz file with X_train, y_train, X_test, y_test (model = npz)
    n_train: int = 100  # training examples per trial (synthetic models)
    n_test: int = 300  # test examples per trial; more gives a less noisy test loss
    T: int | None = None  # tokens per example (None: the model's default)
    d: int | None = None  # token width (None: the model's default)
    params: tuple[tuple[str, Any], ...] = ()  # the model's own parameters set, (name, value) sorted

    def __init__(
        self,
        model: str = "dm1",
        path: str | None = None,
        n_train: int = 100,
        n_test: int = 300,
        T: int | None = None,
        d: int | None = None,
        params: Any = (),
        **named: Any,
    ):
        known = parts.data.parameter_names()
        unknown = [k for k in named if k not in known]
        if unknown:
            allowed = ", ".join([*_DATA_FIELDS, "params", *known])
            raise ConfigError(
                f"unknown field data.{unknown[0]}{_suggest(unknown[0], [*_DATA_FIELDS, *known])}; "
                f"allowed: {allowed}"
            )
        try:
            merged = dict(params.items() if isinstance(params, Mapping) else params)
        except (TypeError, ValueError):
            raise ConfigError(f"data.params={params!r} must be a table of parameter values") from None
        merged.update(named)
        merged = {k: tuple(v) if isinstance(v, list) else v for k, v in merged.items()}  # TOML lists
        if isinstance(path, os.PathLike):
            path = os.fspath(path)  # a pathlib.Path is its string (the hash and results.json see that)
        values = dict(model=model, path=path, n_train=n_train, n_test=n_test, T=T, d=d)
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
        defaults = model.defaults
        T = defaults.get("T") if self.T is None else self.T
        d = defaults.get("d") if self.d is None else self.d
        own = {k: v for k, v in defaults.items() if k not in ("T", "d")}
        return dataclasses.replace(self, T=T, d=d, params={**own, **dict(self.params)})

    def to_dict(self) -> dict[str, Any]:
        """The section as results.json writes it (and the config hash reads it): flat, every
        built-in model's parameter listed (None where unset), then the model's own others."""
        doc: dict[str, Any] = {k: getattr(self, k) for k in _DATA_FIELDS}
        own = dict(self.params)
        doc.update({k: own.pop(k, None) for k in SYNTHETIC_FIELDS if k not in ("T", "d")})
        doc.update({k: v for k, v in own.items() if k not in _NEW_DATA_PARAMS or _NEW_DATA_PARAMS[k] != v})
        return doc


@dataclass(frozen=True)
class ModelConfig:
    query: str = "first"  # first: x_1 queries (the papers' model); all: full self-attention, mean-pooled
    norm: str = "sqrt"  # c_H = 1/√H (sqrt), 1/H (mean) or 1 (sum)
    key_query: str = "full"  # full W_h (d×d) or factored Q_h K_hᵀ (rank ≤ head_size)
    head_size: str | int = "split"  # factored: d // H (split, the bottleneck) or a fixed integer
    init: str = "zero"  # zero (heads stay identical) or normal (breaks the symmetry)
    init_scale: float = 1.0  # σ₀ of the normal init: entries N(0, σ₀²/d)
    attention: str = "softmax"  # σ over a query's scores: softmax, softmax1, linear, sigmoid, erf
    temperature: float = 1.0  # β₀: σ(β·s), the scores multiplied by β for every activation
    temperature_decay: float = 0.0  # c: β_t = β₀ / (1 + c·t) at update t; 0 keeps β constant
    bias: bool = False  # a learned scalar b added to Φ (one per run, never divided by H)
    init_from: str | None = None  # θ(0) from an .npz of the parameters by name (dynamics.config.initfile)


# Fields added after results files existed, per section, with the default they are left out of
# results.json and the config hash at (so every older config keeps its json and its hash). A new
# field goes here with its default.
_NEW_FIELDS: dict[str, dict[str, Any]] = {
    "model": {
        "attention": "softmax",
        "temperature": 1.0,
        "temperature_decay": 0.0,
        "bias": False,
        "init_from": None,
    },
    "optim": {
        "task": "classification",
        "batch_size": None,
        "sampling": "epoch",
        "readout_lr_factor": 1.0,
        "attention_lr_factor": 1.0,
        "readout_steps": None,
        "attention_steps": None,
        "readout_weight_decay": 0.0,
        "attention_weight_decay": 0.0,
        "constraint": "none",
        "ngd_eps": 0.0,
        "ngd_per_group": False,
    },
    "sweep": {"head_metrics": "auto", "save_params": False},
}
_NEW_MODEL_FIELDS = _NEW_FIELDS["model"]


@dataclass(frozen=True)
class OptimConfig:
    optimizer: str = "gd"  # gd (full batch) or adam (optax defaults)
    lr: float = 1.0  # η₀
    lr_scaling: str = "constant"  # η(H) = η₀ · H^p, p = 0 (constant), ½ (sqrt), 1 (linear)
    loss: str = "logistic"  # logistic, exp, hinge2, square (classification); mse (regression)
    steps: int = 500  # updates (full-batch, or of SGD's mini-batches)
    # classification or regression; None: the data's (its data model's, or a file's targets: other
    # than ±1 or 0/1 is regression). Resolved by ``Config.resolved``, with a loss of that task.
    task: str | None = None
    batch_size: int | None = None  # sgd: B training examples per update (sgd needs it; others: none)
    sampling: str = (
        "epoch"  # sgd: epoch (a permutation per epoch), replace or online (dynamics.parts.SAMPLINGS)
    )
    # Per parameter group (readout U, b; attention W, Q, K, k): the step η(H)·factor, the updates
    # [start, stop) it moves in (None: all; stop None: to the end), the weight decay λ >= 0.
    readout_lr_factor: float = 1.0
    attention_lr_factor: float = 1.0
    readout_steps: tuple[int, int | None] | None = None
    attention_steps: tuple[int, int | None] | None = None
    readout_weight_decay: float = 0.0
    attention_weight_decay: float = 0.0
    constraint: str = "none"  # none, or sphere: U_h, k_h kept on the unit sphere (dynamics.parts.CONSTRAINTS)
    ngd_eps: float = 0.0  # normalized-gd: g / (‖g‖ + ε) instead of g / ‖g‖
    ngd_per_group: bool = False  # normalized-gd: readout and attention each normalised on its own


@dataclass(frozen=True)
class SweepConfig:
    heads: tuple[int, ...] = (1, 2, 4, 8)  # numbers of heads H, one sweep point each
    trials: int = 3  # independent data draws (and inits), vmapped in one program
    seed: int = 0  # the root PRNG seed; the same seed gives the same numbers
    log_every: int | None = None  # log every k steps (the last step is always logged)
    log_points: int | None = None  # or about this many log-spaced steps; neither: auto
    fast_path: bool = True  # zero init: simulate one representative head per H (exact)
    # sharpness, kernel, maxmargin (dynamics.theory.replay); () = none. Left out of to_dict and the
    # hash when empty, so runs without diagnostics keep their results.json and config_hash.
    diagnostics: tuple[str, ...] = ()
    # the per-head metrics (dynamics.core.heads): on, off, or auto (on up to 16 heads)
    head_metrics: str = "auto"
    save_params: bool = False  # keep θ at the logged steps (params.npz; size checked before running)


# Part of every config hash (results caches, --resume checkpoints): bump it when the same
# config starts giving other numbers, so that old results are recomputed, never mixed in.
# 2: random init draws head h from fold_in(key, h) (packed runs).
# 3: a query whose largest softmax weight is within 1e-2 of 1 takes the derivative relative to
#    that weight (exact at saturation); normalised GD's norm is scaled by max|g| where √Σg² would
#    under- or overflow, and a group with step factor 0 adds nothing to it. Runs that never come
#    near saturation keep their numbers bit for bit (fig2, fig3-gd, planted-gd do), but any
#    run with a saturated query (planted-adam, fig3-adam: last-bit changes, 1e-6 relative on their
#    final losses) changes, so every config hash changes: --resume recomputes every point of a run
#    made before (its checkpoints carry the old hash) and an old results folder reads as another
#    config's (refused where its hash is checked), never mixed in.
NUMERICS_VERSION = 3


@dataclass(frozen=True)
class Config:
    name: str = "default"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    # "section.field" names a user set explicitly (flags, a TOML file, keywords; not a preset's or a
    # results file's): an explicit value that has no effect is refused (``_check_no_effect``).
    # Not part of the config's identity: equality, the hash and results.json ignore it.
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def resolved(self) -> Config:
        """The data's defaults filled in, the task inferred from the data where not given, and
        where the loss was not chosen (``given``) and is logistic, the task's first loss (mse for
        regression data)."""
        cfg = dataclasses.replace(self, data=self.data.resolved())
        task = cfg.optim.task or parts.data.data_task(cfg.data)
        if task is None:
            return cfg
        loss = cfg.optim.loss
        known = loss in parts.LOSSES and task in parts.training.TASKS
        if known and "optim.loss" not in cfg.given and loss == "logistic" and parts.LOSSES[loss].task != task:
            loss = parts.training.default_loss(task)
        return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, task=task, loss=loss))

    def to_dict(self) -> dict[str, Any]:
        doc = {"name": self.name, "data": self.data.to_dict()}
        doc.update({s: dataclasses.asdict(getattr(self, s)) for s in ("model", "optim", "sweep")})
        for section, fields in _NEW_FIELDS.items():  # added later: left out at their default,
            for name, default in fields.items():  # so every older config keeps its json and hash
                if doc[section][name] in (default, None):  # None: not resolved yet (the default)
                    del doc[section][name]
        if not self.sweep.diagnostics:
            del doc["sweep"]["diagnostics"]  # as before diagnostics existed: same hash, same json
        sources = user_sources(self)
        if sources:  # only with a user's part ("module:attribute"): every other config keeps its hash
            doc["sources"] = sources
        return doc

    def hash(self) -> str:
        """A short hash of the resolved config (keys results caches). With user data (npz) it
        covers the file's contents, not only its path: a changed file never resumes old results."""
        doc = self.resolved().to_dict()
        model = parts.DATA_MODELS.get(self.data.model) if self.data.model in parts.DATA_MODELS else None
        if model is not None and model.from_file and self.data.path:
            doc["data"]["content_sha256"] = _file_digest(self.data.path)
        if self.model.init_from:
            doc["model"]["init_from_sha256"] = _file_digest(self.model.init_from)
        return digest(doc)


def user_sources(cfg: Config) -> dict[str, dict[str, str | None]]:
    """{"section.field": {"path", "sha256"}} of every user part (``"module:attribute"``) the config
    names: where its code is, so results.json records it and the config hash covers it."""
    fields = {
        "data.model": parts.DATA_MODELS,
        "optim.loss": parts.LOSSES,
        "optim.optimizer": parts.OPTIMIZERS,
        "model.attention": parts.ACTIVATIONS,
    }
    found = {}
    for name, registry in fields.items():
        section, field_name = name.split(".")
        value = getattr(getattr(cfg, section), field_name)
        if parts.registry.is_user_name(value) and value not in registry.names:
            try:
                found[name] = registry.get(value, name).source()
            except ConfigError:
                found[name] = {"path": None, "sha256": "unavailable"}
    return found


def _file_digest(path: str) -> str:
    try:
        stat = Path(path).stat()
    except OSError:
        return "missing"
    return _cached_digest(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _cached_digest(path: str, size: int, mtime_ns: int) -> str:  # size and mtime key the cache
    from datamodels.npz import content_digest

    try:
        return content_digest(path)
    except OSError:
        return "unreadable"


def digest(doc: dict[str, Any]) -> str:
    """The 16-hex-digit hash of ``doc`` and ``NUMERICS_VERSION``: the ``config_hash`` of every
    result file (a sweep's ``Config.hash``, the bottleneck experiments' keys)."""
    text = json.dumps({"numerics": NUMERICS_VERSION, **doc}, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


HEAD_METRICS = ("auto", "on", "off")
SECTIONS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "sweep": SweepConfig}
_FIELD_TYPES = {s: {f.name: f.type for f in dataclasses.fields(c)} for s, c in SECTIONS.items()}


def _fields(section: str) -> list[str]:
    """The names a section takes: its fields, and for ``data`` every data model's parameters."""
    names = list(_FIELD_TYPES[section])
    return [*names, *parts.data.parameter_names()] if section == "data" else names


PAPER_HEADS = (1, 2, 4, 8, 16, 32, 64)
# (n_train, n_test) of the papers' runs per data model; the bottleneck uses them too.
PAPER_SIZES = {"dm1": (100, 300), "planted": (1000, 3000)}
_DM1 = {"model": "dm1", "n_train": PAPER_SIZES["dm1"][0], "n_test": PAPER_SIZES["dm1"][1]}
_PLANTED = {"model": "planted", "n_train": PAPER_SIZES["planted"][0], "n_test": PAPER_SIZES["planted"][1]}
_SWEEP = {"heads": PAPER_HEADS, "trials": 5, "log_points": 200}

# The theory's quantities along training (docs/theory.md); η = H is the edge-of-stability
# question, η = 1 the small-step reference.
_THEORY_DM1 = {
    "data": _DM1,
    "optim": {"optimizer": "gd", "lr": 1.0, "lr_scaling": "linear", "steps": 2000},
    "sweep": {"heads": (1, 2, 4, 8, 16, 32), "trials": 3, "log_points": 100, "diagnostics": DIAGNOSTICS},
}

# icl-linear: GD steps for all four drops of its staircase at σ₀ = 0.1 (ten times the authors'
# 0.01, whose fourth drop comes after about 25 000 steps: docs/frontier.md)
ICL_STEPS = 8000

# name -> (one-line purpose, {section: {field: value}})
PRESETS: dict[str, tuple[str, dict[str, dict[str, Any]]]] = {
    "default": ("small DM1 sweep, GD η=1 (the no-argument run)", {}),
    "fig2": (
        "DM1, GD η=1.0 constant: effect of H at a fixed step (Deora et al. Fig. 2)",
        {"data": _DM1, "optim": {"optimizer": "gd", "lr": 1.0, "steps": 10000}, "sweep": _SWEEP},
    ),
    "fig3-gd": (
        "DM1, GD η=1.0·H: step size scaled as O(H) (Fig. 3 left)",
        {
            "data": _DM1,
            "optim": {"optimizer": "gd", "lr": 1.0, "lr_scaling": "linear", "steps": 10000},
            "sweep": _SWEEP,
        },
    ),
    "fig3-adam": (
        "DM1, Adam η=0.06: adaptive steps (Fig. 3 right)",
        {"data": _DM1, "optim": {"optimizer": "adam", "lr": 0.06, "steps": 1000}, "sweep": _SWEEP},
    ),
    "planted-gd": (
        "planted teacher-student, GD η=1.0·H",
        {
            "data": _PLANTED,
            "optim": {"optimizer": "gd", "lr": 1.0, "lr_scaling": "linear", "steps": 3000},
            "sweep": _SWEEP,
        },
    ),
    "planted-adam": (
        "planted teacher-student, Adam η=0.06",
        {"data": _PLANTED, "optim": {"optimizer": "adam", "lr": 0.06, "steps": 1000}, "sweep": _SWEEP},
    ),
    "theory-dm1": (
        "DM1, GD η=1.0·H, H=1..32 with sharpness, tangent kernel and max-margin diagnostics",
        _THEORY_DM1,
    ),
    "theory-dm1-constant": (
        "DM1, GD η=1.0 constant, H=1..32 with sharpness, tangent kernel and max-margin diagnostics",
        {**_THEORY_DM1, "optim": {**_THEORY_DM1["optim"], "lr_scaling": "constant"}},
    ),
    "icl-linear": (
        "in-context linear regression, 5 rank-one linear-attention heads summed: one loss drop per "
        "eigenvalue of Λ (Zhang et al. 2025)",
        {
            "data": {"model": "icl-linreg", "n_train": 5000, "n_test": 1000},
            "model": {
                "query": "last",
                "attention": "linear",
                "norm": "sum",
                "key_query": "factored",
                "head_size": 1,
                "init": "icl",
                "init_scale": 0.1,
            },
            "optim": {"optimizer": "gd", "lr": 0.02, "loss": "mse", "steps": ICL_STEPS},
            "sweep": {"heads": (5,), "trials": 5, "log_points": 400},
        },
    ),
    # The two bottleneck presets run through dynamics.experiments.bottleneck, which sets the data
    # model, n and head layout per sweep on top of the overrides below.
    "bottleneck-expressivity": (
        "one factored head's T×T attention fitted to random targets: best error vs head size d_h",
        {},
    ),
    "bottleneck-heads": (
        "DM1 and planted at d=32, H=1..32: head size d/H (split) vs fixed = T, Adam η=0.06",
        {
            "data": {"d": 32},
            "model": {"key_query": "factored", "head_size": "split", "init": "normal", "init_scale": 1.0},
            "optim": {"optimizer": "adam", "lr": 0.06, "steps": 1000},
            "sweep": {"heads": (1, 2, 4, 8, 16, 32), "trials": 5, "log_points": 100},
        },
    ),
    # Head specialisation (dynamics.experiments.specialisation; its figure runs erf, softmax and
    # softmax1). Tuned: η = 0.01 (0.02 oscillates), β = 2 (sharper competition), σ₀ = 0.5 (heads
    # start apart enough that the extra head rarely duplicates a feature), 2·10⁴ steps.
    "specialisation": (
        "multi-location F=3 (c = 1, 0.7, 0.5), d=64, H=4 learned queries, online SGD: "
        "which head takes which feature",
        {
            "data": {
                "model": "multi-location",
                "d": 64,
                "T": 10,
                "strengths": (1.0, 0.7, 0.5),
                "n_train": 64,
                "n_test": 1000,
            },
            "model": {
                "query": "learned",
                "norm": "sum",
                "init": "normal",
                "init_scale": 0.5,
                "attention": "softmax",
                "temperature": 2.0,
            },
            "optim": {"optimizer": "sgd", "lr": 0.01, "steps": 20000, "batch_size": 64, "sampling": "online"},
            "sweep": {
                "heads": (4,),
                "trials": 5,
                "log_points": 100,
                "head_metrics": "on",
                "save_params": True,
            },
        },
    ),
    # Marion, Berthier, Biau, Boyer (ICLR 2025), their SGD experiment (docs/frontier.md): one erf
    # head with a learned query k and readout v on the sphere, β_t = 2/(1 + 10⁻⁴ t), online SGD.
    "single-location": (
        "single-location regression, one erf head on the sphere, online SGD (Marion et al. 2025)",
        {
            "data": {"model": "single-location", "d": 80, "T": 10, "n_train": 5, "n_test": 1000},
            "model": {
                "query": "learned",
                "attention": "erf",
                "temperature": 2.0,
                "temperature_decay": 1e-4,
                "norm": "sum",
                "init": "sphere",
            },
            "optim": {
                "optimizer": "sgd",
                "loss": "mse",
                "lr": 1e-3,
                "batch_size": 5,
                "sampling": "online",
                "constraint": "sphere",
                "steps": 200_000,
            },
            "sweep": {"heads": (1,), "trials": 30, "log_every": 500},
        },
    ),
}


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


def unknown_preset(name: str, known) -> ConfigError:
    """The one-line error for a preset name that is none of ``known``."""
    return ConfigError(
        f"unknown preset {name!r}{_suggest(name, known)}; run --list-presets (known: {', '.join(known)})"
    )


def preset(name: str) -> Config:
    if not isinstance(name, str):
        raise ConfigError(f"preset name {name!r} must be a string; known: {', '.join(PRESETS)}")
    if name not in PRESETS:
        raise unknown_preset(name, PRESETS)
    return apply_overrides(Config(name=name), PRESETS[name][1], f"preset {name}", explicit=False)


def load_toml(path: str | Path, base: Config | None = None) -> Config:
    """A TOML file of sections [data] [model] [optim] [sweep], optionally ``preset = "fig2"`` on top."""
    doc, name = read_toml(path)
    if name is not None:
        base = preset(name)
    return apply_overrides(base or Config(), doc, f"config {Path(path).name}")


def read_toml(path: str | Path) -> tuple[dict[str, Any], str | None]:
    """A config file's tables and its ``preset`` name (None if it names none), read with the size,
    folder and empty-path checks; a bottleneck preset is refused (it runs its own experiment)."""
    path = Path(path)
    doc = tomllib.loads(_read_toml_text(path))
    if "preset" not in doc:
        return doc, None
    name = str(doc.pop("preset"))
    if name.startswith("bottleneck-"):
        raise ConfigError(
            f"config file {str(path)!r}: preset {name!r} runs its own experiment; "
            f"give it on the command line: --preset {name}"
        )
    return doc, name


MAX_TOML_BYTES = 1 << 20  # a config is a few hundred bytes; more is not a config file


def _read_toml_text(path: Path) -> str:
    """The text of a TOML config file, read at most MAX_TOML_BYTES (``/dev/zero`` is refused)."""
    if not str(path).strip():
        raise ConfigError("--config '' is empty: give the path of a TOML file")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOML_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {str(path)!r} is a folder, not a TOML file") from None
    except OSError as err:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_TOML_BYTES:
        raise ConfigError(f"config file {str(path)!r} is larger than {MAX_TOML_BYTES} bytes: not a config")
    try:
        text = raw.decode()
        tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {err}") from None
    return text


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


@functools.cache
def _adapter(cls):
    """pydantic's validator of a section's field types (strict: no coercion, so "3" is not 3 and
    True is not 1; every instance re-validated). Imported on first use: ``--help`` never needs it."""
    import pydantic

    cls.__pydantic_config__ = pydantic.ConfigDict(strict=True, revalidate_instances="always")
    return pydantic.TypeAdapter(cls)


def _check_params(model, data: DataConfig) -> None:
    """The data model's own parameters against its schema's field types (pydantic, strict)."""
    import pydantic

    if model.schema is None:
        return
    own = dict(data.params)
    try:
        _adapter(model.schema).validate_python(model.schema(**own))
    except pydantic.ValidationError as err:
        name = str(err.errors()[0]["loc"][0])
        types = {f.name: f.type for f in dataclasses.fields(model.schema)}
        raise ConfigError(
            f"data.{name}={own.get(name)!r} has the wrong type; expected {types[name]}"
        ) from None


def _check_types(section: str, value) -> None:
    """The section's field types, checked by pydantic against the dataclass annotations; the
    first wrong field in one line."""
    import pydantic

    cls = SECTIONS[section]
    if not isinstance(value, cls):
        raise ConfigError(f"{section}={value!r} must be a {cls.__name__}")
    try:
        _adapter(cls).validate_python(value)
    except pydantic.ValidationError as err:
        name = str(err.errors()[0]["loc"][0])
        bad = getattr(value, name)
        if bad is None:
            raise ConfigError(f"{section}.{name}=None is not allowed") from None
        raise ConfigError(
            f"{section}.{name}={bad!r} has the wrong type; expected {_FIELD_TYPES[section][name]}"
        ) from None


def validate(cfg: Config) -> Config:
    """Check every value and combination; return the resolved config.

    The checks run section by section (types and name, data, model, optim, sweep), so the
    first bad value in that order is the one reported.
    """
    _check_types_and_name(cfg)
    cfg = cfg.resolved()
    _check_data(cfg.data)
    _check_no_effect(cfg)  # before a file's sizes replace what was given
    if parts.DATA_MODELS[cfg.data.model].from_file:  # n, T, d from the file's headers (no array read)
        cfg = dataclasses.replace(cfg, data=_npz_sizes(cfg.data))
    # heads ascending: the figures draw final loss against H, and the order never changes the numbers
    cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, heads=tuple(sorted(cfg.sweep.heads))))
    _check_model(cfg.model, cfg.data)
    _check_optim(cfg.optim, cfg.model, cfg.data)
    if cfg.model.init_from is not None:
        _check_init_from(cfg)
    _check_sweep(cfg.sweep, cfg.model, cfg.data)
    if cfg.sweep.diagnostics and cfg.optim.task == "regression":
        raise ConfigError(
            "sweep.diagnostics are posed for classification (margins, the attention SVM); "
            "the task is regression"
        )
    _check_replay(cfg)
    _check_logged(cfg.sweep, cfg.optim)
    return cfg


def _check_types_and_name(cfg: Config) -> None:
    for section in SECTIONS:
        _check_types(section, getattr(cfg, section))
    if not isinstance(cfg.name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", cfg.name):
        raise ConfigError(
            f"name={cfg.name!r} must be 1-64 letters, digits, '.', '_' or '-' (it names the output folder)"
        )


def _check_data(data: DataConfig) -> None:
    """A resolved DataConfig: the model, its sizes, its own knobs and no other model's."""
    model = parts.DATA_MODELS.get(data.model)
    if model.from_file:
        if not data.path:
            raise ConfigError(f"data.model={data.model!r} needs data.path (--data FILE.npz)")
        given = [name for name, _ in data.params]
        if given:
            raise ConfigError(
                f"--data FILE.npz cannot be combined with synthetic data parameters "
                f"({', '.join('data.' + g for g in given)}): the file fixes the data"
            )
        return
    if data.path is not None:
        raise ConfigError(
            f"data.path={data.path!r} is only used with data.model='npz' (got data.model={data.model!r})"
        )
    for name in ("n_train", "n_test", "T", "d"):
        if getattr(data, name) is None:
            flag = {"T": "--tokens", "d": "--width"}[name]
            raise ConfigError(
                f"data.{name}=None: data model {data.model!r} has no default {name}; "
                f"give data.{name} ({flag})"
            )
        _positive_int(f"data.{name}", getattr(data, name))
    wrong = [name for name, _ in data.params if name not in model.parameters]
    if wrong:
        raise ConfigError(
            f"data.model={data.model!r} has no parameter {', '.join('data.' + w for w in wrong)}"
        )
    _check_params(model, data)
    if model.check is not None:
        model.check(data)


def _npz_sizes(data: DataConfig) -> DataConfig:
    """``data`` (model npz) with n_train, n_test, T, d read from the file's headers; a value
    set in the config must be the file's own (n_train/n_test at their defaults count as unset)."""
    from datamodels.npz import read_header

    header = read_header(data.path)
    unset = {"n_train": DataConfig.n_train, "n_test": DataConfig.n_test, "T": None, "d": None}
    for name, default in unset.items():
        value = getattr(data, name)
        if value not in (default, getattr(header, name)):
            raise ConfigError(
                f"data.{name}={value!r} does not apply to --data {data.path}: the file fixes "
                f"{name} = {getattr(header, name)}"
            )
    for name in unset:  # the same bounds as synthetic data (a 3 MB file can claim d = 10⁵)
        _positive_int(f"data.{name}", getattr(header, name))
    return dataclasses.replace(data, n_train=header.n_train, n_test=header.n_test, T=header.T, d=header.d)


def _check_model(model: ModelConfig, data: DataConfig) -> None:
    parts.QUERIES.get(model.query)
    parts.NORMS.get(model.norm)
    parts.KEY_QUERIES.get(model.key_query)
    parts.INITS.get(model.init)
    parts.ACTIVATIONS.get(model.attention)
    _finite("model.temperature", model.temperature, lo=0.0, lo_open=True, hi=1e30)
    _finite("model.temperature_decay", model.temperature_decay, lo=0.0)
    _finite("model.init_scale", model.init_scale, lo=0.0, lo_open=True, hi=1e30)
    if model.head_size != "split":
        _positive_int("model.head_size", model.head_size)
        if data.d is not None and model.head_size > data.d:
            raise ConfigError(
                f"model.head_size={model.head_size} must be <= data.d={data.d}: "
                f"Q_h K_hᵀ has rank <= d whatever the head size"
            )
    if parts.QUERIES[model.query].learned and parts.KEY_QUERIES[model.key_query].factored:
        raise ConfigError(
            f"model.key_query={model.key_query!r} has no effect with model.query='learned' "
            "(a vector k per head, no key-query matrix): drop it"
        )
    if model.init_from is None:  # a file's θ(0) is not the init's
        parts.check_init(model.key_query, model.init, model.attention)
        parts.check_icl_init(model.query, model.init)
    parts.check_sphere(model.query, model.init)


def no_effect(cfg: Config, name: str) -> str | None:
    """Why an explicit ``section.field`` has no effect in ``cfg`` (None: it has one)."""
    model, data = cfg.model, cfg.data
    if name in ("model.init", "model.init_scale") and model.init_from:
        return f"model.init_from={model.init_from!r} sets θ(0)"
    if name == "model.init_scale" and not parts.INITS.get(model.init).random:
        return f"model.init={model.init!r} draws nothing (θ(0) = 0); use model.init='normal' (--init normal)"
    if name in ("model.key_query", "model.head_size") and parts.QUERIES.get(model.query).learned:
        return "model.query='learned' has a vector k per head, no key-query matrix"
    if name == "model.head_size" and not parts.KEY_QUERIES.get(model.key_query).factored:
        return f"model.key_query={model.key_query!r} has no head size; use model.key_query='factored'"
    if (
        name in ("optim.batch_size", "optim.sampling")
        and not parts.OPTIMIZERS.get(cfg.optim.optimizer).minibatch
    ):
        return (
            f"optim.optimizer={cfg.optim.optimizer!r} uses every training example at every update; "
            f"use optim.optimizer='sgd' (--optimizer sgd)"
        )
    if (
        name in ("data.n_train", "data.n_test", "data.T", "data.d")
        and parts.DATA_MODELS[data.model].from_file
    ):
        return f"data from a file ({data.path}) fixes n, T and d"
    return None


def _check_no_effect(cfg: Config) -> None:
    """Refuse a value given explicitly that changes nothing (so it cannot look as if it did)."""
    for name in sorted(cfg.given):
        why = no_effect(cfg, name)
        if why is not None:
            section, field_name = name.split(".", 1)
            value = getattr(getattr(cfg, section), field_name)
            raise ConfigError(f"{name}={value!r} was given but has no effect: {why}")


def _check_optim(optim: OptimConfig, model: ModelConfig, data: DataConfig) -> None:
    optimizer = parts.OPTIMIZERS.get(optim.optimizer)
    _finite("optim.lr", optim.lr, lo=0.0, lo_open=True, hi=1e30)  # beyond: float32 overflows
    parts.LR_SCALINGS.get(optim.lr_scaling)
    loss = parts.LOSSES.get(optim.loss)
    _positive_int("optim.steps", optim.steps)
    parts.SAMPLINGS.get(optim.sampling)
    if optimizer.minibatch:
        _check_batch(optim, data)
    for group in parts.GROUPS:
        _finite(f"optim.{group}_lr_factor", getattr(optim, f"{group}_lr_factor"), lo=0.0, hi=1e30)
        _finite(f"optim.{group}_weight_decay", getattr(optim, f"{group}_weight_decay"), lo=0.0, hi=1e30)
        steps = getattr(optim, f"{group}_steps")
        if steps is not None:
            start, stop = steps
            _positive_int(f"optim.{group}_steps start", start, minimum=0)
            if stop is not None and stop <= start:
                raise ConfigError(
                    f"optim.{group}_steps={list(steps)} is empty: the group moves in updates start <= t < "
                    f"stop, so stop must be > start"
                )
    parts.CONSTRAINTS.get(optim.constraint)
    parts.check_sphere(model.query, model.init, optim.constraint)
    _finite("optim.ngd_eps", optim.ngd_eps, lo=0.0, hi=1.0)
    if not isinstance(optim.ngd_per_group, bool):
        raise ConfigError(f"optim.ngd_per_group={optim.ngd_per_group!r} must be true or false")
    if not optimizer.normalise_per_run and (optim.ngd_eps or optim.ngd_per_group):
        name = "ngd_eps" if optim.ngd_eps else "ngd_per_group"
        raise ConfigError(
            f"optim.{name}={getattr(optim, name)!r} has no effect with optim.optimizer={optim.optimizer!r}: "
            f"it is normalized-gd's"
        )
    _check_task(optim, data, loss)


def _check_batch(optim: OptimConfig, data: DataConfig) -> None:
    """SGD's batch size: given, at most n, and (epoch sampling) a divisor of n; online sampling
    needs a data model with a world (not a file), and any B."""
    if optim.batch_size is None:
        raise ConfigError(
            f"optim.optimizer={optim.optimizer!r} needs optim.batch_size (--batch-size B), the training "
            f"examples per update"
        )
    _positive_int("optim.batch_size", optim.batch_size)
    if parts.SAMPLINGS.get(optim.sampling).fresh:
        if parts.DATA_MODELS.get(data.model).from_file:
            raise ConfigError(
                f"optim.sampling={optim.sampling!r} draws fresh examples from a data model at every "
                f"update; data from a file ({data.path}) has a fixed training set: use 'epoch' or 'replace'"
            )
        return  # any B: the batches are not taken from the n training examples
    n = data.n_train
    if optim.batch_size > n:
        raise ConfigError(f"optim.batch_size={optim.batch_size} is more than the data.n_train={n} examples")
    if optim.sampling == "epoch" and n % optim.batch_size:
        raise ConfigError(
            f"optim.batch_size={optim.batch_size} does not divide data.n_train={n}: sampling 'epoch' "
            f"shows every example once per epoch in batches of B; give a divisor of n or --sampling replace"
        )


def _check_replay(cfg: Config) -> None:
    """The theory diagnostics replay full-batch GD or Adam with the plain step: refused otherwise."""
    if not cfg.sweep.diagnostics:
        return
    optim = cfg.optim
    if optim.optimizer not in ("gd", "adam"):
        raise ConfigError(
            f"sweep.diagnostics replays full-batch GD or Adam; got optim.optimizer={optim.optimizer!r}"
        )
    changed = [k for k, v in _NEW_FIELDS["optim"].items() if getattr(optim, k) != v]
    if changed:
        raise ConfigError(
            f"sweep.diagnostics replays the plain step (no group rules or constraint); "
            f"got optim.{changed[0]}={getattr(optim, changed[0])!r}"
        )


def _check_init_from(cfg: Config) -> None:
    """The file's parameters are this model's (layout, d, d_h, bias), for the sweep's H and trials."""
    from dynamics.config import initfile

    model = cfg.model
    if not isinstance(model.init_from, str) or not model.init_from.strip():
        raise ConfigError(f"model.init_from={model.init_from!r} must be the path of an .npz file")
    layout = parts.KEY_QUERIES[model.key_query]
    learned = parts.QUERIES[model.query].learned
    heads = max(cfg.sweep.heads)
    head_size = None if learned else layout.head_size(model.head_size, cfg.data.d, heads)
    if head_size is not None and model.head_size == "split" and len(cfg.sweep.heads) > 1:
        raise ConfigError("model.init_from with head_size='split' needs one H (d_h = d // H changes with H)")
    shapes = initfile.expected(cfg.data.d, head_size, learned, model.bias)
    initfile.check(initfile.read(model.init_from), model.init_from, shapes, heads, cfg.sweep.trials)


def _check_task(optim: OptimConfig, data: DataConfig, loss) -> None:
    """The task one of classification, regression; the data's own where they imply one (a file's
    ±1 targets may also be regression targets, never remapped); the loss one of the task's."""
    if optim.task is not None:
        _choice("optim.task", optim.task, parts.training.TASKS)
    implied = parts.data.data_task(data)
    from_file = parts.DATA_MODELS[data.model].from_file
    if optim.task is not None and implied is not None and optim.task != implied:
        if not (from_file and optim.task == "regression"):
            what = f"the targets of {data.path}" if from_file else f"data.model={data.model!r}"
            raise ConfigError(
                f"optim.task={optim.task!r} contradicts the data: {what} are {implied} data (drop --task)"
            )
    task = optim.task or implied or "classification"
    if loss.task != task:
        allowed = ", ".join(repr(n) for n, p in parts.LOSSES.items() if p.task == task)
        raise ConfigError(
            f"optim.loss={loss.name!r} is a {loss.task} loss; the task is {task}: use one of {allowed}"
        )


def _check_sweep(sweep: SweepConfig, model: ModelConfig, data: DataConfig) -> None:
    if not sweep.heads:
        raise ConfigError("sweep.heads is empty; give at least one number of heads, e.g. --heads 1,2,4")
    for h in sweep.heads:
        _positive_int("sweep.heads", h)
    if len(set(sweep.heads)) != len(sweep.heads):
        raise ConfigError(f"sweep.heads={list(sweep.heads)} has repeated values")
    if not parts.KEY_QUERIES[model.key_query].packs_across_heads(model.head_size) and data.d is not None:
        too_many = [h for h in sweep.heads if h > data.d]
        if too_many:
            raise ConfigError(
                f"sweep.heads={too_many} exceed data.d={data.d}: head_size='split' gives d // H = 0"
            )
    _choice("sweep.head_metrics", sweep.head_metrics, HEAD_METRICS)
    _positive_int("sweep.trials", sweep.trials)
    _positive_int("sweep.seed", sweep.seed, minimum=0)
    if sweep.log_every is not None and sweep.log_points is not None:
        raise ConfigError("give sweep.log_every or sweep.log_points, not both")
    if sweep.log_every is not None:
        _positive_int("sweep.log_every", sweep.log_every)
    if sweep.log_points is not None:
        _positive_int("sweep.log_points", sweep.log_points, minimum=2)
    _check_diagnostics(sweep.diagnostics, model, data)


def _check_logged(sweep: SweepConfig, optim: OptimConfig) -> None:
    """The number of logged steps, before the schedule is built (10⁸ steps, every one logged, took
    9 GB in the schedule alone)."""
    if sweep.log_every is None:
        return
    logged = optim.steps // sweep.log_every + 1
    if logged > MAX_LOGGED_STEPS:
        raise ConfigError(
            f"sweep.log_every={sweep.log_every} with optim.steps={optim.steps} logs {logged} steps, "
            f"more than {MAX_LOGGED_STEPS}: log less often (a larger --log-every, or --log-points)"
        )


def _check_diagnostics(names: tuple[str, ...], model: ModelConfig, data: DataConfig) -> None:
    if not isinstance(names, tuple):
        raise ConfigError(f"sweep.diagnostics={names!r} must be a tuple of names from {DIAGNOSTICS}")
    for name in names:
        _choice("sweep.diagnostics", name, DIAGNOSTICS)
    if len(set(names)) != len(names):
        raise ConfigError(f"sweep.diagnostics={list(names)} has repeated values")
    changed = {k: getattr(model, k) for k, v in _NEW_MODEL_FIELDS.items() if getattr(model, k) != v}
    if names and parts.QUERIES[model.query].learned:
        changed = {"query": model.query}
    if names and changed:  # the replay re-trains the papers' model: softmax at β = 1
        name, value = next(iter(changed.items()))
        raise ConfigError(
            f"sweep.diagnostics needs the papers' model (a key-query matrix, softmax attention at "
            f"temperature 1, no bias: the replay's model); "
            f"got model.{name}={value!r}"
        )
    if "maxmargin" in names:
        if not parts.DATA_MODELS[data.model].relevant_tokens:
            known = ", ".join(n for n, m in parts.DATA_MODELS.items() if m.relevant_tokens)
            raise ConfigError(
                f"sweep.diagnostics 'maxmargin' needs data whose relevant tokens are known ({known}); "
                f"data.model={data.model!r} has none"
            )
        if not parts.QUERIES[model.query].first_token:
            raise ConfigError(
                f"sweep.diagnostics 'maxmargin' needs model.query='first' (the attention SVM is "
                f"posed for the first token as query); got model.query={model.query!r}"
            )


class IdenticalTrialsWarning(UserWarning):
    """Every trial of the sweep is the same run (``identical_trials``)."""


def identical_trials(cfg: Config) -> str | None:
    """Why the trials of ``cfg`` would be identical copies (None: they differ): data from a file
    are shared by every trial, and an init that draws nothing gives every trial the same start."""
    if cfg.sweep.trials < 2 or not parts.DATA_MODELS.get(cfg.data.model).from_file:
        return None
    if parts.INITS.get(cfg.model.init).random:
        return None
    return (
        f"data from a file ({cfg.data.path}) are shared by every trial and model.init={cfg.model.init!r} "
        f"draws nothing: the {cfg.sweep.trials} trials repeat the same run (use --trials 1, or --init normal)"
    )


@dataclass(frozen=True)
class Experiment:
    """A validated, resolved config and its logging schedule: what the entry point (the command
    line, ``run_sweep`` called with a Config, the figures registry) computes once and everything
    below it receives."""

    config: Config
    steps: tuple[int, ...]  # the logged steps, 0 (before the first update) .. optim.steps


def resolve(cfg: Config | Experiment) -> Experiment:
    """Validate ``cfg`` and plan its logged steps (an Experiment is returned as it is)."""
    if isinstance(cfg, Experiment):
        return cfg
    cfg = validate(cfg)
    return Experiment(cfg, tuple(log_schedule(cfg.optim.steps, cfg.sweep.log_every, cfg.sweep.log_points)))


def log_schedule(steps: int, log_every: int | None = None, log_points: int | None = None) -> list[int]:
    """The logged steps: 0 (before any update) ... steps (always logged), sorted, unique.

    Neither given: every step up to 500 steps, else 200 log-spaced points.
    """
    if log_every is None and log_points is None:
        if steps <= 500:
            log_every = 1
        else:
            log_points = 200
    if log_every is not None:
        points = set(range(0, steps + 1, log_every))
    else:
        points = {0}
        k = log_points - 1
        for i in range(k + 1):
            points.add(int(round(steps ** (i / k))) if steps > 1 else steps)
    points.add(steps)
    return sorted(p for p in points if 0 <= p <= steps)
