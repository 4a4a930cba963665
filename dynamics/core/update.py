"""The one training step: θ ← θ − η·direction(g), used by the engine, the theory replay, the
teaching demos and the bottleneck fits alike.

The direction is an optimiser part's optax transformation without its step size
(``dynamics.parts.OPTIMIZERS``: GD's identity, Adam's ``scale_by_adam``); the step size is
applied here, as one scalar, one value per head slot (the engine's packs), or one value per
parameter (a step per group). The arithmetic is optax's ``sgd(η)``/``adam(η)`` followed by
``apply_updates``: update = (−η)·direction, θ ← θ + update.

With ``Rules`` (the engine's, static) one step is, in this order (``dynamics.parts.training``
states each rule):

1. coupled weight decay: g ← g + λ·θ on every parameter, every optimiser (``Rules.weight_decay``,
   torch's ``weight_decay``), then g ← g + λ_group·θ (all but Adam), the gradients of λ/2·‖θ‖²
   and λ/2·‖θ_group‖²;
2. a group outside its range of updates gets a zero gradient (its decay term included);
3. the sphere constraint: U_h, k_h lose their gradient's radial part, g ← g − (g·θ̂)θ̂;
4. normalised GD: g ← g / ‖g‖, the norm over each run's parameters (``member``) that move at
   update t (a group outside its range or with step factor 0 adds nothing), 0 stays 0;
   computed without underflow; optionally g / (‖g‖ + ε), or each group on its own (``Rules``);
5. the optimiser's direction d (its state advanced);
6. decoupled weight decay (Adam, as AdamW): d ← d + λ_group·θ;
7. θ ← θ − η·factor_group·d, then a group outside its range is put back exactly as it was;
8. the sphere constraint: U_h, k_h divided by their norms.

Rules at their defaults take the plain step above and nothing else (the same numbers, bit
for bit, as before the rules existed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dynamics import parts
from dynamics.core.inits import per_head, unit_rows
from dynamics.core.norms import _plain_range, held_norm, plain_holds  # noqa: F401  (read from here too)

Params = dict[str, jax.Array]


def direction(name: str) -> optax.GradientTransformation:
    """The optimiser ``name`` without its step size."""
    return parts.OPTIMIZERS.get(name, "optimizer").load()()


def make_optimizer(name: str, lr: Any) -> optax.GradientTransformation:
    """optax's sgd(η) or adam(η), built as optax builds them: ``direction`` then × (−η)."""
    return optax.chain(direction(name), optax.scale_by_learning_rate(lr))


def per_head_gradient(grads: Params, weight: jax.Array) -> Params:
    """The fast path's gradient: a stored head standing for w identical heads receives ∇L̃ = w·g;
    each of the heads it stands for gets g = ∇L̃ / w (the exact per-head gradient). The bias b is
    one per run, not per head: its gradient is the run's own, left as it is."""
    return {k: g if k == "b" else g / per_head(weight, g) for k, g in grads.items()}


def descend(params: Any, d: Any, lr: Any) -> Any:
    """θ ← θ + (−η)·d for a dict of parameters (or any pytree of them). ``lr``: a scalar, a
    per-head (S,) vector, or {top-level name: step} (a step per group of parameters)."""
    if not isinstance(params, Mapping):
        return jax.tree_util.tree_map(lambda p, g: p + per_head(-lr, g) * g, params, d)
    steps = lr if isinstance(lr, Mapping) else dict.fromkeys(params, lr)
    return {
        k: descend(params[k], d[k], steps[k])
        if isinstance(params[k], Mapping)
        else params[k] + per_head(-steps[k], d[k]) * d[k]
        for k in params
    }


@dataclass(frozen=True)
class GroupRule:
    """One parameter group's rule: step η·``lr_factor``, moving in updates ``start`` <= t <
    ``stop`` (0-based; stop None: to the end), weight decay λ = ``weight_decay``."""

    lr_factor: float = 1.0
    start: int = 0
    stop: int | None = None
    weight_decay: float = 0.0

    def moving(self, t) -> Any:
        """Does the group move at update t? True, or a traced bool when it has a range."""
        if self.start == 0 and self.stop is None:
            return True
        on = jnp.asarray(t) >= self.start
        return on if self.stop is None else on & (jnp.asarray(t) < self.stop)


def default_groups() -> tuple[tuple[str, GroupRule], ...]:
    return tuple((g, GroupRule()) for g in parts.GROUPS)


