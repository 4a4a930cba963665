"""The theory's quantities along training: sharpness, tangent-kernel movement and the
cosine to the max-margin token selection, at the logged steps of a sweep.

``sweep.run_sweep`` calls ``compute`` when ``sweep.diagnostics`` names any of ``DIAGNOSTICS``
(``--diagnostics``, TOML ``[sweep] diagnostics = [...]``, the API's Config). The engine's
compiled scan keeps no parameters, so this module *replays* each run (H, trial) with a plain
jitted loop of the same update on the same data and init (``_advance``) and measures θ at the
diagnostic steps with ``dynamics.theory.diagnostics``. The replay's training loss is checked against
the engine's logged one (``replay_gap`` in results.json). Runs without diagnostics never reach
this module: their numbers are those of the engine alone, bit for bit.

Schedule: the logged steps if there are at most ``POINTS`` of them, else the logged steps
nearest to ``POINTS`` log-spaced steps (0 and the last always). Curves are (heads, trials, L)
like every metric, NaN at the logged steps without a diagnostic and after a divergence;
``diagnostic_steps`` in curves.npz lists the steps that have one.

- ``sharpness``: λ_max and λ_min of the H-head training loss's Hessian (64 Lanczos steps on
  Hessian-vector products; on the zero-init fast path the exact H-head spectrum from the
  symmetric and head-difference blocks), and ``eos_ratio`` = η(H)·λ_max (GD's edge of
  stability is 2; for Adam it is the raw, unpreconditioned Hessian's number).
- ``kernel``: 1 − ⟨K_ref, K_t⟩/(‖K_ref‖‖K_t‖) of the empirical NTK of Φ on the first
  min(n, ``KERNEL_EXAMPLES``) training examples; K_ref is the first kernel of the run that is
  finite and nonzero: step 0's (at θ(0) = 0 the Gram matrix of the mean tokens, readout only).
- ``maxmargin``: the attention SVM W^mm per trial (cvxpy, Clarabel) and the cosine of Σ_h W_h(t)
  to it, and the largest single-head cosine; a failed or infeasible solve is reported in
  results.json (``svm_status``) and on stderr, with NaN curves for that trial.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from dynamics import parts
from dynamics.config.schema import DIAGNOSTICS, Config, ConfigError, Experiment, log_schedule
from dynamics.core import inits, rng
from dynamics.core import model as mdl
from dynamics.core import update as upd
from dynamics.core.data import Data
from dynamics.core.losses import mean_loss
from dynamics.theory import diagnostics as dg
from dynamics.theory import svm

POINTS = 24  # at most this many diagnostic steps per run (cost: see benchmarks/README.md)
KERNEL_EXAMPLES = 256
CURVES = {
    "sharpness": ("sharpness", "hessian_min", "eos_ratio"),
    "kernel": ("kernel_distance",),
    "maxmargin": ("maxmargin_cos", "maxmargin_cos_head"),
}
assert tuple(CURVES) == DIAGNOSTICS
# ``maxmargin`` read from the run's own snapshots (``dynamics.theory.maxmargin.diagnostic_curves``)
SNAPSHOT_CURVES = ("maxmargin_cos", "maxmargin_cos_head", "maxmargin_attn", "maxmargin_norm")


def over_logged_steps(values: np.ndarray, steps: Sequence[int], dsteps: Sequence[int]) -> np.ndarray:
    """Diagnostic curves (heads, trials, Ld) at the steps ``dsteps`` laid over all L logged
    ``steps``, NaN between: how curves.npz keeps every diagnostic (replayed or from snapshots)."""
    full = np.full((*np.shape(values)[:2], len(steps)), np.nan)
    full[..., np.searchsorted(np.asarray(steps), np.asarray(dsteps))] = values
    return full


def diagnostic_steps(steps: Sequence[int], points: int = POINTS) -> list[int]:
    """The logged ``steps`` that get diagnostics: all of them if there are at most ``points``,
    else the logged step nearest (in log(1 + t)) to each of ``points`` log-spaced steps."""
    steps = sorted(int(s) for s in steps)
    if len(steps) <= points:
        return steps
    logged = np.log1p(np.array(steps, np.float64))
    wanted = np.log1p(np.array(log_schedule(steps[-1], log_points=points), np.float64))
    picked = {steps[int(np.argmin(np.abs(logged - w)))] for w in wanted}
    return sorted(picked | {steps[0], steps[-1]})


@functools.cache
def _advance(H: int, fast: bool, optimizer: str, query: str, norm: str, loss: str):
    """jit (params, state, X, y, lr, n) -> (params, state): n full-batch updates of the H-head
    model exactly as the engine makes them (fast path: one stored head of weight H, fed the
    per-head gradient ∇L̃/H; optax direction, then θ ← θ − η·direction)."""
    direction = upd.direction(optimizer)
    loss = parts.LOSSES.get(loss, "loss").name

    def objective(p, X, y):
        weight = jnp.full((1,), H, X.dtype) if fast else None
        phi = mdl.logits(p, X, query=query, norm=norm, weight=weight, n_heads=H)
        return mean_loss(y * phi, loss)

    def run(params, state, X, y, lr, n):
        def step(_, carry):
            p, s = carry
            g = jax.grad(objective)(p, X, y)
            if fast:
                g = {k: v / H for k, v in g.items()}  # the engine's per-head gradient (H a number here)
            return upd.update(p, g, s, direction, lr)  # the engine's step

        return jax.lax.fori_loop(0, n, step, (params, state))

    return jax.jit(run), direction.init, jax.jit(objective)


@functools.cache
def _measure(names: tuple[str, ...], H: int, fast: bool, query: str, norm: str, loss: str):
    """jit (params, X, y, X_kernel, key) -> {quantity: value}: the diagnostics at one state."""
    kw = dict(query=query, norm=norm, loss=loss)

    def hessian(p, X, y, key):
        if fast:
            parts = dg.fast_path_hessian(p, X, y, key, n_heads=H, **kw)
            blocks = [parts.symmetric] + ([parts.difference] if parts.difference is not None else [])
        else:
            blocks = [dg.hessian_lanczos(lambda q: dg.training_loss(q, X, y, n_heads=H, **kw), p, key)]
        lam_max = jnp.max(jnp.stack([b.lam_max for b in blocks]))
        lam_min = jnp.min(jnp.stack([b.lam_min for b in blocks]))
        scale = jnp.maximum(jnp.abs(lam_max), jnp.abs(lam_min))
        residual = jnp.max(jnp.stack([jnp.maximum(b.res_max, b.res_min) for b in blocks])) / scale
        return {"sharpness": lam_max, "hessian_min": lam_min, "lanczos_residual": residual}

    def kernel(p, Xk):
        if fast:
            return dg.fast_path_ntk(p, Xk, n_heads=H, query=query, norm=norm)
        return dg.ntk(lambda q, X: mdl.logits(q, X, query=query, norm=norm, n_heads=H), p, Xk)

    def measure(p, X, y, Xk, key):
        out = {}
        if "sharpness" in names:
            out.update(hessian(p, X, y, key))
        if "kernel" in names:
            out["kernel"] = kernel(p, Xk)
        if "maxmargin" in names:
            out["W"] = mdl.key_query_matrix(p)  # (S, d, d)
        return out

    return jax.jit(measure)


def _svm(cfg: Config, data: Data, trials: int) -> tuple[list[np.ndarray | None], list[str]]:
    """W^mm of each trial's training set (None when the solve failed) and the statuses: the sweep's
    own tokens and relevant-token masks (validation refuses data whose relevant tokens are unknown)."""
    X_used, mask = np.asarray(data.X_train), data.mask_train
    if mask is None:
        raise ConfigError("the maxmargin diagnostic needs data whose relevant tokens are known")
    solutions, statuses = [], []
    for t in range(trials):
        sol = svm.max_margin_direction(
            X_used[t], np.asarray(mask[t]), check=False, norm=cfg.sweep.maxmargin_norm
        )
        statuses.append(sol.status)
        solutions.append(sol.W if sol.status == "optimal" else None)
        if sol.status != "optimal":
            print(
                f"warning: max-margin SVM of trial {t}: status {sol.status!r}; its cosines are NaN",
                file=sys.stderr,
            )
    return solutions, statuses


class _Run:
    """One (H, trial): the replay and the diagnostics at its diagnostic steps."""

    def __init__(self, cfg: Config, H: int, lr: float, fast: bool, dtype):
        m, o = cfg.model, cfg.optim
        self.H, self.lr, self.fast, self.dtype, self.cfg = H, lr, fast, dtype, cfg
        self.advance, self.init_state, self.loss = _advance(H, fast, o.optimizer, m.query, m.norm, o.loss)
        self.measure = _measure(cfg.sweep.diagnostics, H, fast, m.query, m.norm, o.loss)

    def init(self, key: np.ndarray, d: int):
        m = self.cfg.model
        if self.fast:
            return {k: jnp.zeros((1, *s), self.dtype) for k, s in inits.head_shapes(d).items()}
        p = inits.init_params(
            jnp.asarray(key),
            self.H,
            d,
            init=m.init,
            scale=m.init_scale if parts.INITS[m.init].random else None,
            key_query=m.key_query,
            head_size=m.head_size if parts.KEY_QUERIES[m.key_query].factored else None,
        )
        return {k: v.astype(self.dtype) for k, v in p.items()}


def _one_run(
    run: _Run, X, y, key, dsteps, stop: int, W_mm, out: dict, where: tuple[int, int], given=None
) -> list[float]:
    """Replay one run and fill ``out[name][where + (j,)]`` at each diagnostic step j before
    ``stop`` (its divergence step); returns the replay's training loss at those steps. ``given``:
    the parameters the trial's world sets (name -> one head's array), every head from them."""
    params = run.init(key, X.shape[-1])
    for k, v in (given or {}).items():
        params[k] = jnp.broadcast_to(jnp.asarray(v, run.dtype), params[k].shape)
    state, t, K_ref = run.init_state(params), 0, None
    Xk = X[:KERNEL_EXAMPLES]
    weight = jnp.full((1,), run.H, run.dtype) if run.fast else None
    losses = []
    for j, s in enumerate(dsteps):
        if s >= stop:
            break
        params, state = run.advance(params, state, X, y, run.lr, s - t)
        t = s
        losses.append(float(run.loss(params, X, y)))
        got = run.measure(params, X, y, Xk, jnp.asarray(rng.fold_in(key, 1_000_003 + j)))
        if "sharpness" in got:
            out["sharpness"][where + (j,)] = float(got["sharpness"])
            out["hessian_min"][where + (j,)] = float(got["hessian_min"])
            out["eos_ratio"][where + (j,)] = run.lr * float(got["sharpness"])
            out["lanczos_residual"][where + (j,)] = float(got["lanczos_residual"])
        if "kernel" in got:
            K = got["kernel"]
            if K_ref is None and bool(jnp.isfinite(jnp.linalg.norm(K))) and float(jnp.linalg.norm(K)) > 0:
                K_ref = K
            if K_ref is not None:
                out["kernel_distance"][where + (j,)] = float(dg.kernel_distance(K_ref, K))
        if "W" in got and W_mm is not None:
            total, head = svm.head_cosines(got["W"], jnp.asarray(W_mm, run.dtype), weight)
            out["maxmargin_cos"][where + (j,)] = float(total)
            out["maxmargin_cos_head"][where + (j,)] = float(head)
    return losses


def compute(
    exp: Experiment,
    data: Data,
    init_keys: np.ndarray,
    lrs: Sequence[float],
    fast: bool,
    train_loss: np.ndarray,
    diverged_at: np.ndarray,
    *,
    progress: bool = True,
) -> tuple[dict[str, np.ndarray], dict]:
    """The diagnostic curves {name: (heads, trials, L)} plus ``diagnostic_steps`` (Ld,), and the
    results.json summary, of the sweep ``exp`` whose data, init keys (trials, 2), step sizes per H,
    fast-path choice, logged ``train_loss`` (heads, trials, L) and ``diverged_at`` are given."""
    start = time.perf_counter()
    cfg, steps = exp.config, list(exp.steps)
    names = cfg.sweep.diagnostics
    heads, trials = cfg.sweep.heads, cfg.sweep.trials
    dsteps = diagnostic_steps(steps)
    keys = [k for n in names for k in CURVES[n]] + (["lanczos_residual"] if "sharpness" in names else [])
    out = {k: np.full((len(heads), trials, len(dsteps)), np.nan) for k in keys}
    W_mm, statuses = _svm(cfg, data, trials) if "maxmargin" in names else ([None] * trials, None)
    dtype = jnp.zeros(()).dtype
    X_all = jnp.asarray(data.X_train, dtype)
    y_all = jnp.asarray(data.y_train, dtype)
    gap = 0.0
    bar = tqdm(total=len(heads) * trials, desc="diagnostics", unit="run", disable=not progress)
    for i, H in enumerate(heads):
        run = _Run(cfg, int(H), float(lrs[i]), fast, dtype)
        for t in range(trials):
            X, y = (X_all, y_all) if X_all.ndim == 3 else (X_all[t], y_all[t])
            stop = diverged_at[i, t] if diverged_at[i, t] >= 0 else steps[-1] + 1
            given = {k: v[t] for k, v in (data.world_init or {}).items()}
            losses = _one_run(run, X, y, init_keys[t], dsteps, stop, W_mm[t], out, (i, t), given)
            logged = train_loss[i, t, [steps.index(s) for s in dsteps[: len(losses)]]]
            rel = np.abs(np.array(losses) - logged) / np.maximum(np.abs(logged), 1e-12)
            gap = max(gap, float(np.nanmax(rel, initial=0.0)))
            bar.update(1)
    bar.close()
    curves = {k: over_logged_steps(v, steps, dsteps) for k, v in out.items() if k != "lanczos_residual"}
    curves["diagnostic_steps"] = np.array(dsteps)
    summary = _summary(cfg, lrs, dsteps, out, statuses, gap, time.perf_counter() - start)
    return curves, summary


def _final(values: np.ndarray) -> list:
    """Per H: mean over trials of each run's last finite value (None when there is none)."""
    rows = []
    for per_h in values:  # (trials, Ld)
        last = [v[np.isfinite(v)][-1] for v in per_h if np.isfinite(v).any()]
        rows.append(float(np.mean(last)) if last else None)
    return rows


