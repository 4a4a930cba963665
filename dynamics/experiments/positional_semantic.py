"""Positional versus semantic attention (Cui, Behrens, Krzakala, Zdeborová, NeurIPS 2024): the
grid preset ``positional-semantic`` (``dynamics.config.grid_axes``: the ``positional-semantic`` data
model, a tied rank-1 key-query Q with sequence outputs, GD on the summed objective with coupled
decay, at several α = n/d from the semantic start Q(0) = q* and the positional start 1_d/√d) and
what a plain grid does not log, the paper's overlaps, from the snapshots of Q and each trial's q*:

    m = ‖Qᵀ 1_d‖ / d   (positional),      θ = ‖Qᵀ q*‖ / d   (semantic),

|1ᵀQ|/d and |q*ᵀQ|/d at rank 1. They are added to the grid's curves as ``M_POSITIONAL`` and
``THETA_SEMANTIC``, (H, *grid shape, trials, L_h) at the per-head view's steps, beside the
paper's objective ``OBJECTIVE``,

    Σ_i ‖y_i − f(X_i)‖² / (T·d) + λ/2 ‖Q‖²   (T = 2: the paper's /(2d)),

n times the logged train loss (the mse of the T·d outputs, a mean over examples) plus the decay
term of the snapshot of Q, in float64. Which start ends lower in the objective is, in the paper,
the global minimiser at that α (``compare``: the better start per α and the α where the two
starts' objectives cross). The two starts of a trial share its data and teacher: the start enters
only Q(0) (``datamodels.positional_semantic``), so the draw of every grid point at the same α is
the same, and the difference of the objectives is taken per trial.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.config.schema import apply_overrides
from dynamics.theory import positional_semantic as replica

NAME = "positional-semantic"
M_POSITIONAL, THETA_SEMANTIC = "m_positional", "theta_semantic"
OBJECTIVE = "objective"
BASELINE = "baseline_test_loss"  # the linear mixing baseline's test loss, (H, *grid, trials)
STARTS = ("semantic", "positional")


def key() -> str:
    """The results' cache key of ``python -m figures positional-semantic``: the grid's hash."""
    return resolve_grid(*grid_preset(NAME)).hash()


def overlaps(Q: np.ndarray, teacher: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, θ) of ``Q`` (..., trials, L, d, r) against ``teacher`` (trials, d): ‖Qᵀ1‖/d, ‖Qᵀq*‖/d,
    each (..., trials, L), in float64."""
    Q = np.asarray(Q, np.float64)
    d = Q.shape[-2]
    m = np.linalg.norm(np.sum(Q, axis=-2), axis=-1) / d  # Qᵀ1: the sum over the d rows
    proj = np.einsum("...tlda,td->...tla", Q, np.asarray(teacher, np.float64))
    return m, np.linalg.norm(proj, axis=-1) / d


def teachers(cfg) -> np.ndarray:
    """(trials, d): each trial's q*, as the sweep of ``cfg`` draws it (from the trial's setup key
    alone, so drawn with n_train = n_test = 1: the same q*, no large data draw)."""
    from dynamics.sweeps.execute import prepare_data  # lazy: JAX, the engine: on a run

    small = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, n_train=1, n_test=1))
    return np.asarray(prepare_data(small).data.world.latents["teacher"])


def add_overlaps(result) -> dict[str, np.ndarray]:
    """{M_POSITIONAL, THETA_SEMANTIC, OBJECTIVE}: (H, *grid shape, trials, L_h) from a grid result
    with the snapshots of a tied Q (``sweep.save_params``), the first head's; the objective from
    the train loss logged at the same steps (``objective``)."""
    if "param_Q" not in result.curves:
        raise ValueError("the grid logged no snapshots of Q (sweep.save_params with a tied key-query)")
    snapshots = result.curves["param_Q"]  # (H, *grid, trials, L_h, heads, d, r)
    names = (M_POSITIONAL, THETA_SEMANTIC, OBJECTIVE)
    out = {name: np.full(snapshots.shape[:-3], np.nan) for name in names}
    at = np.searchsorted(np.asarray(result.steps), np.asarray(result.curves["head_steps"]))  # L_h of L
    cache: dict[int, np.ndarray] = {}
    for k, cfg in enumerate(result.grid.points):
        d = int(cfg.data.d)
        if d not in cache:
            cache[d] = teachers(cfg)
        idx = (slice(None), *np.unravel_index(k, result.grid.shape))
        m, theta = overlaps(snapshots[idx][..., 0, :d, :], cache[d])
        out[M_POSITIONAL][idx], out[THETA_SEMANTIC][idx] = m, theta
        loss = result.curves["train_loss"][idx][..., at]  # (H, trials, L_h): the mean over examples
        out[OBJECTIVE][idx] = objective(
            loss, snapshots[idx][..., 0, :d, :], cfg.data.n_train, cfg.optim.weight_decay
        )
    result.curves.update(out)
    return out