@dataclass(frozen=True)
class Rules:
    """The step's rules beyond the plain one (static, hashable): the groups' rules (by group
    name, ``dynamics.parts.GROUPS``), the optimiser's weight-decay and normalisation rules, and
    the constraint (a name of ``dynamics.parts.CONSTRAINTS``)."""

    groups: tuple[tuple[str, GroupRule], ...] = field(default_factory=default_groups)
    decoupled: bool = False
    normalise: bool = False
    constraint: str = "none"
    ngd_eps: float = 0.0  # normalised GD: g / (‖g‖ + ε) instead of g / ‖g‖
    ngd_per_group: bool = False  # normalised GD: each group (readout, attention) on its own
    weight_decay: float = 0.0  # λ on every parameter, coupled (in the gradient) for every optimiser

    @property
    def plain(self) -> bool:
        """Nothing but the plain step: every group at its defaults, no normalisation, no constraint."""
        return (
            all(r == GroupRule() for _, r in self.groups)
            and not self.weight_decay
            and not self.normalise
            and not parts.CONSTRAINTS.get(self.constraint).params
        )

    def rule(self, name: str) -> GroupRule:
        """The rule of parameter ``name``'s group."""
        group = next((g for g, names in parts.GROUPS.items() if name in names), None)
        if group is None:
            raise ValueError(f"parameter {name!r} is in no group of {parts.GROUPS}")
        return dict(self.groups).get(group, GroupRule())


def tangent(params: Params, grads: Params, names: tuple[str, ...]) -> Params:
    """The gradients of the per-head vectors ``names`` (rows of (S, d)) without their radial
    part: g − (g·θ̂)θ̂, θ̂ = θ/‖θ‖ (a zero θ leaves g as it is)."""
    out = dict(grads)
    for k in names:
        if k in params:
            unit = unit_rows(params[k])
            out[k] = grads[k] - jnp.sum(grads[k] * unit, axis=-1, keepdims=True) * unit
    return out


def project_sphere(params: Params, names: tuple[str, ...] = ("U", "k")) -> Params:
    """U_h and k_h (rows of (S, d)) back on the unit sphere; a zero row (an empty slot) stays 0."""
    return {k: unit_rows(v) if k in names else v for k, v in params.items()}


def normalise(
    grads: Params, member: jax.Array | None = None, eps: float = 0.0, per_group: bool = False
) -> Params:
    """g / ‖g‖ with the norm over each run's parameters: ``member`` (S, R) says which head slots
    (the leading axis) make up run r, a per-run parameter (``parts.PER_RUN_PARAMS``, shape (R,))
    counts for its run; None: one run, every parameter. Selects, not products: a run's NaN never
    reaches another. A zero gradient stays zero (no division by 0).

    A run whose largest |g| (M) lies in ``_plain_range`` takes ‖g‖ = √Σg² as written; outside
    it the norm is taken of g / M and g / M is divided by it, so no square underflows (a float32
    gradient of 1e-25 still gives a unit step) or overflows. ``eps`` > 0: g / (‖g‖ + ε) instead,
    always in the scaled form (a division guard that shrinks the steps once ‖g‖ nears ε).
    ``per_group``: each parameter group (``parts.GROUPS``: readout, attention) normalised on
    its own, so each moves a unit step."""
    if per_group:
        out = {}
        for names in parts.GROUPS.values():
            part = {k: g for k, g in grads.items() if k in names}
            out.update(normalise(part, member, eps) if part else {})
        return out
    scaled, top = _normalise_scaled(grads, member, eps)
    if eps:
        return scaled
    plain = _normalise_plain(grads, member)
    safe = plain_holds(top)  # () or (R,)
    out = {}
    for k, g in grads.items():
        ok = safe if member is None or k in parts.PER_RUN_PARAMS else jnp.any(member & safe[None, :], axis=1)
        out[k] = jnp.where(per_head(ok, g), plain[k], scaled[k])
    return out


def _normalise_plain(grads: Params, member: jax.Array | None) -> Params:
    """g / √Σg² per run, the squares taken as they are (exact unless M is outside ``_plain_range``)."""
    if member is None:
        total = sum(jnp.sum(g * g) for g in grads.values())
        norm = jnp.sqrt(total)
        return {k: g / jnp.where(norm > 0, norm, 1.0) for k, g in grads.items()}
    sq = jnp.zeros(member.shape[1], next(iter(grads.values())).dtype)
    for k, g in grads.items():
        per = jnp.sum(g * g, axis=tuple(range(1, g.ndim)))
        sq = sq + (
            per if k in parts.PER_RUN_PARAMS else jnp.sum(jnp.where(member, per[:, None], 0.0), axis=0)
        )
    run_norm = jnp.sqrt(sq)  # (R,)
    slot_norm = jnp.sum(jnp.where(member, run_norm[None, :], 0.0), axis=1)  # (S,); 0 for an empty slot
    out = {}
    for k, g in grads.items():
        norm = run_norm if k in parts.PER_RUN_PARAMS else slot_norm
        out[k] = g / per_head(jnp.where(norm > 0, norm, 1.0), g)
    return out


