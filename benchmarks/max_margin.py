"""Max-margin token selection: mhsim beside an independent float64 reference (and the authors' code).

The setting of Tarzanagh, Li, Thrampoulidis, Oymak (2023): one softmax head, query x_1 (or a
learned query p), a readout fixed to a unit v, logistic loss, normalised GD
θ ← θ − η ∇L/‖∇L‖. ``reference`` is that update in plain float64 numpy with a softmax derivative
that forms no difference of nearly equal numbers: ∂f/∂s_t = a_t Σ_s a_s (h_t − h_s) with
h_t = ⟨x_t, v⟩, and σ(−z) as exp(−log(1 + e^z)). It shares nothing with mhsim but the data and
θ(0). ``python -m benchmarks.max_margin`` runs the ``max-margin`` preset (30 data sets) and the
reference on the same data and θ(0), and prints the mean corr(W, W^mm) at t = 2000 of each.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _sigmoid_neg(z: np.ndarray) -> np.ndarray:
    """σ(−z) = 1/(1 + e^z) without overflow."""
    return np.exp(-np.logaddexp(0.0, z))


def gradient(theta: np.ndarray, X: np.ndarray, y: np.ndarray, v: np.ndarray, query: str) -> np.ndarray:
    """∇ of the mean logistic loss of f(X) = vᵀXᵀ softmax(s) in θ (W (d, d) with s_t = x_tᵀ W x_q,
    or p (d,) with s_t = x_tᵀ p), float64, cancellation-free (module docstring)."""
    if query == "learned":
        s = X @ theta  # (n, T)
    else:
        x_q = X[:, 0] if query == "first" else X[:, -1]
        s = np.einsum("ntd,de,ne->nt", X, theta, x_q)
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)  # (n, T)
    h = X @ v  # (n, T)
    f = np.sum(a * h, axis=1)  # (n,)
    dl_df = -y * _sigmoid_neg(y * f) / len(y)  # (n,)
    diff = h[:, :, None] - h[:, None, :]  # (n, t, s) h_t − h_s
    df_ds = a * np.einsum("ns,nts->nt", a, diff)  # (n, T)
    c = dl_df[:, None] * df_ds  # (n, T)
    if query == "learned":
        return np.einsum("nt,ntd->d", c, X)
    return np.einsum("nt,ntd,ne->de", c, X, x_q)


def reference(X, y, v, theta0, *, lr: float, steps: int, every: int, query: str = "first", eps: float = 0.0):
    """θ(t) of normalised GD at t = 0, every, 2·every, …, steps: (steps // every + 1, *θ's shape),
    float64. ``eps`` > 0: the step g/(‖g‖ + ε) of the authors' code instead of g/‖g‖."""
    X, y, v = (np.asarray(a, np.float64) for a in (X, y, v))
    theta = np.array(theta0, np.float64)
    out = [theta.copy()]
    for t in range(1, steps + 1):
        g = gradient(theta, X, y, v, query)
        scale = np.max(np.abs(g))
        norm = scale * np.linalg.norm(g / scale) if scale > 0 else 0.0  # no underflow of ‖g‖²
        if norm + eps > 0:
            theta = theta - lr * g / (norm + eps)
        if t % every == 0:
            out.append(theta.copy())
    return np.array(out)


def corr(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """⟨A_l, B⟩/(‖A_l‖‖B‖) for each row l of A (Frobenius), float64."""
    A = np.asarray(A, np.float64).reshape(len(A), -1)
    b = np.asarray(B, np.float64).reshape(-1)
    return A @ b / (np.linalg.norm(A, axis=1) * np.linalg.norm(b))


def preset_against_reference(name: str = "max-margin", trials: int | None = None, x64: bool = False) -> dict:
    """Run preset ``name`` (``trials`` data sets, default the preset's) and the reference on every
    trial's data and θ(0): both curves' corr(θ, θ^mm) (θ^mm for the reference's final selection),
    ‖θ‖, and the run times."""
    import dataclasses

    import jax

    from dynamics import run_sweep
    from dynamics.config.schema import preset
    from dynamics.core.data import trial_data
    from dynamics.theory import diagnostics as dg

    cfg = preset(name)
    if trials is not None:
        cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, trials=trials))
    jax.config.update("jax_enable_x64", x64)
    t0 = time.perf_counter()
    res = run_sweep(cfg, progress=False)
    t_mhsim = time.perf_counter() - t0
    cfg, q = res.config, res.config.model.query
    key = "k" if q == "learned" else "W"
    theta = np.asarray(res.curves[f"param_{key}"], np.float64)[0, :, :, 0]  # (trials, L, …)
    every = int(np.diff(res.steps)[0])
    out = {k: [] for k in ("corr_mhsim", "corr_ref", "norm_mhsim", "norm_ref", "corr_between")}
    t0 = time.perf_counter()
    for t in range(theta.shape[0]):
        data = trial_data(cfg, t)
        lat = data.world.latents
        start = lat["k0"] if q == "learned" else lat["W0"]
        ref = reference(
            data.X_train,
            data.y_train,
            lat["v"],
            start,
            lr=cfg.optim.lr,
            steps=cfg.optim.steps,
            every=every,
            query=q,
        )
        X = np.asarray(data.X_train, np.float64)
        s = _scores_ref(ref[-1], X, q)
        sel = np.argmax(s, axis=1)
        mm = dg.max_margin_p(X, sel) if q == "learned" else dg.max_margin_W(X, sel, q).W
        out["corr_mhsim"].append(corr(theta[t], mm))
        out["corr_ref"].append(corr(ref, mm))
        out["norm_mhsim"].append(np.linalg.norm(theta[t].reshape(len(ref), -1), axis=1))
        out["norm_ref"].append(np.linalg.norm(ref.reshape(len(ref), -1), axis=1))
        out["corr_between"].append(
            np.sum(theta[t].reshape(len(ref), -1) * ref.reshape(len(ref), -1), 1)
            / (out["norm_mhsim"][-1] * out["norm_ref"][-1])
        )
    res_out = {k: np.array(v) for k, v in out.items()}
    res_out.update(steps=np.asarray(res.steps), seconds_mhsim=t_mhsim, seconds_ref=time.perf_counter() - t0)
    return res_out


def _scores_ref(theta, X, query):
    if query == "learned":
        return X @ theta
    x_q = X[:, 0] if query == "first" else X[:, -1]
    return np.einsum("ntd,de,ne->nt", X, theta, x_q)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="max-margin", choices=("max-margin", "max-margin-prompt"))
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--x64", action="store_true")
    args = parser.parse_args(argv)
    r = preset_against_reference(args.preset, args.trials, args.x64)
    print(
        f"{args.preset} ({'x64' if args.x64 else 'float32'}), {r['corr_ref'].shape[0]} data sets, "
        f"mhsim {r['seconds_mhsim']:.1f} s, reference {r['seconds_ref']:.1f} s"
    )
    print(
        f"  mean corr(θ, θ^mm) at t = {r['steps'][-1]}: mhsim {r['corr_mhsim'][:, -1].mean():.6f}, "
        f"reference {r['corr_ref'][:, -1].mean():.6f}"
    )
    print(f"  min over trials and logged steps of corr(θ_mhsim, θ_ref): {np.nanmin(r['corr_between']):.8f}")
    rel = np.abs(r["norm_mhsim"] - r["norm_ref"]) / r["norm_ref"]
    print(f"  max relative |‖θ_mhsim‖ − ‖θ_ref‖|: {rel.max():.2e}")


if __name__ == "__main__":
    main()
