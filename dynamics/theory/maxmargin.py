"""The max-margin view of a run along training, from its saved parameters (``sweep.save_params``).

For each trial of a one-head sweep with the query ``first``, ``last``, ``outside`` (x_T queries the
keys x_1…x_{T−1}), ``learned`` or ``position``: the tokens the model selects (the argmax of its
attention in each training example) at the final logged step, or the data's own relevant tokens
(``selection="mask"``; for the query outside, among the keys); the max-margin solution for
that selection (W^mm, ``svm.max_margin_W``; p^mm for a learned query,
``svm.max_margin_p``; for the position logits a^mm, the p^mm of one-hot position tokens,
feasible only where every example selects the same position, else NaN), of least Frobenius norm
(Tarzanagh et al.'s SVM) or with ``norm="nuc"`` (``sweep.maxmargin_norm``) of least nuclear norm
(the same p^mm: a vector's two norms agree); and at every step with a snapshot (the per-head
view's steps: every logged step up to ``HEAD_POINTS`` of them, else ``sweep.head_every``)
corr(θ, θ^mm) = ⟨θ, θ^mm⟩/(‖θ‖‖θ^mm‖) (Frobenius), the mean attention on the selected tokens (the
run's activation at its temperature: the β of the update before each snapshot, ``temperature``
and ``temperature_decay``) and ‖θ‖ — the quantities of Tarzanagh, Li, Thrampoulidis, Oymak's
figures. Computed in float64 numpy from the saved float32/64 parameters and the trial's data
(``sweeps.trials.every_trial``: the sweep's own draw, or drawn once per view).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dynamics import parts
from dynamics.core.activations import beta_at
from dynamics.core.data import tied_positions
from dynamics.errors import ConfigError
from dynamics.parts.metrics import head_schedule
from dynamics.sweeps.trials import every_trial
from dynamics.theory import svm
from dynamics.theory.replay import SNAPSHOT_CURVES, over_logged_steps

SELECTIONS = ("final", "mask")
SOLUTIONS = {"W": "W^mm", "k": "p^mm", "a": "a^mm (p^mm of the one-hot positions)"}  # by the parameter


class Alignment(NamedTuple):
    """Per trial (rows) and snapshot step (columns, ``steps``): corr(θ, θ^mm), the mean attention
    on the selected tokens, ‖θ‖; the selection used and each trial's selected tokens (trials, n)."""

    corr: np.ndarray  # (trials, L)
    selected_prob: np.ndarray  # (trials, L)
    norm: np.ndarray  # (trials, L)
    selection: str
    selected: np.ndarray  # (trials, n) int
    parameter: str  # "W", "k" or "a" (the position logits)
    head: np.ndarray  # (trials, L): the largest single-head corr(θ_h, θ^mm)
    steps: np.ndarray  # (L,): the steps of the snapshots (``parts.metrics.head_schedule``)


def _scores(theta: np.ndarray, X: np.ndarray, query: str) -> np.ndarray:
    """Scores (L, n, T) of θ at each logged step: x_tᵀ W x_q, or x_tᵀ k for a learned query (and
    for the position logits, X the one-hot positions: ``_positions``); (L, n, T − 1) for the query
    outside the keys: x_tᵀ W x_T, t < T."""
    part = parts.QUERIES.get(query)
    if part.learned or part.positional:
        return np.einsum("ntd,ld->lnt", X, theta)
    if part.outside:
        return np.einsum("ntd,lde,ne->lnt", X[:, :-1], theta, X[:, -1])
    x_q = X[:, part.token]
    return np.einsum("ntd,lde,ne->lnt", X, theta, x_q)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attention(scores: np.ndarray, beta: np.ndarray, activation: str) -> np.ndarray:
    """The run's attention σ(β_s·scores) (L, n, T) at each snapshot step s: its activation at the β
    of the update before it (``temperature``, ``temperature_decay``), as the engine's metrics."""
    scaled = beta[:, None, None] * scores
    if activation == "softmax":
        return _softmax(scaled)
    sigma = parts.ACTIVATIONS.get(activation, "attention").load()
    with jax.enable_x64(True):
        return np.asarray(sigma(jnp.asarray(scaled, jnp.float64)), np.float64)


