"""A sweep's config: one frozen dataclass per section (data, model, optim, sweep), ``Config``
and its hash. The data section, ``DataConfig``, is in ``dynamics.config.data_section``; which
fields the hashed document keeps, in ``dynamics.config.identity``.

Every knob is a field of its section, declared once with ``knob`` (``dynamics.parts.knobs``);
a data model's own parameters are the fields of its part's ``schema``. ``Config.hash`` is the
``config_hash`` of every result file (results caches, ``--resume`` checkpoints); ``digest`` hashes
any document with ``NUMERICS_VERSION``. The parts' names come from their registries
(``dynamics.parts``), the one home of each choice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dynamics import parts
from dynamics.config import idle
from dynamics.config.data_section import DataConfig
from dynamics.config.identity import (  # noqa: F401  (NUMERICS_VERSION, part_fields: read from here too)
    NUMERICS_VERSION,
    declared_fields,
    digest,
    file_digest,
    hashed,
    part_fields,
    user_sources,
)
from dynamics.parts import values
from dynamics.parts.knobs import Declared, Knob, knob, knob_of
from dynamics.parts.metrics import LOGS  # what a run logs (sweep.log): losses, default, all
from dynamics.parts.values import head_size_arg, int_arg, parse_diagnostics, parse_heads, parse_steps

DIAGNOSTICS = values.DIAGNOSTICS  # theory diagnostics along training (dynamics.theory.replay); off by default
MAXMARGIN_NORMS = ("fro", "nuc")  # the norm W^mm minimises (dynamics.theory.svm.NORMS)
HEAD_METRICS = ("auto", "on", "off")  # the per-head metrics: on up to 16 heads (auto), on, off
OUTPUTS = ("pooled", "sequence")  # the model's output: Φ through U, or every token's own (value identity)


@dataclass(frozen=True)
class ModelConfig:
    """The model: the query, head normalisation, key-query layout, θ(0), the attention activation."""

    query: str = knob("first", "", choices=parts.QUERIES, grid=str, hashed="always")
    norm: str = knob(
        "sqrt", "head normalisation", choices=parts.NORMS, grid=str, idle=idle.norm, hashed="always"
    )
    key_query: str = knob(
        "full", "", choices=parts.KEY_QUERIES, grid=str, idle=idle.key_query, hashed="always"
    )
    head_size: str | int = knob(
        "split",
        "factored head size: 'split' (d // H) or an integer",
        parse=head_size_arg,
        idle=idle.head_size,
        hashed="always",
        within="[1, inf)",
        single="'split' or a number, one per run",
    )
    init: str = knob("zero", "", choices=parts.INITS, grid=str, idle=idle.init, hashed="always")
    attention: str = knob("softmax", "", choices=parts.ACTIVATIONS, grid=str)
    temperature: float = knob(  # β·s and ∂L/∂W ∝ β: as it is; its products with η₀: parts/floats.py
        1.0,
        "β₀: every activation reads β·s (default 1)",
        grid=float,
        unit="β₀",
        within="(0.0, 1e30]",
        power=1,
    )
    temperature_decay: float = knob(
        0.0,
        "c: β_t = β₀/(1 + c·t) at update t (default 0: constant); a logged step uses its last update's β",
        grid=float,
        unit="c",
        within="[0.0, inf)",
        power=1,  # c·t as it is (its product with optim.steps: parts/floats.py)
    )
    init_scale: float = knob(
        1.0,
        "σ₀ of the normal init, entries N(0, σ₀²/d)",
        grid=float,
        traced=True,
        unit="σ₀",
        idle=idle.init_scale,
        hashed="always",
        within="(0.0, 1e30]",
        power=2,  # U, W ∝ σ₀, a factored QKᵀ ∝ σ₀², the squared loss of Φ ∝ σ₀: squared
    )
    bias: bool = knob(False, "learn a scalar bias b added to Φ (one per run, not ÷ by H)")
    init_from: str | None = knob(
        None,
        "θ(0) from FILE.npz: the parameters by name (U with W, Q and K, or k; b with --bias), each "
        "(H, …) for every trial or (trials, H, …); a run of H heads starts from the first H",
        idle=idle.world_init,
        single="a file of parameters, one per run",
    )
    output: str = knob(
        "pooled",
        "pooled: one output per example through the readout U (the papers' Φ); sequence: every token "
        "queries and has its own output, value identity, f(X) = c_H Σ_h σ(β X W_h Xᵀ) X (no U; targets "
        "(T, d) per example, flattened; needs model.query='all' and a regression loss), or X V_h with "
        "a learned value (model.readout='value')",
        choices=OUTPUTS,
        grid=str,
    )
    # added after results existed: left out of the config hash at its default
    readout: str = knob("direct", "", choices=parts.READOUTS, grid=str)


def _group_knobs(group: str, names: str) -> dict[str, Any]:
    """The three knobs of a parameter group (readout, attention)."""
    return {
        f"{group}_lr_factor": knob(
            1.0,
            f"the {group} parameters {names} step with η(H)·FACTOR (default 1; 0 never moves them)",
            within="[0.0, 1e30]",
            power=1,  # one update's step η·FACTOR·g: as it is
            grid=float,
            idle=idle.group(group),
        ),
        f"{group}_steps": knob(
            None,
            f"START:STOP: the {group} parameters {names} move only in the 0-based updates START <= t "
            f"< STOP, else stay exactly (e.g. 0:2 moves them in the first two updates, 100: from update "
            f"100 on; default all). Adam's moments see a zero gradient while frozen",
            coerce=lambda name, value: parse_steps(value, name),
            single="a window START:STOP, one per run",
            idle=idle.group(group),
        ),
        f"{group}_weight_decay": knob(
            0.0,
            f"λ >= 0 on the {group} parameters {names}: the L2 term λ/2·‖θ‖² in the gradient (gd, sgd; "
            f"normalized-gd before normalising), decoupled as AdamW's θ ← θ − η·λ·θ for adam",
            idle=idle.decay(group),
            within="[0.0, 1e30]",
            power=1,  # λ·θ: as it is
            grid=float,
        ),
    }


_READOUT = _group_knobs("readout", "U (or V and O) and b")
_ATTENTION = _group_knobs("attention", "W (or Q, K) and k")


@dataclass(frozen=True)
class OptimConfig:
    """Training: the optimiser, its step, the loss and task, SGD's batches, the parameter groups'
    rules (per group: the step η(H)·factor, the updates [start, stop) it moves in, the weight
    decay λ >= 0) and a constraint."""

    optimizer: str = knob("gd", "", choices=parts.OPTIMIZERS, grid=str, hashed="always")
    lr: float = knob(  # η·g as it is; its products with β₀ (η₀²·β₀², …): parts/floats.py
        1.0,
        "base step size η₀",
        grid=float,
        traced=True,
        unit="η₀",
        hashed="always",
        within="(0.0, 1e30]",
        power=1,
    )
    lr_scaling: str = knob(
        "constant",
        "the step size's H-scaling η(H) = η₀·H^p, for every optimiser (GD, SGD, normalized-gd and "
        "Adam alike)",
        choices=parts.LR_SCALINGS,
        grid=str,
        idle=idle.lr_scaling,
        hashed="always",
    )
    loss: str = knob(
        parts.training.default_loss("classification"),
        "the loss of one example, of the margin yΦ (classification) or the residual Φ − y (regression); "
        "default: logistic, or mse for regression data",
        choices=parts.LOSSES,
        grid=str,
        hashed="always",
    )
    steps: int = knob(
        500,
        "number of updates (full-batch, or SGD's mini-batches)",
        hashed="always",
        within="[1, 100000000]",
        single="every grid point logs the same steps",
    )
    # None: the data's (its data model's, or a file's targets). Resolved by ``Config.resolved``.
    task: str | None = knob(
        None,
        "classification (±1 labels) or regression (real targets); default: the data's (a data model's "
        "own; a file's targets other than ±1 or 0/1 are regression); one contradicting the data is refused",
        choices=parts.training.TASKS,
        baseline="classification",
        single="the data's targets decide it",
    )
    batch_size: int | None = knob(
        None,
        "sgd only (and needed there): B training examples per update, chosen from the trial's own "
        "random stream and the update number, so the same whatever the packing, devices or --resume; "
        "the logged train loss is still the full training set's (online: the batch of the next update)",
        parse=int_arg,
        idle=idle.minibatch,
        within="[1, inf)",
        grid=int,
    )
    sampling: str = knob(
        "epoch",
        "sgd only: how each update's B examples are chosen",
        choices=parts.SAMPLINGS,
        grid=str,
        idle=idle.minibatch,
    )
    readout_lr_factor: float = _READOUT["readout_lr_factor"]
    attention_lr_factor: float = _ATTENTION["attention_lr_factor"]
    readout_steps: tuple[int, int | None] | None = _READOUT["readout_steps"]
    attention_steps: tuple[int, int | None] | None = _ATTENTION["attention_steps"]
    readout_weight_decay: float = _READOUT["readout_weight_decay"]
    attention_weight_decay: float = _ATTENTION["attention_weight_decay"]
    constraint: str = knob(
        "none",
        "keep parameters on a manifold (needs --query learned and --init sphere)",
        choices=parts.CONSTRAINTS,
        grid=str,
    )
    ngd_eps: float = knob(
        0.0,
        "normalized-gd only: the step η·g/(‖g‖ + ε), a division guard as in some authors' code "
        "(0: η·g/‖g‖, a step of length exactly η)",
        idle=idle.normalised,
        within="[0.0, 1.0]",
        grid=float,
    )
    ngd_per_group: bool = knob(
        False,
        "normalized-gd only: readout and attention each normalised on their own (each moves η)",
        idle=idle.normalised,
    )
    weight_decay: float = knob(
        0.0,
        "λ >= 0 on every parameter, coupled as torch's weight_decay for every optimiser (gd, sgd, adam, "
        "normalized-gd before normalising): g ← g + λθ before the step, the gradient of λ/2·‖θ‖² (adam: "
        "not AdamW's; the group decays are that). Default 0: nothing added",
        idle=idle.weight_decay,
        within="[0.0, 1e30]",
        power=1,  # λ·θ: as it is
        grid=float,
    )
    reduction: str = knob(
        "mean",
        "the training objective over the examples (SGD: its batch): mean (1/n)Σ_i ℓ_i, or sum Σ_i ℓ_i "
        "(n times the gradient; torch's reduction='sum'); the logged losses stay means",
        choices=parts.REDUCTIONS,
        grid=str,
        idle=idle.reduction,
    )


@dataclass(frozen=True)
class SweepConfig:
    """The sweep: the numbers of heads, trials, seed, what is logged and kept."""

    heads: tuple[int, ...] = knob(
        (1, 2, 4, 8),
        "numbers of heads H: a,b,c or a:b:k (k log-spaced whole numbers; e.g. 1,2,4,8 or 1:8:4)",
        parse=parse_heads,
        coerce=lambda name, value: parse_heads(value),
        hashed="always",
        within="[1, 4096]",
    )
    trials: int = knob(
        3, "independent trials (data draws and inits) per H", hashed="always", within="[1, 100000]"
    )
    seed: int = knob(
        0, "root PRNG seed; the same seed gives the same numbers", hashed="always", within="[0, 4294967295]"
    )
    log_every: int | None = knob(
        None, "log metrics every K steps", parse=int_arg, hashed="always", within="[1, inf)"
    )
    log_points: int | None = knob(
        None, "log about N log-spaced steps instead", parse=int_arg, hashed="always", within="[2, 100000]"
    )
    # zero init: one representative head per H (exact); the flag is --no-fast-path
    fast_path: bool = knob(
        True, "simulate one exact representative head per H (zero init)", flag="", hashed="always"
    )
    diagnostics: tuple[str, ...] = knob(
        (),
        "theory diagnostics along training, comma-separated or 'all': sharpness (Hessian λ_max, λ_min, "
        "η·λ_max), kernel (tangent-kernel distance from step 0), maxmargin (cosine of W to the attention "
        "SVM; data models that know their relevant tokens only); off by default. Measured at <= 24 of "
        "the logged steps, each run replayed: it costs several times the sweep's own time "
        "(docs/theory.md)",
        parse=str,
        coerce=lambda name, value: parse_diagnostics(value),
    )
    maxmargin_norm: str = knob(
        "fro",
        "the norm the maxmargin diagnostic's W^mm minimises: fro (Frobenius, the attention SVM) or nuc "
        "(nuclear, the sum of singular values: a low-rank W^mm); p^mm of a learned query is the same "
        "for both",
        choices=MAXMARGIN_NORMS,
        idle=idle.maxmargin,
    )
    head_metrics: str = knob(
        "auto",
        "per-head metrics at the per-head view's steps (--head-every; attention on the relevant "
        "tokens, norms, |cos| with the data's planted directions; docs/results-format.md): on, off, "
        "or auto (default: on up to 16 heads)",
        choices=HEAD_METRICS,
        idle=idle.head_metrics,
    )
    x64: bool | None = knob(
        None,
        "simulate in float64 (default float32, or JAX's own setting where a program turned x64 on): "
        "the same data draws, float64 arithmetic; part of the config hash, so a run never resumes "
        "from or reuses results of the other precision",
        switch=True,
        baseline=False,
    )
    save_params: bool = knob(
        False,
        "keep θ at the per-head view's steps (--head-every) in params.npz (its size is estimated and "
        "refused if too large)",
    )
    head_every: int | None = knob(
        None,
        "log the per-head view (per-head metrics, θ snapshots) at every K-th logged step and the last "
        "(default: about 200 points per run; 1: every logged step)",
        parse=int_arg,
        idle=idle.head_view,
        within="[1, inf)",
    )
    head_sims: bool = knob(
        False,
        "also log the head–head similarity matrices (H × H per head-view step: |cos| of the readouts, "
        "key directions and attention patterns)",
        idle=idle.head_sims,
    )
    log: str = knob(
        "default",
        "the metrics logged: losses (the train and test loss only; nothing else computed), default "
        "(also 0-1 errors, margin, norms, diversity, attention, the per-head view as --head-metrics "
        "says), all (with the per-head metrics at every H and the head–head matrices)",
        choices=LOGS,
        idle=idle.log,
    )


@dataclass(frozen=True)
class Config:
    name: str = "default"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    # given: "section.field" a user set (flags, TOML, keywords; not a preset or results file): a value
    # without effect is refused (``_check_no_effect``); sourced: some values came from a preset or a
    # results file, so only ``given`` is the user's (False: ``Config(...)`` in Python, every value
    # away from its default is the user's). Neither is identity: equality and the hash ignore them.
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    sourced: bool = field(default=False, compare=False, repr=False)

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
        default = OptimConfig.__dataclass_fields__["loss"].default  # the classification default, not given
        if known and "optim.loss" not in cfg.given and loss == default and parts.LOSSES[loss].task != task:
            loss = parts.training.default_loss(task)
        return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, task=task, loss=loss))

    def to_dict(self) -> dict[str, Any]:
        """The config as results.json writes it and its hash reads it: each section's fields but
        those the one rule leaves out (``hashed``), the data's as ``DataConfig.to_dict`` lists them."""
        doc = {"name": self.name, "data": self.data.to_dict()}
        for s in ("model", "optim", "sweep"):
            section = getattr(self, s)
            doc[s] = hashed(section, dataclasses.asdict(section))
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
            doc["data"]["content_sha256"] = file_digest(self.data.path)
        if self.model.init_from:
            doc["model"]["init_from_sha256"] = file_digest(self.model.init_from)
        return digest(doc)


