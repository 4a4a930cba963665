"""The low-rank bottleneck of multi-head attention (Bhojanapalli et al., ICML 2020).

Two experiments, each a preset of ``python -m dynamics.run``:

``bottleneck-expressivity``
    For a fixed random X ∈ R^{T×d} (d ≥ T, so X has rank T) fit one factored head's
    attention matrix A = softmax(X W Xᵀ), W = Q Kᵀ with Q, K ∈ R^{d×d_h}, to random
    row-stochastic targets P (rows uniform on the simplex) by minimising the mean row
    KL(P_s ‖ A_s) with Adam, many restarts at once; record the best error per d_h.
    softmax is unchanged by adding c_s to row s, so A = P needs X W Xᵀ = log P + c 1ᵀ
    for some c, and min_c rank(log P + c 1ᵀ) = T − 1 for a generic P: d_h ≥ T − 1
    fits any positive P exactly, d_h ≤ T − 2 cannot (the paper states d_h ≥ T).

``bottleneck-heads``
    Train factored multi-head classifiers at a fixed width d on DM1 and the planted
    model for H = 1, 2, 4, … with head size ``split`` (d_h = d/H, the standard layout,
    about 2d² key-query parameters for every H) and fixed (d_h = T, growing as 2dTH),
    and a fixed layout whose head count H' matches the split layout's parameter count.

Both write ``results.json`` (with ``config_hash``) and an ``.npz`` of arrays (``write``);
``produce_expressivity`` and ``produce_heads`` run them at their default sizes for
``python -m figures``. This module holds the experiments only (configs, fits, sweeps, cache
keys, files); their command line is ``dynamics.cli.bottleneck``, their figures are in
``figures.bottleneck``.
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
    PAPER_SIZES,
    Config,
    ConfigError,
    apply_overrides,
    digest,
    log_schedule,
    preset,
    validate,
)
from dynamics.core import model as mdl
from dynamics.core import update as upd
from dynamics.sweeps.devices import device_name
from dynamics.sweeps.results import SCHEMA_VERSION, run_record, versions, write_files
from dynamics.sweeps.sweep import run_sweep

EXPRESSIVITY = "bottleneck-expressivity"
HEADS = "bottleneck-heads"
NAMES = (EXPRESSIVITY, HEADS)


# ----------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class ExpressivityConfig:
    tokens: tuple[int, ...] = (5, 10, 16)  # sequence lengths T, one line each in the figure
    width_factor: int = 2  # d = width_factor·T (≥ 1: X has rank T); d_h runs 1 … d
    targets: int = 8  # random row-stochastic targets P per T (the error is reported per target)
    restarts: int = 8  # random inits per target; the best (lowest KL) one counts
    steps: int = 3000  # Adam steps per fit; more gets closer to the infimum below T − 1
    lr: float = 0.05  # Adam's initial step, decayed exponentially to lr·lr_final
    lr_final: float = 0.01  # the last step's fraction of lr (a decay helps reach ~0 error)
    init_scale: float = 1.0  # σ₀: Q, K entries N(0, σ₀²/d), as model.init_params
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


@dataclass(frozen=True)
class HeadsConfig:
    data_models: tuple[str, ...] = ("dm1", "planted")  # one column of the figure each
    width: int = 32  # the fixed embedding width d
    tokens: int = 10  # T; the fixed layout's head size is T
    heads: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # H, at most d (split needs d // H >= 1)
    trials: int | None = None  # None: the preset's (5)
    steps: int | None = None  # None: the preset's (1000 Adam steps)
    n_train: tuple[int, ...] | None = None  # per data model; None: PAPER_SIZES
    n_test: tuple[int, ...] | None = None
    seed: int = 0  # every sweep uses this seed: the same data for split and fixed

    def validate(self) -> HeadsConfig:
        for name in ("data_models", "heads", "n_train", "n_test"):
            value = getattr(self, name)
            if not (isinstance(value, tuple | list) or (value is None and name.startswith("n_"))):
                raise ConfigError(f"{name}={value!r} must be a tuple, e.g. {getattr(HeadsConfig, name)!r}")
        for name in ("trials", "steps", "seed"):
            value, lo = getattr(self, name), 0 if name == "seed" else 1
            if not (value is None and name != "seed") and (
                isinstance(value, bool) or not isinstance(value, int) or value < lo
            ):
                raise ConfigError(f"{name}={value!r} must be an integer >= {lo}")
        for m in self.data_models:
            if m not in PAPER_SIZES:
                raise ConfigError(f"data_models={m!r} is not one of {', '.join(map(repr, PAPER_SIZES))}")
        if not self.heads or not self.data_models:
            raise ConfigError("heads and data_models must be non-empty")
        for name, value in (
            ("width", self.width),
            ("tokens", self.tokens),
            *(("heads", h) for h in self.heads),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        too_many = [h for h in self.heads if h > self.width]
        if too_many:
            raise ConfigError(f"heads={too_many} exceed width={self.width}: the split layout needs H <= d")
        for name, sizes in (("n_train", self.n_train), ("n_test", self.n_test)):
            if sizes is not None and len(sizes) != len(self.data_models):
                raise ConfigError(f"{name}={list(sizes)} needs one value per data model {self.data_models}")
        return self

    def base(self, data_model: str) -> Config:
        """The sweep config of one data model (layout and heads are set per sweep)."""
        i = self.data_models.index(data_model)
        n_train, n_test = PAPER_SIZES[data_model]
        data = {
            "model": data_model,
            "d": self.width,
            "T": self.tokens,
            "n_train": self.n_train[i] if self.n_train else n_train,
            "n_test": self.n_test[i] if self.n_test else n_test,
        }
        sweep: dict[str, Any] = {"seed": self.seed}
        if self.trials is not None:
            sweep["trials"] = self.trials
        optim = {} if self.steps is None else {"steps": self.steps}
        over = {"data": data, "sweep": sweep, "optim": optim}
        cfg = apply_overrides(preset(HEADS), over, HEADS, explicit=False)
        return dataclasses.replace(cfg, name=f"{HEADS}-{data_model}")


QUICK_EXPRESSIVITY = ExpressivityConfig(tokens=(3, 4), targets=2, restarts=2, steps=300, lr=0.1)
QUICK_HEADS = HeadsConfig(
    width=8, tokens=4, heads=(1, 2, 8), trials=2, steps=10, n_train=(16, 16), n_test=(20, 20)
)


# ----------------------------------------------------------------------------- expressivity


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
    params = mdl.init_params(key, 1, d, init="normal", scale=init_scale, key_query="factored", head_size=A)
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
        "param_count": [mdl.param_count(1, d, "factored", a) for a in sizes],
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


# ----------------------------------------------------------------------------- heads at a fixed width


def matched_heads(n_heads: int, d: int, head_size: int) -> int:
    """H' ≥ 1 whose fixed-head-size parameter count is closest to the split layout's with H heads."""
    target = mdl.param_count(n_heads, d, "factored", "split")
    per_head = mdl.param_count(1, d, "factored", head_size)
    lo = max(1, target // per_head)
    return min((lo, lo + 1), key=lambda h: (abs(h * per_head - target), h))


def _layouts(cfg: HeadsConfig) -> dict[str, tuple[str | int, tuple[int, ...]]]:
    """layout -> (head_size, heads to run). The fixed sweep also runs the parameter-matched H'."""
    T = cfg.tokens
    matched = {matched_heads(h, cfg.width, T) for h in cfg.heads}
    return {"split": ("split", tuple(cfg.heads)), "fixed": (T, tuple(sorted(set(cfg.heads) | matched)))}


