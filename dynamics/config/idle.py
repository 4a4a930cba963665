"""Why a knob given explicitly has no effect in a config: the ``idle`` of the knobs' declarations
(``dynamics.config.sections``, ``dynamics.parts.data``). A value without effect is refused
(``dynamics.config.validation``), so that it cannot look as if it did something."""

from __future__ import annotations

from dynamics import parts
from dynamics.parts import rules
from dynamics.parts.metrics import head_metrics_on, head_view_on


def from_file(cfg) -> str | None:
    if parts.DATA_MODELS.get(cfg.data.model).from_file:
        return f"data from a file ({cfg.data.path}) fixes n, T and d"
    return None


def n_train(cfg) -> str | None:
    if from_file(cfg):
        return from_file(cfg)
    optim = cfg.optim
    if parts.OPTIMIZERS.get(optim.optimizer).minibatch and parts.SAMPLINGS.get(optim.sampling).fresh:
        return (
            f"optim.sampling={optim.sampling!r} draws fresh examples at every update, no training set "
            f"of n examples (the batch size is --batch-size)"
        )
    return None


def world_init(cfg) -> str | None:
    """The data model's worlds set every array θ(0) would draw (``parts.rules.world_sets_start``)."""
    arrays = rules.world_sets_start(cfg)
    if arrays is None:
        return None
    return f"data.model={cfg.data.model!r} sets θ(0) from its world ({', '.join(sorted(arrays))})"


def init(cfg) -> str | None:
    if cfg.model.init_from:
        return f"model.init_from={cfg.model.init_from!r} sets θ(0)"
    return world_init(cfg)


def init_scale(cfg) -> str | None:
    model = cfg.model
    if model.init_from:
        return f"model.init_from={model.init_from!r} sets θ(0)"
    if world_init(cfg):
        return world_init(cfg)
    if not parts.INITS.get(model.init).random:
        return f"model.init={model.init!r} draws nothing (θ(0) = 0); use model.init='normal' (--init normal)"
    unit = parts.INITS.get(model.init).unit_params
    if unit and parts.rules.drawn_params(cfg) <= set(unit):
        on = " and ".join(f"{name}_h" for name in unit)
        return f"model.init={model.init!r} puts {on} on the unit sphere whatever σ₀ (no other array to draw)"
    return None


def key_query(cfg) -> str | None:
    if parts.QUERIES.get(cfg.model.query).learned:
        return "model.query='learned' has a vector k per head, no key-query matrix"
    if parts.QUERIES.get(cfg.model.query).positional:
        return "model.query='position' has a logit per position, no key-query matrix"
    return None


def head_size(cfg) -> str | None:
    if not parts.QUERIES.get(cfg.model.query).matrix:
        return key_query(cfg)
    if not parts.KEY_QUERIES.get(cfg.model.key_query).factored:
        return f"model.key_query={cfg.model.key_query!r} has no head size; use model.key_query='factored'"
    return None


def one_head(cfg) -> str | None:
    """'sweep.heads=[1]' when every run of the sweep has one head (what scales with H is idle)."""
    heads = cfg.sweep.heads
    return f"sweep.heads={list(heads)}" if heads and all(h == 1 for h in heads) else None


def lr_scaling(cfg) -> str | None:
    """η(H) = η₀·H^p is η₀ at H = 1 whatever p: with every H one, the scaling changes nothing."""
    at = one_head(cfg)
    return at and f"{at}: η(H) = η₀·H^p is η₀ at H = 1 whatever the scaling"


def norm(cfg) -> str | None:
    """c_1 = 1 for a head normalisation that declares it (``Norm.unit_at_one``; every built-in one):
    with every H one, it changes nothing. A user's c_H need not be 1 at H = 1: never idle."""
    at = one_head(cfg)
    if at and parts.NORMS.get(cfg.model.norm).unit_at_one:
        return f"{at}: c_H is 1 at H = 1 for model.norm={cfg.model.norm!r}, as for the default"
    return None


def minibatch(cfg) -> str | None:
    if not parts.OPTIMIZERS.get(cfg.optim.optimizer).minibatch:
        return (
            f"optim.optimizer={cfg.optim.optimizer!r} uses every training example at every update; "
            f"use optim.optimizer='sgd' (--optimizer sgd)"
        )
    return None