def mixing_gradient(B: np.ndarray, Z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """(objective, gradient in B) of Σ_i ‖y_i − B Z_i‖²/(T·d), the runs' summed mse, for B (T, T)
    and ``Z``, ``y`` (n, T, d), float64."""
    T, d = Z.shape[-2:]
    resid = y - np.einsum("st,ntd->nsd", B, Z)  # (n, s, d)
    return float(np.sum(resid**2)) / (T * d), -2.0 * np.einsum("nsd,ntd->st", resid, Z) / (T * d)


def linear_baseline(Z, y, rng: np.random.Generator, lr=0.5, weight_decay=1e-4, steps=200) -> np.ndarray:
    """The authors' linear baseline ŷ = B Z on the semantic parts Z (n, T, d) alone: B (T, T) from
    B(0) ~ N(0, 1) (``rng``), ``steps`` full-batch Adam steps (torch's: β = (0.9, 0.999), ε = 1e-8,
    the decay λB added to the gradient) on the summed objective of ``mixing_gradient``; float64."""
    T = Z.shape[-2]
    B = rng.normal(size=(T, T))
    m, v = np.zeros_like(B), np.zeros_like(B)
    for t in range(1, steps + 1):
        g = mixing_gradient(B, Z, y)[1] + weight_decay * B
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
        B = B - lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return B


def add_baseline(result) -> np.ndarray:
    """``BASELINE`` (H, *grid shape, trials): each trial's linear baseline (``linear_baseline``,
    B(0) from the sweep's seed and the trial) trained on its training set's semantic parts and
    tested as the runs are, ‖y − B Z‖²/(T·d) averaged over the test set; the same at both starts
    (they share the data), repeated over H."""
    from dynamics.sweeps.trials import every_trial  # lazy: JAX: data drawn again only for the baseline

    H = result.curves["test_loss"].shape[0]
    out = np.full((H, *result.grid.shape, result.grid.points[0].sweep.trials), np.nan)
    done: dict[int, np.ndarray] = {}
    for k, cfg in enumerate(result.grid.points):
        n = int(cfg.data.n_train)
        if n not in done:
            losses = []
            for t, data in enumerate(every_trial(cfg)):
                P = np.asarray(data.world.latents["codes"], np.float64)  # (T, d)
                Z, Z_test = (np.asarray(x, np.float64) - P for x in (data.X_train, data.X_test))
                y, y_test = (
                    np.asarray(a, np.float64).reshape(z.shape)
                    for a, z in ((data.y_train, Z), (data.y_test, Z_test))
                )
                B = linear_baseline(Z, y, np.random.default_rng([cfg.sweep.seed, t]))
                losses.append(mixing_gradient(B, Z_test, y_test)[0] / len(Z_test))
            done[n] = np.array(losses)
        out[(slice(None), *np.unravel_index(k, result.grid.shape))] = done[n]
    result.curves[BASELINE] = out
    return out


def produce(results_dir: Path, progress: bool) -> None:
    """``python -m figures``' producer: the preset's grid with the overlaps and the objective,
    written as a grid (their curves in its curves.npz)."""
    from dynamics.sweeps.grid_runner import write_grid  # lazy: JAX, the engine: on a run

    result = run(progress=progress)
    result.extra.update(complete=True)
    write_grid(result, results_dir)


def objective(mean_loss: np.ndarray, Q: np.ndarray, n: int, weight_decay: float) -> np.ndarray:
    """The summed objective n·``mean_loss`` + λ/2‖Q‖², float64: ``mean_loss`` (...) the mean over
    the n examples of each one's mse of its T·d outputs, ``Q`` (..., d, r) the parameters it was
    evaluated at (the only ones a tied sequence model has)."""
    Q = np.asarray(Q, np.float64)
    return n * np.asarray(mean_loss, np.float64) + weight_decay / 2 * np.sum(Q**2, axis=(-2, -1))


def crossing(alphas, difference) -> float:
    """The first α where ``difference`` (one number per α, increasing α) changes sign, by linear
    interpolation between the two grid points around it (a zero at a grid point is that α); NaN
    where it keeps one sign or is NaN there."""
    a, g = np.asarray(alphas, np.float64), np.asarray(difference, np.float64)
    for k in range(len(a)):
        if g[k] == 0:
            return float(a[k])
        if k and g[k - 1] * g[k] < 0:  # NaN compares False: no crossing through a NaN
            return float(a[k - 1] + (a[k] - a[k - 1]) * g[k - 1] / (g[k - 1] - g[k]))
    return float("nan")


def compare(result) -> dict:
    """The two starts at each α = n/d from a grid over ``n_train`` × ``start`` with ``OBJECTIVE``
    in its curves (``add_overlaps``), at the last snapshot, first H: ``alpha`` (A,); per start
    ``objective``, ``test_loss``, ``m``, ``theta`` (A,) means over trials; ``difference`` (A,)
    the mean over trials of the per-trial objective semantic − positional (paired: one draw per
    trial at both starts), ``difference_std`` its std over trials; ``better`` (A,) the start whose
    mean objective is lower (positional at a tie); ``crossing`` the α where ``difference``
    changes sign (``crossing``), NaN if it does not; ``baseline`` (A,) the linear baseline's mean
    test loss where the curves hold it."""
    names = [name for name, _ in result.grid.axes]
    if sorted(names) != ["n_train", "start"] or sorted(dict(result.grid.axes)["start"]) != sorted(STARTS):
        raise ValueError(f"compare needs a grid over n_train × start {STARTS}, not {names}")
    if OBJECTIVE not in result.curves:
        raise ValueError("the grid's curves hold no objective: call add_overlaps(result) first")
    n_axis, start_axis = names.index("n_train"), names.index("start")
    order = [dict(result.grid.axes)["start"].index(s) for s in STARTS]

    def final(curve):  # (A, 2 starts, trials) at the last step, first H
        last = np.moveaxis(np.asarray(curve, np.float64)[0][..., -1], (n_axis, start_axis), (0, 1))
        return last[:, order]

    obj = final(result.curves[OBJECTIVE])
    d = int(result.grid.points[0].data.d)
    alpha = np.asarray(dict(result.grid.axes)["n_train"], np.float64) / d
    paired = obj[:, 0] - obj[:, 1]  # (A, trials): one draw per trial at both starts
    diff = np.nanmean(paired, axis=-1)
    means = {key: np.nanmean(final(result.curves[name]), axis=-1) for key, name in _COMPARED.items()}
    out = {"alpha": alpha, "difference": diff, "difference_std": np.nanstd(paired, axis=-1)}
    out["crossing"] = crossing(alpha, diff)
    if BASELINE in result.curves:  # (H, *grid, trials): no step axis
        baseline = np.moveaxis(
            np.asarray(result.curves[BASELINE], np.float64)[0], (n_axis, start_axis), (0, 1)
        )
        out["baseline"] = np.nanmean(baseline[:, 0], axis=-1)
    out["better"] = np.where(diff < 0, STARTS[0], STARTS[1])
    for k, start in enumerate(STARTS):
        out[start] = {key: v[:, k] for key, v in means.items()}
    return out


def theory(d: int, path=None) -> dict:
    """The replica theory's curves (``dynamics.theory.positional_semantic.stored_curve``, the
    package's file unless ``path``) in the simulation's units at width ``d``: ``alpha``, per start
    ``test_loss``, ``m``, ``theta`` and ``objective`` (d × the theory's objective over d: the
    simulation sums the loss over n = αd samples), ``difference`` (semantic − positional) and
    ``crossing`` (where it changes sign, interpolated), ``settings`` (how it was solved)."""
    curve = replica.stored_curve() if path is None else replica.stored_curve(path)
    alpha = curve["semantic"]["alpha"]
    if not np.array_equal(alpha, curve["positional"]["alpha"]):
        raise ValueError("the stored branches are not solved at the same alphas")
    out = {"alpha": alpha, "settings": curve["settings"]}
    for start in STARTS:
        c = curve[start]
        out[start] = {"test_loss": c["test_error"], "m": c["m"], "theta": c["theta"]}
        out[start]["objective"] = d * c["objective"]
    out["difference"] = out["semantic"]["objective"] - out["positional"]["objective"]
    out["crossing"] = crossing(alpha, out["difference"])
    return out


def theory_for(cfg) -> dict | None:
    """``theory`` at the resolved config's d when its problem is the stored curve's (T = 2, ω, σ,
    λ as the coupled weight decay, the mixing A, temperature 1/d); None otherwise, for no curve
    is stored for another problem."""
    th = theory(int(cfg.data.d))
    s = th["settings"]
    same = cfg.data.T == 2 and np.allclose(cfg.data.mixing, s["A"])
    for value, stored in (
        (cfg.data.omega, s["omega"]),
        (cfg.data.semantic_noise, s["sigma"]),
        (cfg.optim.weight_decay, s["lam"]),
        (cfg.model.temperature, 1 / cfg.data.d),
    ):
        same = same and bool(np.isclose(value, stored, rtol=1e-9, atol=0))
    return th if same else None


_COMPARED = {"objective": OBJECTIVE, "test_loss": "test_loss", "m": M_POSITIONAL, "theta": THETA_SEMANTIC}


def run(progress: bool = True, axes=None, d: int | None = None, baseline: bool = True, **overrides):
    """The preset's grid (``overrides``: {section: {field: value}} on its base config, e.g. a
    smaller d for a test; ``axes``: {knob: values} replacing the preset's), run, with the overlaps
    added to its curves. ``d``: the width, with the scores' temperature 1/d that goes with it (the
    paper's 1000); ``baseline`` False leaves out the linear baseline (it draws the data again)."""
    from dynamics.sweeps.grid_runner import run_grid_experiment  # lazy: JAX, the engine: on a run

    cfg, preset_axes = grid_preset(NAME)
    if d is not None:
        sized = {"data": {"d": d}, "model": {"temperature": 1.0 / d}}
        overrides = {k: {**sized.get(k, {}), **overrides.get(k, {})} for k in {*sized, *overrides}}
    if overrides:
        cfg = apply_overrides(cfg, overrides, f"{NAME} overrides")
    result = run_grid_experiment(resolve_grid(cfg, preset_axes if axes is None else axes), progress=progress)
    add_overlaps(result)
    if baseline:
        add_baseline(result)
    return result
