"""The training's parts: losses (with their task), optimisers, the step size's H-scaling,
SGD's batch sampling and the parameter constraints; and the two parameter groups. Metadata
only (no JAX); losses' math is in ``dynamics.core.losses``, optimisers are optax's, the step's
rules (groups, normalisation, constraint) are ``dynamics.core.update``'s.

Rules the engine relies on:

- a loss is a function of each example's margin z = yΦ (classification) or residual r = Φ − y
  (regression: ``Loss.task``), so the fast path holds for any loss;
- ``Optimizer.per_coordinate``: the optimiser's state and update act coordinate by coordinate
  (GD, Adam), so a representative head fed the per-head gradient g = ∇L̃/H makes exactly the
  update each of the H identical heads makes (eps included). An optimiser that mixes coordinates
  (a global norm, say) would void the fast path: ``per_coordinate=False`` turns it off.
- ``LrScaling.exponent`` p: η(H) = η₀ · H^p for every optimiser (GD, SGD, normalised GD and
  Adam alike): the step size η(H) is what every optimiser's direction is multiplied by.
- ``Optimizer.minibatch`` (SGD): each update's gradient is the mean over B training examples
  chosen by a ``Sampling`` from the *trial's* key and the step number alone, so a run's batches
  are the same whatever shares its pack, the devices or ``--resume``, and every run of a pack
  (one trial) uses the same batch. The logged train loss is still the full training set's. The
  batch is the same for every head, so the fast path holds (SGD is per coordinate).
- ``Optimizer.normalise_per_run`` (normalised GD): the gradient divided by its Euclidean norm
  over one run's parameters (all its heads, both groups), never across the runs of a pack; an
  exactly zero gradient (no direction) gives a zero step, reported by the sweep. Not per
  coordinate: no fast path.
- ``Optimizer.decoupled_weight_decay``: weight decay λ acts as AdamW's, θ ← θ − η·(d + λθ)
  (Adam); otherwise it is the L2 term λ/2·‖θ_group‖² added to the loss, so λθ is added to the
  gradient before the direction (GD, SGD, and normalised GD before the normalisation).
  ``optim.weight_decay`` λ is the L2 term on every parameter for every optimiser (Adam's too, as
  torch's coupled ``weight_decay``), added to the gradient before anything else of the step.
- parameter groups (``GROUPS``, by parameter name): readout {U, b} and attention {W, Q, K, k},
  each with a step factor (η·factor), a range of updates [start, stop) in which it moves, and
  a weight decay λ. Outside its range a group's gradient is replaced by 0 (Adam's moments then
  decay towards 0 and its count goes on) and its parameters are kept exactly. All three are
  per coordinate, so the fast path holds with them.
- ``Constraint`` ``sphere``: the gradient of U_h (and k_h) loses its radial part
  (g − (g·θ̂)θ̂, the Riemannian gradient; every optimiser is fed it), and after each update
  U_h (and k_h) are projected back to the unit sphere. Per head: a stored head of weight H is
  projected as each of its heads would be.
"""

from __future__ import annotations

import dataclasses

from dynamics.parts.registry import Part, Probe, Registry

_LOSSES = "dynamics.core.losses"
_PROBES = "dynamics.parts.probes"


@dataclasses.dataclass(frozen=True)
class Loss(Part):
    """ℓ of one example: ``impl`` maps margins z = y·Φ (``task`` "classification") or residuals
    r = Φ − y (``task`` "regression") to losses, elementwise."""

    task: str = "classification"


@dataclasses.dataclass(frozen=True)
class Optimizer(Part):
    """``impl``: a factory of the optax transformation without its step size (the direction);
    the engine multiplies by −η per head slot, as ``optax.scale_by_learning_rate`` would."""

    per_coordinate: bool = True
    minibatch: bool = False  # the gradient of B examples per update (optim.batch_size, optim.sampling)
    normalise_per_run: bool = False  # the gradient divided by its norm over each run's parameters
    decoupled_weight_decay: bool = False  # weight decay as AdamW's (else an L2 term in the gradient)


@dataclasses.dataclass(frozen=True)
class Sampling(Part):
    """Which B training examples an SGD update uses: ``impl`` maps (data, key, t, B) to the
    batch (X, y), from the trial's batch key and the update t alone (``dynamics.core.sampling``).
    ``fresh``: the B examples are drawn anew from the trial's world by its data model's ``sample``
    at every update (online SGD; the engine calls it, ``impl`` is unused): the data model must have
    a world (not a file), and the logged training metrics are those of the next update's batch."""

    fresh: bool = False
    whole_epochs: bool = False  # every example once per epoch: B must divide n


@dataclasses.dataclass(frozen=True)
class Constraint(Part):
    """A manifold the parameters ``params`` stay on (``impl`` the projection after each update)."""

    params: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Reduction(Part):
    """How the training objective reduces the examples' losses: ``impl`` maps (z (n,) or (n, o),
    the loss's name) to one number. ``sums``: the objective grows with n (a step of its gradient is
    n times the mean's), where normalised GD without decay or ε sees the same direction."""

    sums: bool = False


@dataclasses.dataclass(frozen=True)
class LrScaling(Part):
    exponent: float = 0.0  # η(H) = η₀ · H^exponent