def _normalise_scaled(grads: Params, member: jax.Array | None, eps: float) -> tuple[Params, jax.Array]:
    """(g / ‖g‖ from g / M and ‖g / M‖, M per run (() or (R,)): no square under- or overflows."""
    if member is None:
        scale = jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in grads.values()]))  # M
        per = {k: g / jnp.where(scale > 0, scale, 1.0) for k, g in grads.items()}
        root = jnp.sqrt(sum(jnp.sum(g * g) for g in per.values()))  # ‖g / M‖ >= 1, or 0
        return {k: _unit(g, root, scale, eps) for k, g in per.items()}, scale
    R = member.shape[1]
    top = jnp.zeros(R, next(iter(grads.values())).dtype)
    for k, g in grads.items():  # M_r: the largest |g| of each run
        per = jnp.max(jnp.abs(g), axis=tuple(range(1, g.ndim)))
        top = jnp.maximum(top, per if k in parts.PER_RUN_PARAMS else _slots_to_runs(per, member, jnp.max))
    scale = {k: _runs_to(top, k, member) for k in grads}
    scaled = {k: g / per_head(jnp.where(scale[k] > 0, scale[k], 1.0), g) for k, g in grads.items()}
    sq = jnp.zeros(R, top.dtype)
    for k, g in scaled.items():
        per = jnp.sum(g * g, axis=tuple(range(1, g.ndim)))
        sq = sq + (per if k in parts.PER_RUN_PARAMS else _slots_to_runs(per, member, jnp.sum))
    root = jnp.sqrt(sq)  # (R,)
    out = {
        k: _unit(g, per_head(_runs_to(root, k, member), g), per_head(scale[k], g), eps)
        for k, g in scaled.items()
    }
    return out, top


def _slots_to_runs(per_slot: jax.Array, member: jax.Array, reduce) -> jax.Array:
    """(S,) -> (R,): ``reduce`` (sum, max of values >= 0) over each run's slots (a select)."""
    return reduce(jnp.where(member, per_slot[:, None], 0.0), axis=0)


def _runs_to(per_run: jax.Array, name: str, member: jax.Array) -> jax.Array:
    """A per-run value (R,) as parameter ``name`` needs it: per run, or per slot (0 if empty)."""
    if name in parts.PER_RUN_PARAMS:
        return per_run
    return jnp.sum(jnp.where(member, per_run[None, :], 0.0), axis=1)


def _unit(scaled: jax.Array, root: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
    """g / ‖g‖ from g / M and ‖g / M‖ (0 stays 0), or g / (‖g‖ + ε) for ``eps`` > 0."""
    if eps:
        return scaled / (root + eps / jnp.where(scale > 0, scale, 1.0))
    return scaled / jnp.where(root > 0, root, 1.0)


def _steps(params: Params, lr: Any) -> dict[str, Any]:
    return dict(lr) if isinstance(lr, Mapping) else dict.fromkeys(params, lr)


def update(
    params: Params,
    grads: Params,
    state: optax.OptState,
    opt: optax.GradientTransformation,
    lr: Any,
    rules: Rules | None = None,
    t: Any = 0,
    member: jax.Array | None = None,
) -> tuple[Params, optax.OptState]:
    """One step: the direction of ``grads`` under ``opt`` (its state advanced), then ``descend``;
    with ``rules`` (not plain) the eight steps of the module docstring at update ``t``, the
    normalisation per run of ``member`` (S, R)."""
    if rules is None or rules.plain:
        d, state = opt.update(grads, state, params)
        return descend(params, d, lr), state
    rule = {k: rules.rule(k) for k in params}
    moving = {k: r.moving(t) for k, r in rule.items()}
    if rules.weight_decay:  # never added at 0: a run without it keeps its numbers to the bit
        grads = {k: g + rules.weight_decay * params[k] for k, g in grads.items()}
    if not rules.decoupled:
        grads = {
            k: g + rule[k].weight_decay * params[k] if rule[k].weight_decay else g for k, g in grads.items()
        }
    if rules.normalise:  # a group that never moves (step factor 0) adds nothing to the norm
        moving = {k: False if rule[k].lr_factor == 0 else m for k, m in moving.items()}
    grads = {k: jnp.where(moving[k], g, 0.0) if moving[k] is not True else g for k, g in grads.items()}
    sphere = parts.CONSTRAINTS.get(rules.constraint, "constraint").params
    grads = tangent(params, grads, sphere)
    if rules.normalise:
        grads = normalise(grads, member, rules.ngd_eps, rules.ngd_per_group)
    d, state = opt.update(grads, state, params)
    if rules.decoupled:
        d = {k: v + rule[k].weight_decay * params[k] if rule[k].weight_decay else v for k, v in d.items()}
    steps = _steps(params, lr)
    steps = {k: steps[k] * rule[k].lr_factor if rule[k].lr_factor != 1.0 else steps[k] for k in params}
    new = descend(params, d, steps)
    new = {k: v if moving[k] is True else jnp.where(moving[k], v, params[k]) for k, v in new.items()}
    if parts.CONSTRAINTS.get(rules.constraint).params:  # a manifold to project back on
        new = parts.CONSTRAINTS.get(rules.constraint).load()(new, sphere)
    return new, state
