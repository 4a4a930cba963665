"""Validation: every value and combination of a config checked before anything is compiled,
one check per section, each error one line naming the field, the bad value and what is allowed;
``resolve`` validates and plans the logged steps once (an ``Experiment``). What the theory
diagnostics need of a config is checked in ``dynamics.config.diagnostics_checks``."""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
import types
from dataclasses import dataclass

from dynamics import parts
from dynamics.config import sections as sec
from dynamics.config.diagnostics_checks import (
    check_diagnostics,
    check_replay,
    check_snapshot_maxmargin,
    from_snapshots,
)
from dynamics.config.sections import _FIELD_TYPES, declaration
from dynamics.errors import ConfigError
from dynamics.parts import floats
from dynamics.parts.knobs import knob_of
from dynamics.parts.value_checks import MAX_LOGGED_STEPS, within
from dynamics.parts.value_checks import choice as _choice
from dynamics.parts.value_checks import positive_int as _positive_int


@functools.cache
def _adapter(cls):
    """pydantic's validator of a section's field types (strict: no coercion, so "3" is not 3 and
    True is not 1; every instance re-validated). Imported on first use: ``--help`` never needs it."""
    import pydantic  # lazy: pydantic: not for --help

    cls.__pydantic_config__ = pydantic.ConfigDict(strict=True, revalidate_instances="always")
    return pydantic.TypeAdapter(cls)


def _check_params(model, data: sec.DataConfig) -> None:
    """The data model's own parameters against its schema's field types (pydantic, strict)."""
    import pydantic  # lazy: pydantic: not for --help

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
    import pydantic  # lazy: pydantic: not for --help

    cls = sec.SECTIONS[section]
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


def validate(cfg: sec.Config) -> sec.Config:
    """Check every value and combination; return the resolved config.

    The checks run section by section (types and name, data, model, optim, sweep), so the
    first bad value in that order is the one reported.
    """
    _check_types_and_name(cfg)
    _check_choices(cfg)
    cfg = cfg.resolved()
    if cfg.sweep.x64 is None:  # the precision the run will have, recorded (and hashed) as the config's
        cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, x64=ambient_x64()))
    _check_data(cfg.data, cfg.sweep.x64)
    _check_no_effect(cfg)  # before a file's sizes replace what was given
    if parts.DATA_MODELS[cfg.data.model].from_file:  # n, T, d from the file's headers (no array read)
        cfg = dataclasses.replace(cfg, data=_npz_sizes(cfg.data))
    # heads ascending: the figures draw final loss against H, and the order never changes the numbers
    cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, heads=tuple(sorted(cfg.sweep.heads))))
    _check_model(cfg.model, cfg.data, cfg.sweep.x64)
    _check_output(cfg)
    _check_optim(cfg.optim, cfg.model, cfg.data, cfg.sweep.x64)
    _check_products(cfg)
    if cfg.model.init_from is not None:
        _check_init_from(cfg)
    _check_sweep(cfg.sweep, cfg.model, cfg.data)
    check_replay(cfg)
    _check_logged(cfg.sweep, cfg.optim)
    return cfg


def ambient_x64() -> bool:
    """JAX's own x64 setting (``jax.enable_x64``, ``jax_enable_x64``), without importing JAX: off
    where it is not imported yet."""
    jax = sys.modules.get("jax")
    return bool(jax is not None and jax.config.jax_enable_x64)


def _check_types_and_name(cfg: sec.Config) -> None:
    for section in sec.SECTIONS:
        _check_types(section, getattr(cfg, section))
    if not isinstance(cfg.name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", cfg.name):
        raise ConfigError(
            f"name={cfg.name!r} must be 1-64 letters, digits, '.', '_' or '-' (it names the output folder)"
        )


def _check_choices(cfg: sec.Config) -> None:
    """Every knob declared with ``choices`` (a registry or a tuple of names) holds one of them, on
    every surface alike (flags, TOML, keywords, grid axes), read from the declarations: a name no
    part has is refused here, before anything runs, not after the sweep."""
    for k in sec.declared():
        if k.spec.choices is None or k.section == "data" and k.name not in _FIELD_TYPES["data"]:
            continue
        value = getattr(getattr(cfg, k.section), k.name)
        if value is None and k.default is None:
            continue  # an optional choice not made (optim.task: the data's)
        if isinstance(k.spec.choices, parts.Registry):
            k.spec.choices.get(value, k.key)
        else:
            _choice(k.key, value, k.spec.choices)


def _check_bounds(section: str, values, schema=None, x64: bool = False) -> None:
    """Every number of ``section`` (a config section, or with ``schema`` a data model's parameters)
    in the range its knob declares (``Knob.lo``, ``hi``, and what the run's precision holds:
    ``power``; each value of a tuple), read from the declarations: one line naming the field, the
    value and the bound."""
    fields = dataclasses.fields(schema if schema is not None else sec.SECTIONS[section])
    for f in fields:
        spec = knob_of(f)
        if spec is not None:
            within(f"{section}.{f.name}", getattr(values, f.name), spec, f.default, x64, section == "data")


def _check_products(cfg: sec.Config) -> None:
    """The products of knobs that a run forms (``dynamics.parts.floats.PRODUCTS``) held in its
    precision."""
    keys = {key for rule in floats.PRODUCTS for key, _ in rule.factors}
    values = {key: getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1]) for key in keys}
    floats.check_products(values, bool(cfg.sweep.x64))


