"""An independent float64 numpy simulation of the emergence task's vector model, fed the batches
mhsim's online SGD trains on, against mhsim's emergence steps; and both beside the closed form.

The model (written here, not mhsim's): position logits a ∈ R^G (G = T, or T − B + 1 with tied
copies), a readout U ∈ R^{d×d}, ŷ = Uᵀ Σ_t softmax(a)_t x_t, loss the mean over examples and
outputs of (ŷ − y)², plain SGD from zero. Its batches are the data model's draws with the engine's
keys (``trial_keys``, ``minibatch_key``, fold_in(·, t)), its world and test set ``trial_data``'s.

    PYTHONPATH=. python -m benchmarks.emergence_numpy --T 8,16,32 --d 16 --trials 4

prints, per (T, d, B, tie), each trial's t_att from mhsim and from numpy and their largest
relative difference, and the closed form t* = √(π/2)·√d·T / (2·lr) (lr the mhsim step, half the
½-loss step η: docs/frontier.md), over B (tied) or √B (free).

With ``--independent`` the numpy simulation draws its own data with numpy's generator, from the data
model's definition (not mhsim's sampler): per trial a Haar-random orthogonal W* and a fixed token
x̄ ~ N(0, I_d); each example T tokens x_t ~ N(0, I_d) whose last B positions hold one relevant
token, x̄ with probability p (the test set with the test repetition), y = W* x_r + σ g. Both sides
run their own trials of a grid preset's setting (mhsim with its own seeds), and the means are
compared::

    PYTHONPATH=. python -m benchmarks.emergence_numpy --independent --grid emergence-T --trials 20

prints, per setting, mean t_att and t_loss ± one standard error for mhsim and for numpy (both on
mhsim's logged steps), the relative difference of the means, whether it is within 3 % or within 2
combined standard errors, the trials that never emerged, and t*/η.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import jax
import numpy as np

from dynamics.api import run_sweep
from dynamics.config.grid_axes import grid_preset
from dynamics.config.overrides import apply_overrides
from dynamics.core.data import data_model
from dynamics.core.sampling import minibatch_key
from dynamics.sweeps.emergence import FRACTION, THRESHOLD
from dynamics.sweeps.plan import trial_keys
from dynamics.sweeps.trials import trial_data


def batches(cfg, trial: int, world, steps: int):
    """The online batches (X, y) of updates 0..steps−1 of trial ``trial``, as the engine draws them."""
    model = data_model(cfg.data)
    key = minibatch_key(trial_keys(cfg)[trial])
    draw = jax.jit(lambda k: model.sample(world, k, cfg.optim.batch_size)[:2])
    with jax.enable_x64(False):
        for t in range(steps):
            X, y = draw(jax.random.fold_in(key, t))
            yield np.asarray(X, np.float64), np.asarray(y, np.float64)


def attention(a: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The position softmax (k, T) of k runs' logits a (k, G), position t reading logit groups[t]."""
    alpha = np.exp(a[:, groups] - a[:, groups].max(axis=1, keepdims=True))
    return alpha / alpha.sum(axis=1, keepdims=True)


def sgd_step(a, U, X, y, groups: np.ndarray, lr: float):
    """One SGD update of k runs of the vector model ŷ = Σ_t α_t x_tᵀ U on their batches X (k, n, T, d),
    y (k, n, o), the loss the mean over examples and outputs: the new (a (k, G), U (k, d, o))."""
    alpha = attention(a, groups)  # (k, T)
    xbar = np.einsum("kt,kntd->knd", alpha, X)  # (k, n, d)
    g = 2 * (xbar @ U - y) / y[0].size  # dL/dŷ (k, n, o)
    v = np.einsum("kntd,knd->kt", X, g @ U.transpose(0, 2, 1))  # dL/dα_t
    g_pos = alpha * (v - np.sum(alpha * v, axis=1, keepdims=True))  # dL/ds_t
    tied = np.zeros_like(a)
    np.add.at(tied, (slice(None), groups), g_pos)  # a tied logit: the sum over its positions
    return a - lr * tied, U - lr * xbar.transpose(0, 2, 1) @ g


def position_groups(data) -> np.ndarray:
    """The logit each position reads: its own (free copies), or the last B share one (tied)."""
    T, B = data.T, data.copies
    return np.arange(T) if data.copy_logits == "free" else np.minimum(np.arange(T), T - B)


