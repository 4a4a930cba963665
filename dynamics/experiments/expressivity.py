"""The expressivity half of the low-rank bottleneck (Bhojanapalli et al., ICML 2020): can one
factored head of size d_h fit any attention matrix?

For a fixed random X ∈ R^{T×d} (d ≥ T, so X has rank T) fit one factored head's attention matrix
A = softmax(X W Xᵀ), W = Q Kᵀ with Q, K ∈ R^{d×d_h}, to random row-stochastic targets P (rows
uniform on the simplex) by minimising the mean row KL(P_s ‖ A_s) with Adam, many restarts at once;
record the best error per d_h. The preset ``bottleneck-expressivity`` (``dynamics.experiments.bottleneck``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from dynamics.config.schema import (
    ConfigError,
    digest,
    log_schedule,
)
from dynamics.core import inits
from dynamics.core import model as mdl
from dynamics.core import update as upd
from dynamics.infra.executables import exact_matmuls
from dynamics.sweeps.headline import entry
from dynamics.sweeps.result_files import SCHEMA_VERSION, write_experiment

EXPRESSIVITY = "bottleneck-expressivity"


@dataclass(frozen=True)
class ExpressivityConfig:
    tokens: tuple[int, ...] = (5, 10, 16)  # sequence lengths T, one line each in the figure
    width_factor: int = 2  # d = width_factor·T (≥ 1: X has rank T); d_h runs 1 … d
    targets: int = 8  # random row-stochastic targets P per T (the error is reported per target)
    restarts: int = 8  # random inits per target; the best (lowest KL) one counts
    steps: int = 3000  # Adam steps per fit; more gets closer to the infimum below T − 1
    lr: float = 0.05  # Adam's initial step, decayed exponentially to lr·lr_final
    lr_final: float = 0.01  # the last step's fraction of lr (a decay helps reach ~0 error)
    init_scale: float = 1.0  # σ₀: Q, K entries N(0, σ₀²/d), as inits.init_params
    dirichlet: float = 1.0  # target rows ~ Dirichlet(α·1): α = 1 is uniform on the simplex
    tol: float = 1e-4  # "fits" = best total-variation error below tol for every target
    seed: int = 0  # the root PRNG seed (X, targets and inits)

    def validate(self) -> ExpressivityConfig:
        if not isinstance(self.tokens, tuple | list):
            raise ConfigError(f"tokens={self.tokens!r} must be a tuple of sequence lengths, e.g. (5, 10)")
        if not self.tokens:
            raise ConfigError("tokens is empty; give at least one sequence length, e.g. --tokens 5,10")
        for name, value, lo in (
            ("width_factor", self.width_factor, 1),
            ("targets", self.targets, 1),
            ("restarts", self.restarts, 1),
            ("steps", self.steps, 1),
            ("seed", self.seed, 0),
            *(("tokens", t, 2) for t in self.tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ConfigError(f"{name}={value!r} must be an integer >= {lo}")
        for name, value in (
            ("lr", self.lr),
            ("lr_final", self.lr_final),
            ("init_scale", self.init_scale),
            ("dirichlet", self.dirichlet),
            ("tol", self.tol),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name}={value!r} must be a finite number > 0")
        if len(set(self.tokens)) != len(self.tokens):
            raise ConfigError(f"tokens={list(self.tokens)} has repeated values")
        return self

    def head_sizes(self, T: int) -> list[int]:
        return list(range(1, self.width_factor * T + 1))


QUICK_EXPRESSIVITY = ExpressivityConfig(tokens=(3, 4), targets=2, restarts=2, steps=300, lr=0.1)


def row_kl(P: jax.Array, scores: jax.Array) -> jax.Array:
    """(1/T) Σ_s KL(P_s ‖ softmax(scores_s)) for P, scores (T, T); convex in the scores."""
    log_a = jax.nn.log_softmax(scores, axis=-1)  # (s, t)
    return jnp.mean(jnp.sum(jax.scipy.special.xlogy(P, P) - P * log_a, axis=-1))


def head_scores(qk: mdl.Params, X: jax.Array) -> jax.Array:
    """The (T, T) scores [s, t] = x_tᵀ Q Kᵀ x_s of one factored head (model.attention_scores)."""
    return mdl.attention_scores(qk, X[None], "all")[0, 0]  # (s, t)


def _fit_one(
    key: jax.Array,
    X: jax.Array,
    P: jax.Array,
    mask: jax.Array,
    steps: int,
    lr: jax.Array,
    lr_final: jax.Array,
    init_scale: jax.Array,
):
    """One Adam fit of a head of size d_h = Σ mask, stored padded to A = len(mask) columns.

    Q, K are (1, d, A); the columns a ≥ d_h are zero at init and get zero gradient (the loss
    sees Q·mask, K·mask), so Adam never moves them: the fit is exactly the size-d_h head's, and
    every d_h shares one compiled program. Returns (Q, K) after ``steps`` and the loss before
    each step, (steps,).
    """
    d, A = X.shape[-1], mask.shape[0]
    params = inits.init_params(key, 1, d, init="normal", scale=init_scale, key_query="factored", head_size=A)
    cols = mask[None, None, :]  # (1, 1, A)
    qk = {"Q": params["Q"] * cols, "K": params["K"] * cols}  # (1, d, A) each; U plays no part in A
    adam = upd.direction("adam")  # the engine's step; η decays exponentially to lr·lr_final

    def loss(p):
        return row_kl(P, head_scores({"Q": p["Q"] * cols, "K": p["K"] * cols}, X))

    def step(carry, _):
        p, state, t = carry
        value, grads = jax.value_and_grad(loss)(p)
        p, state = upd.update(p, grads, state, adam, lr * lr_final ** (t / steps))
        return (p, state, t + 1), value

    (qk, _, _), trace = jax.lax.scan(step, (qk, adam.init(qk), jnp.int32(0)), None, length=steps)
    return qk, trace


@partial(jax.jit, static_argnames=("T", "d", "head_sizes", "targets", "restarts", "steps"))
def expressivity_fits(
    key: jax.Array,
    *,
    T: int,
    d: int,
    head_sizes: tuple[int, ...],
    targets: int,
    restarts: int,
    steps: int,
    lr: float | jax.Array,
    lr_final: float | jax.Array,
    init_scale: float | jax.Array,
    dirichlet: float | jax.Array,
) -> dict[str, jax.Array]:
    """Draw X and the targets from ``key`` and fit every (d_h, target, restart) in one program.

    Returns X (T, d) with entries N(0, 1/d) (tokens of norm ≈ 1, as the data models),
    P (M, T, T) with rows ~ Dirichlet(α·1), Q and K (n_a, M, R, d, A) padded to
    A = max d_h, and the losses before each step, trace (n_a, M, R, steps).
    """
    k_x, k_p, k_init = jax.random.split(key, 3)
    X = jax.random.normal(k_x, (T, d)) / math.sqrt(d)  # (t, d)
    P = jax.random.dirichlet(k_p, jnp.full((T,), dirichlet), (targets, T))  # (M, s, t)
    P = P / jnp.sum(P, axis=-1, keepdims=True)
    A = max(head_sizes)
    masks = (jnp.arange(A)[None, :] < jnp.array(head_sizes)[:, None]).astype(X.dtype)  # (n_a, A)
    keys = jax.random.split(k_init, len(head_sizes) * targets * restarts)
    keys = keys.reshape(len(head_sizes), targets, restarts, *keys.shape[1:])  # (n_a, M, R, 2)
    fit = partial(_fit_one, steps=steps, lr=lr, lr_final=lr_final, init_scale=init_scale)
    fit = jax.vmap(fit, in_axes=(0, None, None, None))  # restarts
    fit = jax.vmap(fit, in_axes=(0, None, 0, None))  # targets
    fit = jax.vmap(fit, in_axes=(0, None, None, 0))  # head sizes
    qk, trace = fit(keys, X, P, masks)
    return {"X": X, "P": P, "Q": qk["Q"][..., 0, :, :], "K": qk["K"][..., 0, :, :], "trace": trace}


def attention_errors(Q: np.ndarray, K: np.ndarray, X: np.ndarray, P: np.ndarray) -> dict[str, np.ndarray]:
    """Errors of fitted heads in float64: Q, K (..., d, d_h), X (T, d), P (..., T, T) -> each (...).

    ``kl`` mean row KL(P_s ‖ A_s), ``tv`` mean row total variation ½‖A_s − P_s‖₁,
    ``max_abs`` max |A − P|. Exact (float64) so no float32 cancellation hides a small error.
    """
    Q, K, X, P = (np.asarray(a, dtype=np.float64) for a in (Q, K, X, P))
    XQ = np.einsum("td,...da->...ta", X, Q)  # (..., t, a)
    XK = np.einsum("sd,...da->...sa", X, K)  # (..., s, a)
    S = np.einsum("...sa,...ta->...st", XK, XQ)  # (..., s, t): x_tᵀ Q Kᵀ x_s
    S = S - S.max(axis=-1, keepdims=True)
    log_a = S - np.log(np.exp(S).sum(axis=-1, keepdims=True))
    A = np.exp(log_a)
    kl = np.mean(np.sum(np.where(P > 0, P * (np.log(np.where(P > 0, P, 1.0)) - log_a), 0.0), -1), -1)
    return {
        "kl": kl,
        "tv": np.mean(0.5 * np.abs(A - P).sum(axis=-1), axis=-1),
        "max_abs": np.abs(A - P).max(axis=(-2, -1)),
    }


def min_rank_threshold(T: int) -> int:
    """T − 1: the smallest head size that fits a generic positive row-stochastic T×T matrix."""
    return T - 1


def run_expressivity(cfg: ExpressivityConfig, *, progress: bool = True) -> dict[str, Any]:
    """All fits of the experiment, one program per T: {'results': json-able dict, 'arrays'}."""
    with exact_matmuls():  # full float32 on a GPU too, as the engine
        return _run_expressivity(cfg, progress)


def _run_expressivity(cfg: ExpressivityConfig, progress: bool) -> dict[str, Any]:
    if not isinstance(cfg, ExpressivityConfig):
        raise TypeError(f"cfg={cfg!r:.80} must be an ExpressivityConfig")
    cfg.validate()
    start = time.perf_counter()
    root = jax.random.PRNGKey(cfg.seed)
    arrays: dict[str, np.ndarray] = {}
    summary = []
    log_steps = np.array(log_schedule(cfg.steps, log_points=60))
    log_steps = log_steps[log_steps < cfg.steps]  # trace[k] is the loss before update k
    bar = tqdm(cfg.tokens, desc=EXPRESSIVITY, unit="T", disable=not progress, leave=False)
    for T in bar:
        bar.set_postfix(T=T)
        t_arrays, row = _expressivity_at(cfg, jax.random.fold_in(root, T), T, log_steps)
        arrays.update({f"T{T}_{k}": v for k, v in t_arrays.items()})
        summary.append(row)
    bar.close()
    arrays["log_steps"] = log_steps
    results = {
        "schema_version": SCHEMA_VERSION,
        "experiment": EXPRESSIVITY,
        "config": dataclasses.asdict(cfg),
        "config_hash": expressivity_key(cfg),
        "wall_time_s": time.perf_counter() - start,
        "loss": "mean row KL(P_s || A_s), Adam with exponential step decay, float32",
        "error": "best restart (lowest KL) per target, errors recomputed in float64; "
        "tv = mean row total variation",
        "summary": summary,
    }
    results["headline"] = headline(results)
    return {"results": results, "arrays": arrays}


def _expressivity_at(
    cfg: ExpressivityConfig, key: jax.Array, T: int, log_steps: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The fits at one sequence length T: (arrays without the 'T{T}_' prefix, summary row)."""
    d = cfg.width_factor * T
    sizes = cfg.head_sizes(T)
    fits = expressivity_fits(
        key,
        T=T,
        d=d,
        head_sizes=tuple(sizes),
        targets=cfg.targets,
        restarts=cfg.restarts,
        steps=cfg.steps,
        lr=cfg.lr,
        lr_final=cfg.lr_final,
        init_scale=cfg.init_scale,
        dirichlet=cfg.dirichlet,
    )
    X, P = np.asarray(fits["X"], np.float64), np.asarray(fits["P"], np.float64)
    P = P / P.sum(axis=-1, keepdims=True)  # rows sum to 1 in float64 too (else KL can be < 0)
    err = attention_errors(fits["Q"], fits["K"], X, P[None, :, None])  # each (n_a, M, R)
    pick = np.argmin(err["kl"], axis=2)[..., None]  # (n_a, M, 1): the best restart per target
    best = {k: np.take_along_axis(v, pick, axis=2)[..., 0] for k, v in err.items()}  # (n_a, M)
    trace = np.take_along_axis(np.asarray(fits["trace"]), pick[..., None], axis=2)[:, :, 0]
    fitted = best["tv"].max(axis=1) < cfg.tol  # (n_a,): every target fitted
    arrays = {"head_sizes": np.array(sizes), "X": X, "targets": P, **err}
    arrays.update({"best_" + k: v for k, v in best.items()})
    arrays["trace"] = trace[:, :, log_steps]  # (n_a, M, L) best restarts
    row = {
        "T": T,
        "d": d,
        "head_sizes": sizes,
        "param_count": [inits.param_count(1, d, "factored", a) for a in sizes],
        "key_query_params": [2 * d * a for a in sizes],
        "best_tv_mean": best["tv"].mean(axis=1).tolist(),
        "best_tv_max": best["tv"].max(axis=1).tolist(),
        "best_kl_mean": best["kl"].mean(axis=1).tolist(),
        "best_kl_max": best["kl"].max(axis=1).tolist(),
        "best_max_abs_max": best["max_abs"].max(axis=1).tolist(),
        "fits_all_targets": fitted.tolist(),
        "reached_at": next((a for i, a in enumerate(sizes) if fitted[i:].all()), None),
        "theory_threshold": min_rank_threshold(T),
    }
    return arrays, row


def headline(results: dict[str, Any]) -> dict[str, dict]:
    """The experiment's headline (from its results dict): per T, the smallest head size d_h from which
    every target is fitted (None: none fitted them all) beside the theory's T − 1."""
    return {
        f"threshold_T{row['T']}": entry(
            f"d_h that fits (T = {row['T']})",
            row["reached_at"],
            closed_form=row["theory_threshold"],
            about=f"smallest d_h from which every target's best error is below the tolerance; "
            f"closed form: T − 1 = {row['theory_threshold']}",
        )
        for row in results["summary"]
    }


def expressivity_key(cfg: ExpressivityConfig | None = None) -> str:
    """The ``config_hash`` that ``run_expressivity`` writes, without running anything."""
    return digest({"payload": dataclasses.asdict(cfg or ExpressivityConfig())})


def produce_expressivity(out_dir: Path, progress: bool = True, cfg: ExpressivityConfig | None = None) -> None:
    """Run the expressivity experiment (default size) and write its results into ``out_dir``
    (a figures ``Entry.produce``)."""
    write_experiment(
        run_expressivity(cfg or ExpressivityConfig(), progress=progress), out_dir, "expressivity.npz"
    )