def sweep_configs(cfg: HeadsConfig) -> dict[tuple[str, str], Config]:
    """(data model, layout) -> the validated sweep config that ``run_heads`` runs."""
    cfg.validate()
    out = {}
    for m in cfg.data_models:
        for name, (head_size, heads) in _layouts(cfg).items():
            base = cfg.base(m)
            out[m, name] = validate(
                apply_overrides(
                    base,
                    {
                        "model": {"head_size": head_size},
                        "sweep": {"heads": heads},
                        "name": f"{base.name}-{name}",
                    },
                    HEADS,
                    explicit=False,
                )
            )
    return out


def heads_key(cfg: HeadsConfig | None = None) -> str:
    """The ``config_hash`` that ``run_heads`` writes, without running anything."""
    cfg = cfg or HeadsConfig()
    configs = {f"{m}/{name}": c.to_dict() for (m, name), c in sweep_configs(cfg).items()}
    return _heads_hash(cfg, configs)


def _heads_hash(cfg: HeadsConfig, sweeps: dict[str, dict]) -> str:
    return digest({"payload": {"heads": dataclasses.asdict(cfg), "sweeps": sweeps}})


def expressivity_key(cfg: ExpressivityConfig | None = None) -> str:
    """The ``config_hash`` that ``run_expressivity`` writes, without running anything."""
    return digest({"payload": dataclasses.asdict(cfg or ExpressivityConfig())})


