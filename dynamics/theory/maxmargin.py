"""The max-margin view of a run along training, from its saved parameters (``sweep.save_params``).

For each trial of a one-head sweep with the query ``first``, ``last`` or ``learned``: the tokens
the model selects (the argmax of its attention in each training example) at the final logged
step, or the data's own relevant tokens (``selection="mask"``); the max-margin solution for that
selection (W^mm, ``diagnostics.max_margin_W``; p^mm for a learned query,
``diagnostics.max_margin_p``); and at every logged step corr(θ, θ^mm) = ⟨θ, θ^mm⟩/(‖θ‖‖θ^mm‖)
(Frobenius), the mean attention on the selected tokens and ‖θ‖ — the quantities of Tarzanagh,
Li, Thrampoulidis, Oymak's figures. Computed in float64 numpy from the saved float32/64
parameters and the trial's data (``core.data.trial_data``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dynamics.errors import ConfigError
from dynamics.theory import diagnostics as dg

SELECTIONS = ("final", "mask")


class Alignment(NamedTuple):
    """Per trial (rows) and logged step (columns): corr(θ, θ^mm), the mean attention on the
    selected tokens, ‖θ‖; the selection used and each trial's selected tokens (trials, n)."""

    corr: np.ndarray  # (trials, L)
    selected_prob: np.ndarray  # (trials, L)
    norm: np.ndarray  # (trials, L)
    selection: str
    selected: np.ndarray  # (trials, n) int
    parameter: str  # "W" or "k"


def _scores(theta: np.ndarray, X: np.ndarray, query: str) -> np.ndarray:
    """Scores (L, n, T) of θ at each logged step: x_tᵀ W x_q, or x_tᵀ k for a learned query."""
    if query == "learned":
        return np.einsum("ntd,ld->lnt", X, theta)
    x_q = X[:, 0] if query == "first" else X[:, -1]
    return np.einsum("ntd,lde,ne->lnt", X, theta, x_q)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def alignment(result, selection: str = "final") -> Alignment:
    """The max-margin view of every trial of ``result`` (a ``SweepResult`` or its folder, run
    with ``save_params`` and one H of 1): see the module docstring."""
    from dynamics.api import load_results
    from dynamics.core.data import trial_data

    result = result if hasattr(result, "curves") else load_results(result)
    cfg = result.config
    if selection not in SELECTIONS:
        raise ConfigError(f"selection={selection!r}; allowed: {', '.join(SELECTIONS)}")
    query = cfg.model.query
    name = "k" if query == "learned" else "W"
    if f"param_{name}" not in result.curves or query == "all" or tuple(cfg.sweep.heads) != (1,):
        raise ConfigError(
            "the max-margin view needs a sweep of one head (heads=(1,)) with the query first, last or "
            f"learned and save_params=True; got heads={list(cfg.sweep.heads)}, query={query!r}"
        )
    theta = np.asarray(result.curves[f"param_{name}"], np.float64)[0, :, :, 0]  # (trials, L, …)
    trials, L = theta.shape[:2]
    out = {k: np.full((trials, L), np.nan) for k in ("corr", "prob", "norm")}
    chosen = []
    for t in range(trials):
        data = trial_data(cfg, t)
        X = np.asarray(data.X_train, np.float64)
        A = _softmax(_scores(theta[t], X, query))  # (L, n, T)
        if selection == "mask":
            if data.mask_train is None:
                raise ConfigError("selection='mask' needs data whose relevant tokens are known")
            sel = np.argmax(np.asarray(data.mask_train), axis=1)
        else:
            sel = np.argmax(A[-1], axis=1)
        chosen.append(sel)
        mm = dg.max_margin_p(X, sel) if name == "k" else dg.max_margin_W(X, sel, query).W
        flat = theta[t].reshape(L, -1)
        norm = np.linalg.norm(flat, axis=1)
        out["norm"][t] = norm
        with np.errstate(invalid="ignore", divide="ignore"):
            out["corr"][t] = flat @ mm.reshape(-1) / (norm * np.linalg.norm(mm))
        out["prob"][t] = np.take_along_axis(A, sel[None, :, None], axis=2)[..., 0].mean(axis=1)
    return Alignment(out["corr"], out["prob"], out["norm"], selection, np.array(chosen), name)
