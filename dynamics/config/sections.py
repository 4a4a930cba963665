"""A sweep's config: one frozen dataclass per section (data, model, optim, sweep), ``Config``
and its hash.

Every knob is a field of its section, declared once with ``knob`` (``dynamics.config.knobs``);
a data model's own parameters are the fields of its part's ``schema``. ``Config.hash`` is the
``config_hash`` of every result file (results caches, ``--resume`` checkpoints); ``digest`` hashes
any document with ``NUMERICS_VERSION``. The parts' names come from their registries
(``dynamics.parts``), the one home of each choice.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynamics import parts
from dynamics.errors import ConfigError
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
NUMERICS_VERSION = 2


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