def _check_data(data: sec.DataConfig, x64: bool = False) -> None:
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
            flag = sec.flags()[f"data.{name}"]
            raise ConfigError(
                f"data.{name}=None: data model {data.model!r} has no default {name}; "
                f"give data.{name} ({flag})"
            )
    _check_bounds("data", data, x64=x64)
    wrong = [name for name, _ in data.params if name not in model.parameters]
    if wrong:
        raise ConfigError(
            f"data.model={data.model!r} has no parameter {', '.join('data.' + w for w in wrong)}"
        )
    _check_params(model, data)
    if model.schema is not None:
        _check_bounds("data", data, model.schema, x64)
    own = dict(data.params)
    for f in dataclasses.fields(model.schema) if model.schema else ():
        spec = knob_of(f)
        if spec is not None and spec.choices is not None and own.get(f.name) is not None:
            _choice(f"data.{f.name}", own[f.name], spec.choices)
    if model.check is not None:
        model.check(data)


def _npz_sizes(data: sec.DataConfig) -> sec.DataConfig:
    """``data`` (model npz) with n_train, n_test, T, d read from the file's headers; a value
    set in the config must be the file's own (n_train/n_test at their defaults count as unset)."""
    from datamodels.npz import read_header  # lazy: numpy: data from a file only

    header = read_header(data.path)
    unset = {"n_train": sec.DataConfig.n_train, "n_test": sec.DataConfig.n_test, "T": None, "d": None}
    for name, default in unset.items():
        value = getattr(data, name)
        if value not in (default, getattr(header, name)):
            raise ConfigError(
                f"data.{name}={value!r} does not apply to --data {data.path}: the file fixes "
                f"{name} = {getattr(header, name)}"
            )
    sized = dataclasses.replace(data, n_train=header.n_train, n_test=header.n_test, T=header.T, d=header.d)
    _check_bounds("data", sized)  # the same bounds as synthetic data (a 3 MB file can claim d = 10⁵)
    return sized


def _check_model(model: sec.ModelConfig, data: sec.DataConfig, x64: bool = False) -> None:
    parts.QUERIES.get(model.query)
    parts.NORMS.get(model.norm)
    parts.KEY_QUERIES.get(model.key_query)
    parts.check_readout(model.readout, "normal")  # a built-in name (no user readouts), before it imports
    parts.INITS.get(model.init)
    parts.ACTIVATIONS.get(model.attention)
    _check_bounds("model", model, x64=x64)
    if model.head_size != "split":
        if data.d is not None and model.head_size > data.d:
            raise ConfigError(
                f"model.head_size={model.head_size} must be <= data.d={data.d}: "
                f"{parts.KEY_QUERIES[model.key_query].product} has rank <= d whatever the head size"
            )
    if parts.QUERIES[model.query].outside and data.T is not None and data.T < 2:
        raise ConfigError(
            f"model.query={model.query!r} needs data.T >= 2 (the last token queries, the others are the "
            f"keys); got data.T={data.T}"
        )
    if parts.QUERIES[model.query].positional and model.init_from is not None:
        raise ConfigError(
            "model.init_from needs a key-query matrix or a learned query: model.query='position' "
            "has per-position logits (draw θ(0) with model.init)"
        )
    cfg_ns = types.SimpleNamespace(model=model, data=data)
    world_start = parts.rules.world_sets_start(cfg_ns)
    if data.model in parts.DATA_MODELS and parts.DATA_MODELS[data.model].check_model is not None:
        parts.DATA_MODELS[data.model].check_model(model, data)
    # a file's or a world's θ(0) is not the init's; nor is θ = 0 a saddle where the world sets the
    # attention (a learned value V = 0 then gets a gradient: σ_st V_hᵀ x_t is linear in V)
    if model.init_from is None and world_start is None and not parts.rules.world_sets_attention(cfg_ns):
        parts.check_init(model.key_query, model.init, model.attention)
        parts.check_icl_init(model.query, model.init, model.key_query)
    parts.check_sphere(model.query, model.init)
    vector = data.model in parts.DATA_MODELS and parts.DATA_MODELS[data.model].outputs is not None
    parts.check_readout_output(model.readout, model.output)
    parts.check_readout(model.readout, model.init, model.init_from is not None, vector)
    if model.init_from is None:
        parts.check_factors_init(model.init, model.query, model.key_query, model.readout)


