"""What one compiled program of the engine is: the static ``Program`` (everything that fixes
its shapes and code; hashable), the traced ``Batch`` of its packs, and ``Pack``, how one batch
element's S head slots make up its R runs.

Packs. Slot s holds head ``slot_head[s]`` of run ``slot_run[s]`` (or is empty). The forward
pass computes every slot's head output f_s(X) in the same contractions, then each run's
Φ_r = c_{H_r} · Σ_{s in r} weight_s · f_s(X) with a select per (slot, run), so nothing of
one run — a NaN of a diverging run included — reaches another. The objective Σ_r L_r has,
for each slot, exactly its own run's gradient; the step size is applied per slot. So a
run in a pack is the run alone up to float rounding (the contractions' shapes differ), and
runs of different H share one program: one compile for a whole random-init sweep, no head
padding (``sweep.pack_runs`` packs them first-fit decreasing).

- Fast path (θ(0) = 0, full key-query): one slot per run (S = R = 1) of weight H. With
  zero init every head gets the same gradient at every step (docs/model.md), so all H heads stay
  equal to one
  representative head θ. Write L̃(θ) = L(θ, …, θ) for the loss as a function of the common
  value; by the chain rule ∇L̃ = Σ_h ∂L/∂θ_h = H·g, where g is the gradient each head
  receives in the H-head model. The engine feeds the optimiser g = ∇L̃ / H, the exact
  per-head gradient, so:
    * GD: θ ← θ − η·g, the same update every head makes.
    * Adam (optax defaults: b1 = 0.9, b2 = 0.999, eps = 1e-8, eps_root = 0): all state is
      per coordinate, m ← b1·m + (1−b1)·g, v ← b2·v + (1−b2)·g², θ ← θ − η·m̂/(√v̂ + eps).
      Every head's coordinates see the same sequence g, so they hold the same m, v and make
      the same update, and the representative head fed g reproduces it, eps included.
      (Feeding ∇L̃ = H·g instead would not be exact: m̂/(√v̂ + eps) would become
      m̂/(√v̂ + eps/H), a different eps for each H — which is why the gradient is divided.)
  The only difference to the H-head computation is float rounding (a sum of H equal terms
  versus H times one term). H enters as a traced scalar, so every H shares one compile.
- Full path: every run has its H heads in H slots, weight 1 (empty slots: weight 0, never
  read). Random init draws head h of a run from ``fold_in(key, h)`` (``inits.init_params``),
  so a run starts the same whatever shares its pack.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dynamics import parts
from dynamics.core import update as upd


class Batch(NamedTuple):
    """B batch elements of one program; every field has the batch axis first.

    An element is one *pack*: R runs of one trial (same data) whose heads fill the program's
    S head slots. Slot s belongs to run ``slot_run[s]`` (R for an empty slot) and is head
    ``slot_head[s]`` of that run. Runs without slots are padding.
    """

    trial: jax.Array  # (B,) int32: which trial's data (ignored when the data is shared)
    key: jax.Array  # (B, R, 2) uint32: each run's init key (head h draws from fold_in(key, h))
    n_heads: jax.Array  # (B, R) float: H
    lr: jax.Array  # (B, R) float: the step size η(H)
    init_scale: jax.Array  # (B, R) float: σ₀ of a normal init
    slot_run: jax.Array  # (B, S) int32: the run of each head slot, R = empty
    slot_head: jax.Array  # (B, S) int32: the slot's head index within its run
    data_key: jax.Array  # (B, 2) uint32: the trial's key, its data drawn from it (SGD's batches too)
    start: dict | None = None  # θ(0) from a file: {name: (B, S, …)}, "b" (B, R); None: the init's


@dataclass(frozen=True)
class Program:
    """Everything that fixes the compiled program's shapes and code (hashable, static)."""

    slots: int  # S head slots per pack (1 on the fast path)
    runs: int  # R runs per pack (1 on the fast path)
    fast_path: bool  # one stored head of weight H (zero init) instead of H heads
    d: int
    query: str
    norm: str
    key_query: str
    head_size: str | int
    init: str
    optimizer: str
    loss: str
    segments: tuple[int, ...]  # steps before each logged step: (0, s_1 − 0, s_2 − s_1, …)
    attention: str = "softmax"  # the activation over a query's scores (dynamics.parts.ACTIVATIONS)
    bias: bool = False  # a learned scalar b per run added to Φ (never divided by H)
    init_from: bool = False  # θ(0) is given (``Batch.start``), not drawn
    head_metrics: bool = False  # log the per-head metrics (``dynamics.core.heads``), per slot
    save_params: bool = False  # log θ itself ("param_<name>": per slot; the bias per run)
    temperature: float = 1.0  # β₀: the scores are multiplied by β_t = β₀ / (1 + c·t)
    temperature_decay: float = 0.0  # c
    batch_size: int = 0  # B examples per update (SGD); 0: the full training set
    sampling: str = "epoch"  # how SGD picks its B examples (dynamics.parts.SAMPLINGS)
    # online sampling: the data model whose ``sample`` draws each batch from ``Data.world``, as a
    # static reference equal only to the same object (``dynamics.core.data.ModelRef``); else None
    sampler: Any = None
    groups: tuple[tuple[str, upd.GroupRule], ...] = dataclasses.field(default_factory=upd.default_groups)
    constraint: str = "none"  # dynamics.parts.CONSTRAINTS
    ngd_eps: float = 0.0  # normalised GD: g / (‖g‖ + ε) (0: g / ‖g‖)
    ngd_per_group: bool = False  # normalised GD: readout and attention each normalised on its own
    weight_decay: float = 0.0  # λ on every parameter, in the gradient for every optimiser (Adam too)
    reduction: str = "mean"  # the objective over the examples (dynamics.parts.REDUCTIONS)
    output: str = "pooled"  # "sequence": no readout U, every token its own output (value identity)
    # the user's metrics (``dynamics.core.hooks``): ``MetricRef``s, each equal only to itself; a
    # program with any runs one run of ``metric_heads`` = H heads per pack (H static)
    user_metrics: tuple = ()
    metric_heads: int = 0
    # the per-head view (per-head metrics, snapshots): the positions among the logged steps where it
    # is logged (``dynamics.parts.metrics.head_indices``), and whether with the head–head matrices
    head_log: tuple[int, ...] = ()
    head_sims: bool = False
    readout: str = "direct"  # U_h learned, or its factors V_h, O_h (dynamics.parts.READOUTS)

    @property
    def head_view(self) -> bool:
        return bool(self.head_log) and (self.head_metrics or self.save_params)

    # positional attention: the logit each position reads (copies sharing one logit), () for one each
    tied_positions: tuple[int, ...] = ()
    # log the train and test loss only (``sweep.log`` losses): the logged steps compute nothing else
    losses_only: bool = False

    def rules(self) -> upd.Rules:
        """The step's rules: the groups', the optimiser's (weight decay, normalisation), the constraint."""
        opt = parts.OPTIMIZERS[self.optimizer]
        return upd.Rules(
            self.groups, opt.decoupled_weight_decay, opt.normalise_per_run, self.constraint,
            self.ngd_eps, self.ngd_per_group, self.weight_decay,
        )  # fmt: skip

    def beta(self, t) -> float | jax.Array:
        """β of update t (0-based; a traced step, or a number): β₀ / (1 + c·t). A number when
        the temperature is constant, so β = 1 leaves the scores untouched (the same program)."""
        if self.temperature_decay == 0.0:
            return self.temperature
        return self.temperature / (1.0 + self.temperature_decay * t)