def _positions(X: np.ndarray, groups: int, tied: tuple[int, ...]) -> np.ndarray:
    """The position query's tokens: one-hot positions (n, T, G), position t the unit vector of its
    logit (its tied group, or t), so that its scores a_{g(t)} are x_tᵀ a and p^mm of these tokens
    is the max-margin logit vector a^mm."""
    n, T = X.shape[:2]
    column = np.asarray(tied) if tied else np.arange(T)
    return np.broadcast_to(np.eye(groups)[column], (n, T, groups)).astype(np.float64)


def alignment(result, selection: str = "final", norm: str = "fro") -> Alignment:
    """The max-margin view of every trial of ``result`` (a ``SweepResult``, e.g.
    ``dynamics.load_results(folder)``, run with ``save_params`` and one H): see the module docstring.
    ``norm``: the norm θ^mm minimises, "fro" (Frobenius) or "nuc" (nuclear)."""
    if len(result.config.sweep.heads) != 1:
        raise ConfigError(
            f"the max-margin view reads a sweep of one H; got heads={list(result.config.sweep.heads)} "
            "(diagnostic_curves reads every H)"
        )
    return _view(result, 0, selection, norm, every_trial(result.config))


def _theta(result, i: int, trial: int, heads: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(Σ_h θ_h (L, …), the heads' θ_h (L, H, …), "W" or "k") of run (H index i, trial) from its
    snapshots: W_h, Q_h K_hᵀ, or a learned query's k_h."""
    curves = result.curves
    if "param_k" in curves:
        per_head = np.asarray(curves["param_k"], np.float64)[i, trial, :, :heads]
        name = "k"
    elif "param_a" in curves:  # the position query's logits
        per_head = np.asarray(curves["param_a"], np.float64)[i, trial, :, :heads]
        name = "a"
    elif "param_W" in curves:
        per_head = np.asarray(curves["param_W"], np.float64)[i, trial, :, :heads]
        name = "W"
    elif "param_Q" in curves:
        Q = np.asarray(curves["param_Q"], np.float64)[i, trial, :, :heads]
        K = np.asarray(curves["param_K"], np.float64)[i, trial, :, :heads]
        per_head, name = np.einsum("lhda,lhea->lhde", Q, K), "W"
    else:
        raise ConfigError("the max-margin view needs the run's parameters: run with save_params=True")
    return per_head.sum(axis=1), per_head, name


def _view(result, i: int, selection: str, norm: str, trials_data: list) -> Alignment:
    """The view of H index ``i`` on ``trials_data`` (``every_trial``: the sweep's data, drawn once)."""
    cfg = result.config
    if selection not in SELECTIONS:
        raise ConfigError(f"selection={selection!r}; allowed: {', '.join(SELECTIONS)}")
    if norm not in svm.NORMS:
        raise ConfigError(f"norm={norm!r}; allowed: {', '.join(svm.NORMS)}")
    query = cfg.model.query
    if parts.QUERIES.get(query).all_tokens:
        raise ConfigError(
            "the max-margin view needs one query per example: query first, last, outside, learned "
            f"or position, not {query!r}"
        )
    H = int(cfg.sweep.heads[i])
    steps = snapshot_steps(result)
    beta = beta_at(steps, cfg.model.temperature, cfg.model.temperature_decay)  # (L,) the run's β
    tied = tied_positions(cfg) if parts.QUERIES.get(query).positional else ()
    trials, L = result.curves["train_loss"].shape[1], len(steps)
    out = {k: np.full((trials, L), np.nan) for k in ("corr", "prob", "norm", "head")}
    chosen, name = [], "W"
    for t in range(trials):
        theta, per_head, name = _theta(result, i, t, H)
        data = trials_data[t]
        X = np.asarray(data.X_train, np.float64)
        if name == "a":  # the position logits read one-hot positions, not the tokens
            X = _positions(X, theta.shape[-1], tied)
        A = _attention(_scores(theta, X, query), beta, cfg.model.attention)  # (L, n, T) the summed head's
        if selection == "mask":
            if data.mask_train is None:
                raise ConfigError("selection='mask' needs data whose relevant tokens are known")
            sel = _mask_selection(np.asarray(data.mask_train), A.shape[-1], query)
        else:
            last = np.flatnonzero(np.all(np.isfinite(theta.reshape(L, -1)), axis=1))
            sel = np.argmax(A[last[-1] if last.size else -1], axis=1)
        chosen.append(sel)
        try:
            mm = (
                svm.max_margin_p(X, sel, norm=norm)
                if name in ("k", "a")
                else svm.max_margin_W(X, sel, query, norm=norm).W
            )
        except svm.MaxMarginError:
            mm = np.full(theta.shape[1:], np.nan)  # infeasible selection: NaN curves
        flat = theta.reshape(L, -1)
        size = np.linalg.norm(flat, axis=1)  # ‖θ‖ at every logged step (``norm`` is the solver's)
        out["norm"][t] = size
        with np.errstate(invalid="ignore", divide="ignore"):
            unit = mm.reshape(-1) / np.linalg.norm(mm)
            out["corr"][t] = flat @ unit / size
            heads = per_head.reshape(L, H, -1)
            out["head"][t] = np.max(heads @ unit / np.linalg.norm(heads, axis=2), axis=1)
        out["prob"][t] = np.take_along_axis(A, sel[None, :, None], axis=2)[..., 0].mean(axis=1)
    chosen = np.array(chosen)
    return Alignment(out["corr"], out["prob"], out["norm"], selection, chosen, name, out["head"], steps)


def _mask_selection(mask: np.ndarray, keys: int, query: str) -> np.ndarray:
    """Each example's relevant token (n,) among the ``keys`` tokens the model attends (the first
    T − 1 for a query outside them); refuses an example whose relevant token is not among them."""
    mask = mask[:, :keys]
    missing = np.flatnonzero(~mask.any(axis=1))
    if missing.size:
        raise ConfigError(
            f"selection='mask' with query={query!r}: the relevant token of example(s) "
            f"{missing[:10].tolist()} is not among the {keys} keys (it is the query); use selection='final'"
        )
    return np.argmax(mask, axis=1)


def snapshot_steps(result) -> np.ndarray:
    """The steps at which ``result`` holds parameter snapshots: the per-head view's schedule among
    its logged steps (all of them for a run that logs at most ``HEAD_POINTS``)."""
    return np.array(head_schedule(result.steps, result.config), dtype=np.asarray(result.steps).dtype)


def diagnostic_curves(
    result, selection: str = "final", norm: str = "fro", data=None, shared: bool = False
) -> tuple[dict[str, np.ndarray], dict]:
    """The ``maxmargin`` diagnostic of a sweep run with ``save_params``, from the engine's own θ at
    the steps of its snapshots (no replay: any optimiser, group rule, θ(0) or query with one query
    token): curves {name: (heads, trials, L)} over the L logged steps as the replayed diagnostics
    lay them out (NaN between the steps in ``diagnostic_steps``, the snapshots') — corr(Σ_h θ_h,
    θ^mm) (Frobenius), the best head's, the mean attention on the selected tokens, ‖Σ_h θ_h‖ —
    and the results.json summary, which names the selection (the model's final argmax, or the
    data's mask), the solution (W^mm or p^mm) and the norm it minimises (``norm``: "fro" or "nuc",
    ``sweep.maxmargin_norm``). ``data``, ``shared``: the sweep's own draw (``prepare_data``), read
    instead of drawing the data again (None: drawn here, once)."""
    cfg = result.config
    trials_data = every_trial(cfg, data, shared)
    views = [_view(result, i, selection, norm, trials_data) for i in range(len(cfg.sweep.heads))]
    per_view = ([v.corr for v in views], [v.head for v in views], [v.selected_prob for v in views])
    per_view += ([v.norm for v in views],)
    curves = {
        name: over_logged_steps(np.stack(c), result.steps, views[0].steps)
        for name, c in zip(SNAPSHOT_CURVES, per_view, strict=True)
    }
    curves["diagnostic_steps"] = views[0].steps
    summary = {
        "names": ["maxmargin"],
        "source": "snapshots",
        "selection": "the model's final argmax" if selection == "final" else "the data's mask",
        "solution": SOLUTIONS[views[0].parameter],
        "norm": svm.NORM_NAMES[norm],
        "steps": [int(s) for s in views[0].steps],
        "heads": [int(h) for h in cfg.sweep.heads],
        "maxmargin_cos_final": [float(np.nanmean(v.corr[:, -1])) for v in views],
    }
    return curves, summary


def headline(result) -> dict[str, dict]:
    """The max-margin presets' headline (their ``Preset.headline``): corr(θ, θ^mm) and ‖θ‖ at the
    last snapshot, mean ± std over the trials (data sets) of the first H (θ = W, or the learned
    prompt p), as ``dynamics.sweeps.headline.entry`` lays a number out. Read from the run's
    ``maxmargin`` diagnostic where it computed it from its snapshots with this headline's selection
    (the model's final argmax) and norm (Frobenius): the same view, not computed again; else the
    view of the first H is computed here."""
    found = _diagnostic_view(result)
    if found is None:
        a = _view(result, 0, "final", "fro", every_trial(result.config))
        found = a.corr[:, -1], a.norm[:, -1], a.parameter, int(a.steps[-1])
    corr, size, parameter, step = found
    name = {"W": "W", "k": "p", "a": "a"}[parameter]
    out = {}
    for key, label, values in (
        ("maxmargin_corr", f"corr({name}, {name}^mm)", corr),
        ("param_norm", f"‖{name}‖", size),
    ):
        v = values[np.isfinite(values)]
        out[key] = {
            "label": label,
            "value": float(v.mean()) if v.size else None,
            "std": float(v.std()) if v.size else None,
            "n": int(v.size),
            "about": f"at step {step}, mean ± std over the {v.size} of {len(values)} trials with a "
            f"feasible {SOLUTIONS[parameter]} (selection: the model's final argmax)",
        }
    return out


def _diagnostic_view(result) -> tuple[np.ndarray, np.ndarray, str, int] | None:
    """(corr, ‖θ‖ (trials,) at the last snapshot, the parameter, that step) of the first H from the
    run's ``maxmargin`` diagnostic (``diagnostic_curves``' curves and summary), or None where the
    run has none read from its snapshots with the final argmax and the Frobenius W^mm."""
    doc = result.extra.get("diagnostics")
    if not isinstance(doc, dict) or doc.get("source") != "snapshots" or not doc.get("steps"):
        return None
    if doc.get("selection") != "the model's final argmax" or doc.get("norm") != svm.NORM_NAMES["fro"]:
        return None
    parameter = next((k for k, v in SOLUTIONS.items() if v == doc.get("solution")), None)
    if parameter is None or not {"maxmargin_cos", "maxmargin_norm"} <= set(result.curves):
        return None
    step = int(doc["steps"][-1])
    at = int(np.searchsorted(np.asarray(result.steps), step))  # the last snapshot's logged step
    corr, size = (
        np.asarray(result.curves[k], np.float64)[0, :, at] for k in ("maxmargin_cos", "maxmargin_norm")
    )
    return corr, size, parameter, step