def simulate(cfg, trial: int) -> tuple[np.ndarray, np.ndarray]:
    """(attention on the relevant positions, test loss) at every step 0..steps, float64."""
    data = trial_data(cfg, trial)
    world = jax.tree_util.tree_map(np.asarray, data.world)
    d, groups = cfg.data.d, position_groups(cfg.data)
    a, U, lr = np.zeros((1, groups.max() + 1)), np.zeros((1, d, d)), cfg.optim.lr
    relevant = data.mask_test[0]  # the last B positions
    Xt, yt = data.X_test.astype(np.float64), data.y_test.astype(np.float64)
    attn, loss = [], []

    def record():
        alpha = attention(a, groups)[0]
        attn.append(alpha[relevant].sum())
        loss.append(np.mean((np.einsum("t,ntd->nd", alpha, Xt) @ U[0] - yt) ** 2))

    record()
    for X, y in batches(cfg, trial, world, cfg.optim.steps):
        a, U = sgd_step(a, U, X[None], y[None], groups, lr)
        record()
    return np.array(attn), np.array(loss)


def first(curve: np.ndarray, level: float, below: bool = False) -> float:
    hit = curve <= level if below else curve >= level
    return float(np.argmax(hit)) if hit.any() else math.nan


def closed_form(cfg) -> float:
    """t* in steps: √(π/2)·√d·T / η with η = 2·lr (the ½-loss step), / B tied, / √B free."""
    B = cfg.data.copies
    share = B if cfg.data.copy_logits == "tied" else math.sqrt(B)
    return math.sqrt(math.pi / 2) * math.sqrt(cfg.data.d) * cfg.data.T / (2 * cfg.optim.lr) / share


def compare(cfg) -> dict:
    result = run_sweep(cfg, progress=False)
    mh = result.emergence_frame()
    rows = []
    for trial in range(cfg.sweep.trials):
        attn, loss = simulate(cfg, trial)
        ours = {"t_att": first(attn, THRESHOLD), "t_loss": first(loss, FRACTION * loss[0], below=True)}
        theirs = mh[mh.trial == trial].iloc[0]
        rows.append({k: (float(theirs[k]), ours[k]) for k in ours})
    rel = max(abs(m - n) / n for r in rows for m, n in r.values())
    return {"rows": rows, "max_rel": rel, "closed_form": closed_form(cfg)}


def haar_orthogonal(rng: np.random.Generator, k: int, d: int) -> np.ndarray:
    """k Haar-random orthogonal d×d matrices (k, d, d): QR of a Gaussian with R's diagonal made
    positive."""
    q, r = np.linalg.qr(rng.standard_normal((k, d, d)))
    return q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[:, None, :]


def draw_examples(rng, W, x_bar, n: int, T: int, copies: int, repetition: float, noise: float):
    """n examples per trial of the emergence model, from its definition: X (k, n, T, d) with
    x_t ~ N(0, I_d) and the last ``copies`` positions the relevant token x_r (x̄ with probability
    ``repetition``, else fresh), y = W* x_r + noise·g (k, n, d). W (k, d, d), x_bar (k, d)."""
    k, d = x_bar.shape
    X = rng.standard_normal((k, n, T, d))
    fresh = X[:, :, T - 1, :]  # the last token's own draw is the fresh relevant token
    repeat = rng.random((k, n)) < repetition
    x_r = np.where(repeat[..., None], x_bar[:, None, :], fresh)  # (k, n, d)
    X[:, :, T - copies :, :] = x_r[:, :, None, :]
    y = np.einsum("kod,knd->kno", W, x_r)
    if noise:
        y = y + noise * rng.standard_normal(y.shape)
    return X, y


def simulate_independent(cfg, logged: np.ndarray, trials: int, seed: int) -> dict[str, np.ndarray]:
    """t_att and t_loss (trials,) of ``trials`` independent float64 runs of the vector model under
    online SGD on numpy's own draws, each the first of the ``logged`` steps past its level (NaN:
    never within cfg's steps). Stops once every trial has both."""
    data, optim = cfg.data.resolved(), cfg.optim
    T, d, B, n, lr = data.T, data.d, data.copies, optim.batch_size, optim.lr
    rng = np.random.Generator(np.random.SFC64(seed))
    W, x_bar = haar_orthogonal(rng, trials, d), rng.standard_normal((trials, d))
    draw = dict(T=T, copies=B, noise=data.target_noise)
    Xt, yt = draw_examples(rng, W, x_bar, data.n_test, repetition=data.test_repetition, **draw)
    groups = position_groups(data)
    a, U = np.zeros((trials, groups.max() + 1)), np.zeros((trials, d, d))
    found = {"t_att": np.full(trials, np.nan), "t_loss": np.full(trials, np.nan)}
    loss0, marks = None, set(int(s) for s in logged)

    for step in range(optim.steps + 1):
        if step in marks:
            alpha = attention(a, groups)
            xbar = np.einsum("kt,kntd->knd", alpha, Xt)
            loss = np.mean((xbar @ U - yt) ** 2, axis=(1, 2))
            loss0 = loss if loss0 is None else loss0
            hits = {"t_att": alpha[:, T - B :].sum(axis=1) >= THRESHOLD, "t_loss": loss <= FRACTION * loss0}
            for name, hit in hits.items():
                found[name] = np.where(np.isnan(found[name]) & hit, step, found[name])
            if not any(np.isnan(v).any() for v in found.values()):
                break
        if step == optim.steps:
            break
        X, y = draw_examples(rng, W, x_bar, n, repetition=data.repetition, **draw)
        a, U = sgd_step(a, U, X, y, groups, lr)
    return found