def _arrays(cfg, group: str) -> set[str]:
    """The arrays of a parameter group in ``cfg``'s model, as the sphere constraint sees them."""
    model = cfg.model
    if group == "readout":
        if model.output == "sequence":  # value identity (no readout parameters) or learned values V
            return {"V"} if parts.READOUTS.get(model.readout).values else set()
        return {"U", "b"} if model.bias else {"U"}
    return {"k"} if parts.QUERIES.get(model.query).learned else {"W"}


def _radial(cfg, present: set[str]) -> str | None:
    """Why a decay in the gradient on ``present`` does nothing: a constraint holds all of them on
    a sphere, where λθ is radial and the tangent projection removes it; None when it acts."""
    held = parts.CONSTRAINTS.get(cfg.optim.constraint).params
    if not held or not present <= set(held):
        return None
    return (
        f"optim.constraint={cfg.optim.constraint!r} keeps {', '.join(sorted(present))} on the unit sphere "
        f"and removes the gradient's radial part, which is all the decay λθ is"
    )


def group(name: str):
    """A parameter group's knob (its step factor, window or decay) where the model has no
    parameter of the group: sequence outputs have no readout (value identity)."""

    def idle(cfg) -> str | None:
        if _arrays(cfg, name):
            return None
        return (
            f"model.output={cfg.model.output!r} with model.readout={cfg.model.readout!r} has no {name} "
            f"parameters (value identity, no U or b)"
        )

    return idle


def decay(group_name: str):
    """A group's weight decay where the model has none of the group's parameters, or under a
    constraint that holds every parameter of the group on a sphere, with the decay in the
    gradient (not Adam's decoupled one)."""

    def idle(cfg) -> str | None:
        absent = group(group_name)(cfg)
        if absent:
            return absent
        if parts.OPTIMIZERS.get(cfg.optim.optimizer).decoupled_weight_decay:
            return None
        return _radial(cfg, _arrays(cfg, group_name))

    return idle


def weight_decay(cfg) -> str | None:
    """The coupled decay on every parameter (every optimiser, Adam included) under a constraint
    that holds every parameter on a sphere."""
    return _radial(cfg, _arrays(cfg, "readout") | _arrays(cfg, "attention"))


def reduction(cfg) -> str | None:
    """A summed objective only scales the gradient by n: normalised GD's g/‖g‖ does not see it
    unless a decay or ε is weighed against the gradient."""
    optim = cfg.optim
    if not parts.OPTIMIZERS.get(optim.optimizer).normalise_per_run or optim.ngd_eps:
        return None
    if optim.weight_decay or optim.readout_weight_decay or optim.attention_weight_decay:
        return None
    return (
        f"optim.optimizer={optim.optimizer!r} steps along g/‖g‖, the same for n·g "
        "(without a weight decay or optim.ngd_eps)"
    )


def normalised(cfg) -> str | None:
    if not parts.OPTIMIZERS.get(cfg.optim.optimizer).normalise_per_run:
        return f"optim.optimizer={cfg.optim.optimizer!r} does not normalise its step; it is normalized-gd's"
    return None


def head_view(cfg) -> str | None:
    if not head_view_on(cfg):
        off = LOG_DECIDES["losses"] if cfg.sweep.log == "losses" else "sweep.head_metrics is off"
        return f"no per-head view is logged ({off} and sweep.save_params is False)"
    return None


def head_sims(cfg) -> str | None:
    if cfg.sweep.log in ("losses", "all"):
        return LOG_DECIDES[cfg.sweep.log]
    if not head_metrics_on(cfg):
        mode, top = cfg.sweep.head_metrics, max(cfg.sweep.heads)
        return f"sweep.head_metrics={mode!r} logs no per-head metrics (largest H = {top})"
    return None


# sweep.log's values that decide the per-head view's metrics themselves (sweep.head_metrics,
# sweep.head_sims given beside them would change nothing).
LOG_DECIDES = {
    "losses": "sweep.log='losses' logs the train and test loss only (no per-head metrics)",
    "all": "sweep.log='all' logs every per-head metric and the head–head matrices at every H",
}


def head_metrics(cfg) -> str | None:
    return LOG_DECIDES.get(cfg.sweep.log)


def log(cfg) -> str | None:
    if cfg.sweep.log == "all" and cfg.model.output == "sequence":
        return (
            "model.output='sequence' has no readout U, so no per-head metrics or head–head matrices: "
            "sweep.log='all' logs what 'default' does"
        )
    return None


def maxmargin(cfg) -> str | None:
    if "maxmargin" not in cfg.sweep.diagnostics:
        return (
            f"sweep.diagnostics={list(cfg.sweep.diagnostics)} has no maxmargin (the max-margin view's norm)"
        )
    return None