LOSSES: Registry[Loss] = Registry(
    "loss",
    "optim.loss",
    (
        Loss("logistic", "log(1 + e^{-z}); smooth and Lipschitz", f"{_LOSSES}:logistic"),
        Loss("exp", "e^{-z}; can overflow on a large negative margin", f"{_LOSSES}:exponential"),
        Loss("hinge2", "max(0, 1 - z)²; exactly zero past margin 1", f"{_LOSSES}:squared_hinge"),
        Loss("square", "(1 - z)²: the square loss of ±1 labels, (y - Φ)²", f"{_LOSSES}:square"),
        Loss("mse", "(Φ - y)² of real targets y (regression)", f"{_LOSSES}:squared_error", task="regression"),
    ),
    probe=Probe(
        "loss(z) on a vector z of 7 margins, and on each alone",
        "a real vector ℓ(z) of z's shape, elementwise (mhsim averages)",
        f"{_PROBES}:loss",
    ),
)
TASKS = ("classification", "regression")  # the order the loss registry lists each task's first loss


def default_loss(task: str) -> str:
    """The first registered loss of ``task``: logistic for classification, mse for regression."""
    return next(name for name, loss in LOSSES.items() if loss.task == task)


OPTIMIZERS: Registry[Optimizer] = Registry(
    "optimizer",
    "optim.optimizer",
    (
        Optimizer("gd", "full-batch gradient descent", "optax:identity", label="GD"),
        Optimizer(
            "adam",
            "Adam with optax's defaults",
            "optax:scale_by_adam",
            label="Adam",
            decoupled_weight_decay=True,
        ),
        Optimizer(
            "sgd",
            "mini-batch SGD: B examples per update (--batch-size, --sampling)",
            "optax:identity",
            label="SGD",
            minibatch=True,
        ),
        Optimizer(
            "normalized-gd",
            "GD along g/‖g‖, the norm over each run's parameters",
            "optax:identity",
            label="normalised GD",
            per_coordinate=False,
            normalise_per_run=True,
        ),
        Optimizer(
            "adam-minibatch",
            "Adam with optax's defaults on B examples per update (--batch-size, --sampling), as "
            "stochastic training runs it",
            "optax:scale_by_adam",
            label="Adam (mini-batch)",
            minibatch=True,
            decoupled_weight_decay=True,
        ),
    ),
    probe=Probe(
        "optimizer(), then its init(params) and update(grads, state, params) on U (H, d), W (H, d, d)",
        "an optax GradientTransformation whose update gives (a direction of each parameter's shape, state)",
        f"{_PROBES}:optimizer",
    ),
)
_SAMPLING = "dynamics.core.sampling"
SAMPLINGS: Registry[Sampling] = Registry(
    "sampling",
    "optim.sampling",
    (
        Sampling(
            "epoch",
            "a fresh permutation of the n examples per epoch, consecutive batches of it (B divides n)",
            f"{_SAMPLING}:epoch_batch",
            whole_epochs=True,
        ),
        Sampling(
            "replace", "B examples drawn with replacement at every update", f"{_SAMPLING}:replace_batch"
        ),
        Sampling(
            "online",
            "B fresh examples from the data model at every update (no training set is reused)",
            fresh=True,
        ),
    ),
    probe=Probe(
        "sampling(data, key, t, B) with B = 2 of n = 4 examples, t traced",
        "the batch (X (B, T, d), y (B,)) of real arrays",
        f"{_PROBES}:sampling",
    ),
)
CONSTRAINTS: Registry[Constraint] = Registry(
    "constraint",
    "optim.constraint",
    (
        Constraint("none", "the parameters move freely"),
        Constraint(
            "sphere",
            "U_h and k_h on the unit sphere: Riemannian gradient, then projected back after each update",
            "dynamics.core.update:project_sphere",
            params=("U", "k"),
        ),
    ),
    probe=Probe(
        "project(params, names) on a dict of U, b and the parameters it holds",
        "the dict with each array of its shape, those it holds projected",
        f"{_PROBES}:constraint",
        declares=("params",),
        why="a constraint declares params, the tuple of parameters it holds (e.g. ('U', 'k')); "
        "without it nothing is held and its projection is never called",
    ),
)
REDUCTIONS: Registry[Reduction] = Registry(
    "reduction",
    "optim.reduction",
    (
        Reduction("mean", "the mean of the examples' losses (1/n)Σ_i ℓ_i", f"{_LOSSES}:mean_loss"),
        Reduction(
            "sum",
            "the sum Σ_i ℓ_i over the examples (or SGD's batch), as torch's reduction='sum'",
            f"{_LOSSES}:summed_loss",
            sums=True,
        ),
    ),
    probe=Probe(
        "reduction(z, loss) on 7 residuals under the loss 'mse'",
        "the objective: one finite real number",
        f"{_PROBES}:reduction",
    ),
)
# The parameter groups, by parameter name (a name in neither is an error of the step rules).
GROUPS: dict[str, tuple[str, ...]] = {"readout": ("U", "b", "V", "O"), "attention": ("W", "Q", "K", "k", "a")}
# Parameters with one value per run of a pack (shape (R,)), not one per head slot.
PER_RUN_PARAMS = ("b",)
LR_SCALINGS: Registry[LrScaling] = Registry(
    "step-size scaling",
    "optim.lr_scaling",
    (
        LrScaling("constant", "η(H) = η₀", label=" (constant)", exponent=0.0),
        LrScaling("sqrt", "η(H) = η₀·√H", label="·√H", exponent=0.5),
        LrScaling("linear", "η(H) = η₀·H", label="·H", exponent=1.0),
    ),
    probe=Probe(
        check=f"{_PROBES}:lr_scaling",
        declares=("exponent",),
        why="a step-size scaling declares a finite real `exponent` p (η(H) = η₀·H^p), read, never called",
    ),
)