class Pack(NamedTuple):
    """How one batch element's S head slots make up its R runs (traced arrays)."""

    member: jax.Array  # (S, R) bool: slot s is a head of run r
    weight: jax.Array  # (S,) float: H on the fast path (one head standing for H), else 1; 0 if empty
    n_heads: jax.Array  # (R,) float: H of each run
    real: jax.Array  # (R,) bool: the run has heads (not padding)


def make_pack(prog: Program, slot_run: jax.Array, n_heads: jax.Array) -> Pack:
    member = slot_run[:, None] == jnp.arange(prog.runs)[None, :]  # (S, R)
    if prog.fast_path:
        weight = jnp.sum(jnp.where(member, n_heads[None, :], 0.0), axis=1)  # (S,): H of its run
    else:
        weight = jnp.any(member, axis=1).astype(n_heads.dtype)
    return Pack(member, weight, n_heads, jnp.any(member, axis=0))


def single_run_pack(prog: Program, n_heads: jax.Array) -> Pack:
    """The pack of one run (R = 1) of H = ``n_heads``: slots 0..H−1, or one slot of weight H."""
    n_heads = jnp.reshape(n_heads, (1,))
    if prog.fast_path:
        return make_pack(prog, jnp.zeros((prog.slots,), jnp.int32), n_heads)
    slot_run = jnp.where(jnp.arange(prog.slots) < n_heads[0], 0, 1).astype(jnp.int32)
    return make_pack(prog, slot_run, n_heads)


def per_run(pack: Pack, per_slot: jax.Array) -> jax.Array:
    """(..., S) -> (..., S, R): each slot's value in its run's column, exact 0 elsewhere (a
    select, not a product: a non-finite value of one run never reaches another)."""
    member = pack.member.reshape((1,) * (per_slot.ndim - 1) + pack.member.shape)
    return jnp.where(member, per_slot[..., None], 0.0)
