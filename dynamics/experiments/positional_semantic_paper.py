"""The positional-semantic preset at the paper's size (Cui, Behrens, Krzakala, Zdeborová, NeurIPS
2024), for the comparison with the authors' GD runs: d = 1000, 5000 steps of GD with step 0.15,
n = round(α·d) training examples, a test set of 50 000 examples (their sizes), both starts per
trial on the same data and teacher (``positional_semantic``).

The test set is drawn and evaluated here in chunks, not by the engine: at d = 1000 one test set of
50 000 examples is 10⁸ floats per trial for the tokens and as many for the targets (0.8 GB in
float32), more than a sweep of several trials can hold at once. The engine trains on the trial's
own training set (its test set cut to ``ENGINE_N_TEST`` examples, unused); each trial's test error
is

    E = (1/n_test) Σ_i ‖y_i − f(X_i)‖² / (T·d),   f(X) = softmax((XQ)(XQ)ᵀ/d) X,

at the final Q, in float64, over ``n_test`` examples drawn by the data model's own ``sample`` from
the trial's world, ``chunk`` at a time (``test_error``), each chunk from its own key: a chunk of
2000 at d = 1000 holds 32 MB per float64 array (tokens, targets, outputs, residual: ~130 MB).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from dynamics.core.data import data_model
from dynamics.experiments import positional_semantic as ps
from dynamics.sweeps.execute import prepare_data

# the authors' sizes (their GD runs at d = 1000): steps, step size, test examples, runs per point
PAPER_D, PAPER_STEPS, PAPER_LR, PAPER_N_TEST, PAPER_RUNS = 1000, 5000, 0.15, 50_000, 24
PAPER_ALPHAS = np.linspace(0.01, 2.0, 25)  # their α grid; n = round(α·d)
ENGINE_N_TEST = 8  # the engine's own test set, unused: the test error is evaluated here in chunks
QUANTITIES = ("test_loss", "m", "theta", "objective")
_TEST_STREAM = 0x7E57  # folded into a trial's key: its chunked test set's own stream


def tied_outputs(X: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """f(X) = softmax((XQ)(XQ)ᵀ/d) X, float64, of tokens X (n, T, d) and Q (d,) (the tied rank-1
    key-query, value identity)."""
    X = np.asarray(X, np.float64)
    h = X @ np.asarray(Q, np.float64)  # (n, T)
    s = h[:, :, None] * h[:, None, :] / X.shape[-1]  # (n, s, t)
    a = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("nst,ntd->nsd", a / a.sum(-1, keepdims=True), X)


def mean_error(X: np.ndarray, y: np.ndarray, Q: np.ndarray) -> tuple[float, int]:
    """(Σ_i ‖y_i − f(X_i)‖²/(T·d), n) of tokens X (n, T, d) and flattened targets y (n, T·d)."""
    f = tied_outputs(X, Q)  # (n, T, d)
    resid = np.asarray(y, np.float64).reshape(f.shape) - f
    return float(np.sum(resid**2)) / (f.shape[1] * f.shape[2]), len(f)


def test_error(world, Q: np.ndarray, key: jax.Array, n_test: int, chunk: int) -> float:
    """The mean over ``n_test`` fresh examples of ‖y − f(X)‖²/(T·d) at ``Q`` (d,), the examples
    drawn by the data model's ``sample`` from one trial's ``world``, ``chunk`` at a time (chunk k
    from ``fold_in(key, k)``; the last one shorter): at most ``chunk`` examples in memory."""
    model = data_model(world.params)
    draw = jax.jit(model.sample, static_argnums=2)
    total, count = 0.0, 0
    for k, start in enumerate(range(0, n_test, chunk)):
        X, y, _ = draw(world, jax.random.fold_in(key, k), min(chunk, n_test - start))
        err, n = mean_error(np.asarray(X), np.asarray(y), Q)
        total, count = total + err, count + n
    return total / count


def trial_worlds(cfg) -> list:
    """Each trial's world as the sweep of ``cfg`` draws it (from its setup key alone: drawn with
    n_train = n_test = 1, the same teacher and codes)."""
    small = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, n_train=1, n_test=1))
    world = prepare_data(small).data.world  # leading trial axis
    return [jax.tree_util.tree_map(lambda a, t=t: a[t], world) for t in range(cfg.sweep.trials)]


def test_key(seed: int, trial: int) -> jax.Array:
    """The key of trial ``trial``'s chunked test set: its own stream of the sweep's seed."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), _TEST_STREAM), trial)