def _check_output(cfg: sec.Config) -> None:
    """Sequence outputs: every token queries (query 'all'); no readout U, so nothing that reads or
    draws one (a bias, the sphere and in-context inits, θ(0) from a file, the per-head metrics)."""
    model = cfg.model
    _choice("model.output", model.output, sec.OUTPUTS)
    if model.output != "sequence":
        return
    refused = (
        (model.query != "all", f"model.query={model.query!r} (every token queries: use 'all')"),
        (model.bias, "model.bias=True (one scalar added to Φ)"),
        (model.init not in ("zero", "normal"), f"model.init={model.init!r} (it draws a readout U)"),
        (model.init_from is not None, f"model.init_from={model.init_from!r}"),
        (cfg.sweep.head_metrics == "on", "sweep.head_metrics='on' (the per-head metrics read U)"),
    )
    for bad, what in refused:
        if bad:
            raise ConfigError(
                f"model.output='sequence' (each token its own output, value identity, no readout U) "
                f"does not take {what}"
            )


def no_effect(cfg: sec.Config, name: str) -> str | None:
    """Why an explicit ``section.field`` has no effect in ``cfg`` (None: it has one): its knob's
    ``idle`` (``dynamics.parts.knobs``), declared with the knob."""
    spec = declaration(name)
    return None if spec is None or spec.idle is None else spec.idle(cfg)


def _check_no_effect(cfg: sec.Config) -> None:
    """Refuse a value that changes nothing (so it cannot look as if it did): one given explicitly,
    or one away from its knob's default in a Config built directly (nothing marked as given)."""
    for name in sorted(user_set(cfg)):
        why = no_effect(cfg, name)
        if why is not None:
            section, field_name = name.split(".", 1)
            value = getattr(getattr(cfg, section), field_name)
            raise ConfigError(f"{name}={value!r} was given but has no effect: {why}")


def user_set(cfg: sec.Config) -> frozenset[str]:
    """The knobs the user set: those given, and in a Config built in Python (not ``sourced``)
    every one away from its default."""
    return frozenset(cfg.given) | _set_directly(cfg)


def _set_directly(cfg: sec.Config) -> set[str]:
    """The knobs away from their defaults in a Config built in Python (``Config(...)``), where no
    preset or results file set values the user did not give (``Config.sourced``)."""
    if cfg.sourced:
        return set()
    return {
        k.key
        for k in sec.declared()
        if k.section != "data" and getattr(getattr(cfg, k.section), k.name) != k.default
    }


def _check_optim(
    optim: sec.OptimConfig, model: sec.ModelConfig, data: sec.DataConfig, x64: bool = False
) -> None:
    optimizer = parts.OPTIMIZERS.get(optim.optimizer)
    _check_bounds("optim", optim, x64=x64)
    parts.LR_SCALINGS.get(optim.lr_scaling)
    loss = parts.LOSSES.get(optim.loss)
    parts.SAMPLINGS.get(optim.sampling)
    if optimizer.minibatch:
        _check_batch(optim, data)
    for group in parts.GROUPS:
        steps = getattr(optim, f"{group}_steps")
        if steps is not None:
            start, stop = steps
            _positive_int(f"optim.{group}_steps start", start, minimum=0)
            top = int(declaration("optim.steps").hi)  # the most optim.steps can be
            if max(start, stop or 0) > top:  # beyond int32 it failed inside JAX
                raise ConfigError(
                    f"optim.{group}_steps={list(steps)} must end at most at update {top} "
                    f"(the most optim.steps can be)"
                )
            if stop is not None and stop <= start:
                raise ConfigError(
                    f"optim.{group}_steps={list(steps)} is empty: the group moves in updates start <= t < "
                    f"stop, so stop must be > start"
                )
    held = parts.CONSTRAINTS.get(optim.constraint).params
    parts.check_sphere(model.query, model.init, optim.constraint)
    have = parts.rules.head_arrays(model) | ({"b"} if model.bias else set())
    user = optim.constraint not in parts.CONSTRAINTS.names  # (a built-in's query: check_sphere)
    if user and not set(held) <= have:  # a user's constraint: what it holds must be there to project
        raise ConfigError(
            f"optim.constraint={optim.constraint!r} holds {', '.join(sorted(set(held) - have))}, which "
            f"this model does not have (its parameters: {', '.join(sorted(have))})"
        )
    _check_task(optim, data, loss)


