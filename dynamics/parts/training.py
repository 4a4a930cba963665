"""The training's parts: losses (with their task), optimisers and the step size's H-scaling.
Metadata only (no JAX); losses' math is in ``dynamics.core.losses``, optimisers are optax's.

Rules the engine relies on:

- a loss is a function of each example's margin z = yΦ (classification) or residual r = Φ − y
  (regression: ``Loss.task``), so the fast path holds for any loss;
- ``Optimizer.per_coordinate``: the optimiser's state and update act coordinate by coordinate
  (GD, Adam), so a representative head fed the per-head gradient g = ∇L̃/H makes exactly the
  update each of the H identical heads makes (eps included). An optimiser that mixes coordinates
  (a global norm, say) would void the fast path: ``per_coordinate=False`` turns it off.
- ``LrScaling.exponent`` p: η(H) = η₀ · H^p for every optimiser, Adam included.
"""

from __future__ import annotations

import dataclasses

from dynamics.parts.registry import Part, Registry

_LOSSES = "dynamics.core.losses"


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
        Optimizer("adam", "Adam with optax's defaults", "optax:scale_by_adam", label="Adam"),
    ),
)
LR_SCALINGS: Registry[LrScaling] = Registry(
    "step-size scaling",
    "optim.lr_scaling",
    (
        LrScaling("constant", "η(H) = η₀", label=" (constant)", exponent=0.0),
        LrScaling("sqrt", "η(H) = η₀·√H", label="·√H", exponent=0.5),
        LrScaling("linear", "η(H) = η₀·H", label="·H", exponent=1.0),
    ),
)