def mean_se(t: np.ndarray) -> tuple[float, float, int]:
    """(mean, standard error, count) over the finite entries of ``t``."""
    done = t[np.isfinite(t)]
    se = float(done.std(ddof=1) / math.sqrt(done.size)) if done.size > 1 else math.nan
    return float(done.mean()) if done.size else math.nan, se, int(done.size)


def compare_independent(cfg, seed: int) -> dict:
    """mhsim's trials of ``cfg`` and as many independent numpy trials: per emergence time the mean
    ± SE of each, their relative difference and whether it is within 3 % or 2 combined SEs."""
    result = run_sweep(cfg, progress=False)
    mh = result.emergence_frame()
    ours = simulate_independent(cfg, np.asarray(result.steps), cfg.sweep.trials, seed)
    out = {"closed_form": closed_form(cfg)}
    for name in ("t_att", "t_loss"):
        (m, sm, nm), (o, so, no) = mean_se(mh[name].to_numpy(np.float64)), mean_se(ours[name])
        rel, se = (m - o) / o, math.hypot(sm, so)
        out[name] = {
            "mhsim": (m, sm, nm),
            "numpy": (o, so, no),
            "rel": rel,
            "z": (m - o) / se if se else (0.0 if m == o else math.copysign(math.inf, m - o)),
            "ok": abs(rel) <= 0.03 or abs(m - o) <= 2 * se,
        }
    return out


def run_independent(args) -> None:
    base, axes = grid_preset(args.grid)
    ((axis, values),) = axes.items()
    steps, every = base.optim.steps, args.log_every or base.sweep.log_every
    print(f"{args.grid}: {args.trials} trials each side, steps {steps}, log every {every}")
    for value in values.split(","):
        over = {"data": {axis: float(value) if axis == "repetition" else int(value)}}
        over["sweep"] = {"trials": args.trials, **({"log_every": args.log_every} if args.log_every else {})}
        cfg = apply_overrides(base, over, "cli")
        cfg = dataclasses.replace(cfg, data=cfg.data.resolved())
        start = time.perf_counter()
        out = compare_independent(cfg, args.seed + int(float(value) * 1000))
        cells = []
        for name in ("t_att", "t_loss"):
            r = out[name]
            (m, sm, nm), (o, so, no) = r["mhsim"], r["numpy"]
            miss = "" if nm == no == args.trials else f" (emerged {nm}/{no} of {args.trials})"
            cells.append(
                f"{name} mhsim {m:.1f}±{sm:.1f} numpy {o:.1f}±{so:.1f} rel {r['rel']:+.2%} "
                f"z {r['z']:+.2f} {'ok' if r['ok'] else 'OUTSIDE'}{miss}"
            )
        print(
            f"{axis}={value:>4}: "
            + "; ".join(cells)
            + f"; t*/eta {out['closed_form']:.0f} [{time.perf_counter() - start:.0f} s]",
            flush=True,
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--T", default="16")
    parser.add_argument("--d", default="16")
    parser.add_argument("--copies", default="1")
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--trials", type=int, default=None, help="3 (20 with --independent)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--independent", action="store_true", help="numpy draws its own data")
    parser.add_argument("--grid", default="emergence-T", help="the grid preset (--independent)")
    parser.add_argument("--log-every", type=int, default=None, help="the preset's if not given")
    parser.add_argument("--seed", type=int, default=12345, help="numpy's seed (--independent)")
    args = parser.parse_args(argv)
    args.trials = args.trials or (20 if args.independent else 3)
    if args.independent:
        run_independent(args)
        return
    base, _ = grid_preset("emergence")
    for T in map(int, args.T.split(",")):
        for d in map(int, args.d.split(",")):
            for B in map(int, args.copies.split(",")):
                data = {"T": T, "d": d, "copies": B, "copy_logits": "tied" if args.tied else "free"}
                cfg = apply_overrides(
                    base, {"data": data, "sweep": {"trials": args.trials, "log_every": 1}}, "cli"
                )
                guess = closed_form(cfg)
                steps = args.steps or int(3 * guess) + 50
                cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, steps=steps))
                out = compare(cfg)
                cells = "  ".join(f"{m:.0f}/{n:.0f}" for r in out["rows"] for m, n in [r["t_att"]])
                print(
                    f"T={T:>4} d={d:>4} B={B} {data['copy_logits']}: t_att mhsim/numpy {cells}; "
                    f"max rel diff (t_att, t_loss) {out['max_rel']:.2%}; closed form {out['closed_form']:.0f}"
                )


if __name__ == "__main__":
    main()