def simulate(
    alphas,
    trials: int,
    d: int = PAPER_D,
    steps: int = PAPER_STEPS,
    n_test: int = PAPER_N_TEST,
    chunk: int = 2000,
    progress: bool = False,
    seed: int = 0,
) -> dict:
    """Both starts at each α (n = round(α·d), as the authors round it) with ``trials`` paired
    trials: {"alpha": (A,), "n": (A,), start: {quantity: (A, trials)}} for ``QUANTITIES`` at the
    last step (the test error over ``n_test`` chunked examples, ``test_error``; m, θ and the
    objective as ``positional_semantic.add_overlaps`` gives them). ``seed``: the sweep's seed (its
    trials' data, teachers and test sets; another seed, other trials)."""
    alphas = np.asarray(alphas, np.float64)
    ns = tuple(int(n) for n in np.round(alphas * d))
    result = ps.run(
        progress=progress,
        axes={"n_train": ns, "start": ps.STARTS},
        d=d,
        baseline=False,
        data={"n_test": ENGINE_N_TEST},
        optim={"steps": steps, "lr": PAPER_LR},
        sweep={"trials": trials, "log_points": 2, "seed": seed},
    )
    names = [name for name, _ in result.grid.axes]
    out = {"alpha": alphas, "n": np.array(ns)}
    for start in ps.STARTS:
        out[start] = {q: np.full((len(ns), trials), np.nan) for q in QUANTITIES}
    curves = {"m": ps.M_POSITIONAL, "theta": ps.THETA_SEMANTIC, "objective": ps.OBJECTIVE}
    worlds: dict[int, list] = {}
    for k, cfg in enumerate(result.grid.points):
        at = dict(zip(names, np.unravel_index(k, result.grid.shape), strict=True))
        a, start = at["n_train"], ps.STARTS[at["start"]]
        idx = (0, *np.unravel_index(k, result.grid.shape))  # first H
        for q, name in curves.items():
            out[start][q][a] = result.curves[name][idx][..., -1]
        if a not in worlds:
            worlds[a] = trial_worlds(cfg)
        Q = np.asarray(result.curves["param_Q"][idx][:, -1, 0, :d, 0], np.float64)  # (trials, d)
        for t in range(trials):
            key = test_key(cfg.sweep.seed, t)
            out[start]["test_loss"][a, t] = test_error(worlds[a][t], Q[t], key, n_test, chunk)
    return out


def tolerance(sd, k: int, runs: int = PAPER_RUNS):
    """3·√(sd²/k + sd²/runs): three standard errors of the difference of our mean over ``k``
    trials and the authors' over ``runs``, both with the authors' per-run spread ``sd``."""
    sd = np.asarray(sd, np.float64)
    return 3.0 * np.sqrt(sd**2 / k + sd**2 / runs)


def paired_crossing(alphas, difference, resamples: int = 2000, seed: int = 0) -> dict:
    """The α where the paired objective difference (A, trials) (semantic − positional, per trial)
    changes sign: ``crossing`` from the mean over trials (``positional_semantic.crossing``), and
    its spread over ``resamples`` bootstrap draws of the trials: ``lo``, ``hi`` (the 16th and
    84th percentiles), ``sd``, and ``none`` the share of draws with no change of sign."""
    diff = np.asarray(difference, np.float64)
    rng = np.random.default_rng(seed)
    k = diff.shape[1]
    boot = np.array(
        [ps.crossing(alphas, diff[:, rng.integers(0, k, k)].mean(axis=1)) for _ in range(resamples)]
    )
    found = boot[np.isfinite(boot)]
    lo, hi = np.percentile(found, [16, 84]) if len(found) else (np.nan, np.nan)
    return {
        "crossing": ps.crossing(alphas, diff.mean(axis=1)),
        "lo": float(lo),
        "hi": float(hi),
        "sd": float(np.std(found)) if len(found) else float("nan"),
        "none": 1.0 - len(found) / resamples,
    }
