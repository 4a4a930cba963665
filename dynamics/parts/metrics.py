"""The logged metrics' names, per task (no JAX: the command line's tables read them too).

A classification run logs the losses, 0-1 errors and the smallest train margin; a regression run
logs the losses (the train and test MSE) and the excess risk, test MSE less the data model's noise
floor (NaN where unknown), and no error or margin. Both log the parameter norms, head diversity
and attention on the relevant tokens (NaN where they are unknown).
"""

from __future__ import annotations

METRICS = (
    "train_loss",
    "test_loss",
    "train_error",
    "test_error",
    "margin",
    "u_norm",
    "w_norm",
    "diversity",
    "attn_relevant",
)  # a classification run's
REGRESSION_METRICS = (
    "train_loss",
    "test_loss",
    "excess_risk",
    "u_norm",
    "w_norm",
    "diversity",
    "attn_relevant",
)
SUMMARY_METRICS = ("train_loss", "test_loss", "train_error", "test_error", "excess_risk")  # those it logs
COLUMN_TITLES = {  # the result tables' column of each summary metric
    "train_loss": "train loss",
    "test_loss": "test loss",
    "train_error": "train err",
    "test_error": "test err",
    "excess_risk": "excess risk",
}


def metric_names(task: str, noise_floor: bool = True) -> tuple[str, ...]:
    """The metrics a run of this task logs ("classification" or "regression"); regression logs the
    excess risk only where the data's noise floor is known (``noise_floor``)."""
    if task != "regression":
        return METRICS
    return REGRESSION_METRICS if noise_floor else tuple(m for m in REGRESSION_METRICS if m != "excess_risk")


def metrics_of(cfg) -> tuple[str, ...]:
    """The metrics a run of the (validated) config ``cfg`` logs: its loss's task, and whether its data
    model knows its noise floor (data from a file do not)."""
    from dynamics.parts.data import DATA_MODELS
    from dynamics.parts.training import LOSSES

    model = DATA_MODELS[cfg.data.model]
    known = getattr(model, "noise_floor_known", not model.from_file)
    return metric_names(LOSSES[cfg.optim.loss].task, known)


HEAD_METRICS_AUTO_MAX = 16  # "auto" logs the per-head metrics up to this many heads


def head_metrics_on(cfg) -> bool:
    """``sweep.head_metrics``: "on", "off", or "auto" (on where the sweep's largest H is at most
    ``HEAD_METRICS_AUTO_MAX``: the head–head matrices grow as H² per logged step)."""
    mode = cfg.sweep.head_metrics
    return mode == "on" or (mode == "auto" and max(cfg.sweep.heads) <= HEAD_METRICS_AUTO_MAX)