SECTIONS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "sweep": SweepConfig}
_FIELD_TYPES = {s: {f.name: f.type for f in dataclasses.fields(c)} for s, c in SECTIONS.items()}


def _fields(section: str) -> list[str]:
    """The names a section takes: its fields, and for ``data`` every data model's parameters."""
    names = list(_FIELD_TYPES[section])
    return [*names, *parts.data.parameter_names()] if section == "data" else names


def declared() -> list[Declared]:
    """Every knob: the sections' fields in order, then every data model's own parameters (one
    per name, with the declarations of each model that has it)."""
    out = []
    for section, cls in SECTIONS.items():
        for f in declared_fields(cls):
            out.append(Declared(section, f.name, knob_of(f), default=f.default))
    variants: dict[str, dict[int, tuple[list[str], Any, Any]]] = {}
    for model in parts.DATA_MODELS.values():
        for f in dataclasses.fields(model.schema) if model.schema else ():
            spec = knob_of(f) or Knob(f.name)
            entry = variants.setdefault(f.name, {}).setdefault(id(spec), ([], spec, f.default))
            entry[0].append(model.name)
    for name, by_spec in variants.items():
        forms = tuple((tuple(models), spec) for models, spec, _ in by_spec.values())
        first = next(iter(by_spec.values()))
        out.append(Declared("data", name, forms[0][1], forms, default=first[2]))
    return out


def flags() -> dict[str, str]:
    """``"section.field"`` -> its command-line flag, as declared (``--tokens`` for ``data.T``)."""
    return {k.key: k.flag for k in declared()}


def declaration(key: str) -> Knob | None:
    """The Knob of ``section.field`` (a data model's parameter: the first model's), None if none."""
    return next((k.spec for k in declared() if k.key == key), None)