def _check_batch(optim: sec.OptimConfig, data: sec.DataConfig) -> None:
    """SGD's batch size: given, at most n, and (epoch sampling) a divisor of n; online sampling
    needs a data model with a world (not a file), and any B."""
    if optim.batch_size is None:
        raise ConfigError(
            f"optim.optimizer={optim.optimizer!r} needs optim.batch_size (--batch-size B), the training "
            f"examples per update"
        )
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
    if parts.SAMPLINGS.get(optim.sampling).whole_epochs and n % optim.batch_size:
        raise ConfigError(
            f"optim.batch_size={optim.batch_size} does not divide data.n_train={n}: "
            f"sampling {optim.sampling!r} "
            f"shows every example once per epoch in batches of B; give a divisor of n or --sampling replace"
        )


def _check_init_from(cfg: sec.Config) -> None:
    """The file's parameters are this model's (layout, d, d_h, bias), for the sweep's H and trials."""
    from dynamics.config import initfile  # lazy: numpy: only with model.init_from

    model = cfg.model
    if not isinstance(model.init_from, str) or not model.init_from.strip():
        raise ConfigError(f"model.init_from={model.init_from!r} must be the path of an .npz file")
    layout = parts.KEY_QUERIES[model.key_query]
    learned = parts.QUERIES[model.query].learned
    heads = max(cfg.sweep.heads)
    head_size = None if learned else layout.head_size(model.head_size, cfg.data.d, heads)
    if head_size is not None and model.head_size == "split" and len(cfg.sweep.heads) > 1:
        raise ConfigError("model.init_from with head_size='split' needs one H (d_h = d // H changes with H)")
    shapes = initfile.expected(cfg.data.d, head_size, learned, model.bias, layout.tied)
    initfile.check(initfile.read(model.init_from), model.init_from, shapes, heads, cfg.sweep.trials)


def _check_task(optim: sec.OptimConfig, data: sec.DataConfig, loss) -> None:
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


def _check_sweep(sweep: sec.SweepConfig, model: sec.ModelConfig, data: sec.DataConfig) -> None:
    if not sweep.heads:
        raise ConfigError("sweep.heads is empty; give at least one number of heads, e.g. --heads 1,2,4")
    _check_bounds("sweep", sweep)
    if len(set(sweep.heads)) != len(sweep.heads):
        raise ConfigError(f"sweep.heads={list(sweep.heads)} has repeated values")
    if not parts.KEY_QUERIES[model.key_query].packs_across_heads(model.head_size) and data.d is not None:
        too_many = [h for h in sweep.heads if h > data.d]
        if too_many:
            raise ConfigError(
                f"sweep.heads={too_many} exceed data.d={data.d}: head_size='split' gives d // H = 0"
            )
    _choice("sweep.head_metrics", sweep.head_metrics, sec.HEAD_METRICS)
    if sweep.log_every is not None and sweep.log_points is not None:
        raise ConfigError("give sweep.log_every or sweep.log_points, not both")
    if from_snapshots(sweep):  # any query with one query token, any optimiser, rule or θ(0)
        check_snapshot_maxmargin(model)
    else:
        check_diagnostics(sweep.diagnostics, model, data)


def _check_logged(sweep: sec.SweepConfig, optim: sec.OptimConfig) -> None:
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


class IdenticalTrialsWarning(UserWarning):
    """Every trial of the sweep is the same run (``identical_trials``)."""


def identical_trials(cfg: sec.Config) -> str | None:
    """Why the trials of ``cfg`` would be identical copies (None: they differ): data from a file
    are shared by every trial, and an init that draws nothing gives every trial the same start."""
    if cfg.sweep.trials < 2 or not parts.DATA_MODELS.get(cfg.data.model).from_file:
        return None
    if parts.OPTIMIZERS.get(cfg.optim.optimizer).minibatch:
        return None  # each trial draws its own SGD batches
    if cfg.model.init_from is not None:
        from dynamics.config import initfile  # lazy: numpy: only with model.init_from

        if initfile.read(cfg.model.init_from)["U"].ndim == 3:
            return None  # a trial axis: each trial starts from its own θ(0)
        start = f"model.init_from={cfg.model.init_from!r} starts every trial from the same θ(0)"
    elif parts.INITS.get(cfg.model.init).random:
        return None
    else:
        start = f"model.init={cfg.model.init!r} draws nothing"
    return (
        f"data from a file ({cfg.data.path}) are shared by every trial and {start}: the "
        f"{cfg.sweep.trials} trials repeat the same run (use --trials 1, --init normal, or a θ(0) per trial)"
    )


@dataclass(frozen=True)
class Experiment:
    """A validated, resolved config and its logging schedule: what the entry point (the command
    line, ``run_sweep`` called with a Config, the figures registry) computes once and everything
    below it receives."""

    config: sec.Config
    steps: tuple[int, ...]  # the logged steps, 0 (before the first update) .. optim.steps


def resolve(cfg: sec.Config | Experiment) -> Experiment:
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