def _summary(cfg: Config, lrs, dsteps, out: dict, statuses, gap: float, seconds: float) -> dict:
    doc = {
        "names": list(cfg.sweep.diagnostics),
        "steps": [int(s) for s in dsteps],
        "seconds": round(seconds, 3),
        "replay_gap": gap,  # max relative |replay − engine| training loss at the diagnostic steps
        "heads": [int(h) for h in cfg.sweep.heads],
        "lr": [float(v) for v in lrs],
    }
    if "sharpness" in out:
        with np.errstate(all="ignore"):
            doc["lanczos_iters"] = dg.DEFAULT_ITERS
            doc["lanczos_residual_max"] = float(np.nanmax(out["lanczos_residual"], initial=0.0))
            doc["sharpness_final"] = _final(out["sharpness"])
            doc["hessian_min_final"] = _final(out["hessian_min"])
            peak = np.where(np.isfinite(out["eos_ratio"]), out["eos_ratio"], -np.inf).max(axis=(1, 2))
            doc["eos_ratio_max"] = [float(v) if np.isfinite(v) else None for v in peak]
    if "kernel_distance" in out:
        doc["kernel_examples"] = KERNEL_EXAMPLES
        doc["kernel_distance_final"] = _final(out["kernel_distance"])
    if "maxmargin_cos" in out:
        doc["svm_status"] = statuses
        doc["svm_norm"] = svm.NORM_NAMES[cfg.sweep.maxmargin_norm]
        doc["maxmargin_cos_final"] = _final(out["maxmargin_cos"])
        doc["maxmargin_cos_head_final"] = _final(out["maxmargin_cos_head"])
    return doc