def run_heads(cfg: HeadsConfig, *, progress: bool = True) -> dict[str, Any]:
    """Both layouts on every data model through ``run_sweep``: {'results', 'arrays'}."""
    if not isinstance(cfg, HeadsConfig):
        raise TypeError(f"cfg={cfg!r:.80} must be a HeadsConfig")
    start = time.perf_counter()
    jobs = sweep_configs(cfg)  # validates cfg first (H > width is its ConfigError, not the model's)
    layouts = _layouts(cfg)
    arrays: dict[str, np.ndarray] = {}
    summary, configs = [], {}
    for (m, name), sweep_cfg in tqdm(
        jobs.items(), desc=HEADS, unit="sweep", disable=not progress, leave=False
    ):
        head_size, _ = layouts[name]
        res = run_sweep(sweep_cfg, progress=progress)
        configs[f"{m}/{name}"] = res.config.to_dict()
        d = res.config.data.d
        for key in ("train_loss", "test_loss", "train_error", "test_error"):
            arrays[f"{m}__{name}__{key}"] = res.curves[key]  # (n_heads, trials, L)
        arrays[f"{m}__{name}__heads"] = res.heads
        arrays[f"{m}__{name}__steps"] = res.steps
        arrays[f"{m}__{name}__diverged_at"] = res.diverged_at
        for row in res.summary():
            h = row["heads"]
            row.update(
                data_model=m,
                layout=name,
                head_size=mdl.resolve_head_size(head_size, d, h),
                param_count=mdl.param_count(h, d, "factored", head_size),
            )
            summary.append(row)
    matched = [
        {
            "split_heads": h,
            "split_params": mdl.param_count(h, cfg.width, "factored", "split"),
            "fixed_heads": (hm := matched_heads(h, cfg.width, cfg.tokens)),
            "fixed_params": mdl.param_count(hm, cfg.width, "factored", cfg.tokens),
        }
        for h in cfg.heads
    ]
    results = {
        "schema_version": SCHEMA_VERSION,
        "experiment": HEADS,
        "config": dataclasses.asdict(cfg),
        "sweep_configs": configs,
        "config_hash": _heads_hash(cfg, configs),
        "wall_time_s": time.perf_counter() - start,
        "layouts": {
            "split": "d_h = d // H (the standard layout)",
            "fixed": f"d_h = T = {cfg.tokens} for every H",
        },
        "matching": (
            "param_count = H·d + 2·H·d·d_h; the split count is about d + 2d² for every H, so the "
            "fixed layout is matched by its head count H' (closest count), listed in 'matched'"
        ),
        "matched": matched,
        "summary": summary,
    }
    return {"results": results, "arrays": arrays}


# ----------------------------------------------------------------------------- files


def write(run: dict[str, Any], out: Path, npz_name: str) -> tuple[Path, Path]:
    """``npz_name`` then ``results.json`` (last: its presence marks a complete run), atomically."""
    results = {**run["results"], "versions": versions(), "run": run_record(), "device": device_name()}
    return write_files(out, npz_name, run["arrays"], results)


def produce_expressivity(out_dir: Path, progress: bool = True, cfg: ExpressivityConfig | None = None) -> None:
    """Run the expressivity experiment (default size) and write its results into ``out_dir``
    (a figures ``Entry.produce``)."""
    write(run_expressivity(cfg or ExpressivityConfig(), progress=progress), out_dir, "expressivity.npz")


def produce_heads(out_dir: Path, progress: bool = True, cfg: HeadsConfig | None = None) -> None:
    """Run the heads-at-fixed-width experiment (default size) and write its results into
    ``out_dir`` (a figures ``Entry.produce``)."""
    write(run_heads(cfg or HeadsConfig(), progress=progress), out_dir, "heads.npz")
