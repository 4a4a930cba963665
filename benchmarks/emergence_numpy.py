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
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import jax
import numpy as np

from dynamics.api import run_sweep
from dynamics.config.grid import grid_preset
from dynamics.config.overrides import apply_overrides
from dynamics.core.data import data_model, trial_data
from dynamics.core.engine import minibatch_key
from dynamics.sweeps.plan import trial_keys


def batches(cfg, trial: int, world, steps: int):
    """The online batches (X, y) of updates 0..steps−1 of trial ``trial``, as the engine draws them."""
    model = data_model(cfg.data)
    key = minibatch_key(trial_keys(cfg)[trial])
    draw = jax.jit(lambda k: model.sample(world, k, cfg.optim.batch_size)[:2])
    with jax.enable_x64(False):
        for t in range(steps):
            X, y = draw(jax.random.fold_in(key, t))
            yield np.asarray(X, np.float64), np.asarray(y, np.float64)


def simulate(cfg, trial: int) -> tuple[np.ndarray, np.ndarray]:
    """(attention on the relevant positions, test loss) at every step 0..steps, float64."""
    data = trial_data(cfg, trial)
    world = jax.tree_util.tree_map(np.asarray, data.world)
    T, d, B = cfg.data.T, cfg.data.d, cfg.data.copies
    groups = np.arange(T) if cfg.data.copy_logits == "free" else np.minimum(np.arange(T), T - B)
    a, U, lr = np.zeros(groups.max() + 1), np.zeros((d, d)), cfg.optim.lr
    relevant = data.mask_test[0]  # the last B positions
    Xt, yt = data.X_test.astype(np.float64), data.y_test.astype(np.float64)
    attn, loss = [], []

    def record():
        alpha = np.exp(a[groups] - a[groups].max())
        alpha /= alpha.sum()
        attn.append(alpha[relevant].sum())
        loss.append(np.mean((np.einsum("t,ntd->nd", alpha, Xt) @ U - yt) ** 2))

    record()
    for X, y in batches(cfg, trial, world, cfg.optim.steps):
        alpha = np.exp(a[groups] - a[groups].max())
        alpha /= alpha.sum()  # (T,)
        xbar = np.einsum("t,ntd->nd", alpha, X)  # (n, d)
        g = 2 * (xbar @ U - y) / y.size  # dL/dŷ (n, o)
        v = np.einsum("ntd,do,no->t", X, U, g)  # dL/dα_t
        g_pos = alpha * (v - alpha @ v)  # dL/ds_t
        U = U - lr * xbar.T @ g
        a = a - lr * np.bincount(groups, g_pos)  # a tied logit: the sum over its positions
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
        ours = {"t_att": first(attn, 0.5), "t_loss": first(loss, 0.5 * loss[0], below=True)}
        theirs = mh[mh.trial == trial].iloc[0]
        rows.append({k: (float(theirs[k]), ours[k]) for k in ours})
    rel = max(abs(m - n) / n for r in rows for m, n in r.values())
    return {"rows": rows, "max_rel": rel, "closed_form": closed_form(cfg)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--T", default="16")
    parser.add_argument("--d", default="16")
    parser.add_argument("--copies", default="1")
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)
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
