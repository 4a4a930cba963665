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


def _keys_query(X: np.ndarray, query: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(the keys (n, T_k, d), the query token x_q (n, d), None for a learned query): x_1 or x_T
    among all T keys, or x_T outside the keys x_1…x_{T−1} (query "outside")."""
    if query == "learned":
        return X, None
    if query == "outside":
        return X[:, :-1], X[:, -1]
    return X, X[:, 0] if query == "first" else X[:, -1]


def gradient(theta: np.ndarray, X: np.ndarray, y: np.ndarray, v: np.ndarray, query: str) -> np.ndarray:
    """∇ of the mean logistic loss of f(X) = vᵀXᵀ softmax(s) in θ (W (d, d) with s_t = x_tᵀ W x_q,
    or p (d,) with s_t = x_tᵀ p), float64, cancellation-free (module docstring); for the query
    "outside", X the keys x_1…x_{T−1} and x_q = x_T."""
    X, x_q = _keys_query(X, query)
    if query == "learned":
        s = X @ theta  # (n, T)
    else:
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
    with np.errstate(invalid="ignore", divide="ignore"):  # θ = 0: NaN
        return A @ b / (np.linalg.norm(A, axis=1) * np.linalg.norm(b))


def preset_against_reference(
    name: str = "max-margin",
    trials: int | None = None,
    x64: bool = False,
    query: str | None = None,
    tokens: int | None = None,
) -> dict:
    """Run preset ``name`` (``trials`` data sets, default the preset's; ``query``, ``tokens`` T in
    place of the preset's) and the reference on every trial's data and θ(0): both curves'
    corr(θ, θ^mm) (θ^mm for the reference's final selection), ‖θ‖, and the run times."""
    import dataclasses

    import jax

    from dynamics import run_sweep
    from dynamics.config.schema import preset
    from dynamics.sweeps.trials import trial_data
    from dynamics.theory import svm

    cfg = preset(name)
    if query is not None:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, query=query))
    if tokens is not None:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, T=tokens))
    # θ at every logged step (the per-head view, which carries the saved θ, thins itself by default)
    cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, head_every=1, x64=x64))
    if trials is not None:
        cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, trials=trials))
    jax.config.update("jax_enable_x64", x64)  # the references below in the same precision
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
        mm = svm.max_margin_p(X, sel) if q == "learned" else svm.max_margin_W(X, sel, q).W
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
    X, x_q = _keys_query(X, query)
    if query == "learned":
        return X @ theta
    return np.einsum("ntd,de,ne->nt", X, theta, x_q)


# --------------------------------------------------------------------------- the authors' code
# Tarzanagh et al.'s code (github.com/ucr-optml/max_margin_attention) is only driven from here, never
# part of mhsim: ``authors`` imports the checkout's ``TFasSVM/base.py`` (its ``SelfAttn`` model and
# ``W_svm_solver``) and trains it as their local-convergence notebook does (query x_1: their
# self-attention variant, attn_idx = 0; the step g/(‖g‖ + ε), ε the float64 machine epsilon),
# on their data generator's draws (their seeds 0, 1, 2; torch's generator), W(0) PyTorch's default
# linear init under torch.manual_seed(seed) (their notebook leaves that seed unset).

N, T_TOKENS, D = 6, 8, 10  # their n, T, d


def authors_data(seed: int):
    """Their generator's draw for ``seed``: v (d,), Y (n,) ±1, X (n, T, d) unit tokens (the cross
    query Z is drawn too, as theirs does, and unused), rounded to float32 so that every party
    (theirs, the reference, mhsim in float32 and x64) sees the same numbers."""
    import torch

    g = torch.Generator()
    g.manual_seed(seed)
    v = torch.randn(D, generator=g)
    v = v / torch.norm(v)
    Y = torch.where(torch.randn(N, generator=g) > 0, 1.0, -1.0)
    X = torch.randn((N, T_TOKENS, D), generator=g)
    X = X / torch.norm(X, dim=-1, keepdim=True)
    torch.randn((N, D), generator=g)  # their Z (cross-attention queries), unused with query x_1
    return (np.asarray(a.numpy(), np.float32).astype(np.float64) for a in (X, Y, v))


def run_authors(checkout: str, seed: int, steps: int = 2000, every: int = 10, lr: float = 0.1):
    """Their model trained on ``authors_data(seed)``: (W(0), W(t) at every ``every`` steps, float64)."""
    import sys

    import torch

    sys.path.insert(0, f"{checkout}/TFasSVM")
    from base import SelfAttn  # their model

    X, Y, v = authors_data(seed)
    torch.manual_seed(seed)
    model = SelfAttn(D, univariate=True).double()
    model.W.weight.data = model.W.weight.data.float().double()  # float32 numbers, as the data
    model.v.data = torch.tensor(v)
    Xt, Yt = torch.tensor(X), torch.tensor(Y)
    opt = torch.optim.SGD([model.W.weight], lr=lr)
    eps = torch.finfo(torch.double).eps
    Ws = [model.W.weight.detach().T.numpy().copy()]
    for t in range(1, steps + 1):
        opt.zero_grad()
        out = model(Xt, attn_idx=0).view(-1)
        torch.log(1 + torch.exp(-Yt * out)).mean().backward()
        model.W.weight.grad /= model.W.weight.grad.norm() + eps
        opt.step()
        if t % every == 0:
            Ws.append(model.W.weight.detach().T.numpy().copy())
    return Ws[0], np.array(Ws)


def _run_on_files(folder, x64: bool, **knobs):
    """mhsim's normalised GD (η = 0.1, logistic, U frozen) on ``folder``'s data.npz from its
    theta0.npz, as ``--data data.npz --init-from theta0.npz`` (the data set first, so θ(0) is
    checked against the file's d)."""
    from dynamics import run_sweep
    from dynamics.api import with_overrides
    from dynamics.config.overrides import apply_overrides

    cfg = with_overrides(  # (one head: c_H = 1 under any norm, so none is given)
        None, optimizer="normalized-gd", lr=0.1, loss="logistic", readout_lr_factor=0.0,
        heads=(1,), save_params=True, **knobs,
    )  # fmt: skip
    files = {"data": {"model": "npz", "path": str(folder / "data.npz")}}
    files["model"] = {"init_from": str(folder / "theta0.npz")}
    return run_sweep(apply_overrides(cfg, files, "benchmarks.max_margin"), x64=x64, progress=False)


def mhsim_on(X, Y, v, W0, x64: bool, steps: int = 2000, every: int = 10, folder=None):
    """mhsim on the same data (``--data``) and θ(0) (``--init-from``): W(t) (L, d, d) float64."""
    import tempfile
    from pathlib import Path

    folder = Path(folder or tempfile.mkdtemp())
    np.savez(folder / "data.npz", X_train=X, y_train=Y, X_test=X, y_test=Y)
    np.savez(folder / "theta0.npz", U=v[None], W=W0[None])
    res = _run_on_files(folder, x64, query="first", steps=steps, trials=1, log_every=every)
    return np.asarray(res.curves["param_W"], np.float64)[0, 0, :, 0]


def authors_comparison(checkout: str, seeds=(0, 1, 2), steps: int = 2000) -> list[dict]:
    """Per seed: corr(·, W^mm) and ‖W‖ at the last step of their code, the reference (g/‖g‖ and
    g/(‖g‖ + ε)) and mhsim (float32, x64), and the least corr(W_mhsim(t), W_ref(t)) over the logged
    steps with the largest relative ‖W‖ gap; W^mm for the reference's final selection."""
    from dynamics.theory import svm

    rows = []
    for seed in seeds:
        X, Y, v = authors_data(seed)
        W0, theirs = run_authors(checkout, seed, steps)
        ref = reference(X, Y, v, W0, lr=0.1, steps=steps, every=10)
        ref_eps = reference(X, Y, v, W0, lr=0.1, steps=steps, every=10, eps=float(np.finfo(np.float64).eps))
        sel = np.argmax(_scores_ref(ref[-1], X, "first"), axis=1)
        mm = svm.max_margin_W(X, sel).W
        row = {
            "seed": seed,
            "selection_same_as_theirs": bool(
                np.array_equal(sel, np.argmax(_scores_ref(theirs[-1], X, "first"), axis=1))
            ),
        }
        runs = {"authors": theirs, "reference": ref, "reference_eps": ref_eps}
        for name, x64 in (("mhsim_f32", False), ("mhsim_x64", True)):
            runs[name] = mhsim_on(X, Y, v, W0, x64, steps)
        ref_norm = np.linalg.norm(ref.reshape(len(ref), -1), axis=1)
        for name, W in runs.items():
            flat = W.reshape(len(W), -1)
            norm = np.linalg.norm(flat, axis=1)
            row[name] = {
                "corr_mm": float(corr(W, mm)[-1]),
                "norm": float(norm[-1]),
                "min_corr_to_ref": float(
                    np.min(np.sum(flat * ref.reshape(len(ref), -1), 1) / (norm * ref_norm))
                ),
                "max_norm_rel_gap": float(np.max(np.abs(norm - ref_norm) / ref_norm)),
            }
        rows.append(row)
    return rows


PROMPT_STARTS = (
    (1.0, 0, 0),
    (0.5, 0, 0),
    (0.0, 0, 0),
    (-0.5, 0, 0),
    (-1.0, 0, 0),
    (-1.5, 0, 0),
)  # their p(0)


def authors_prompt_data(seed: int = 0):
    """Their learned-prompt data (n = 3, T = 7, d = 3) from torch's generator at ``seed``: tokens
    0.2·N(0, I) shifted by position, the last coordinate the score (1 on token 1, 0.5 elsewhere),
    labels +1, v = e_3; float64 of float32 numbers."""
    import torch

    n, T, d = 3, 7, 3
    g = torch.Generator()
    g.manual_seed(seed)
    X = torch.randn((n, T, d), generator=g) * 0.2
    X[:, 0] += torch.tensor([1.0, 0, 0])
    X[:, 1 : (T + 1) // 2] += torch.tensor([-1.0, 1, 0])
    X[:, -(T - 1) // 2 :] += torch.tensor([-0.5, -0.5, 0])
    X[:, 0, -1], X[:, 1:, -1] = 1.0, 0.5
    return X.numpy().astype(np.float64), np.ones(n), np.array([0.0, 0.0, 1.0])


def prompt_comparison(steps: int = 1000, x64: bool = False) -> dict:
    """mhsim's learned query (p) on the authors' prompt data from their six starts (``--data``,
    ``--init-from`` with a trial axis) against the reference: corr(p, p^mm) of both at every
    logged step (p^mm for the reference's final selection of each start) and the largest gap."""
    import tempfile
    from pathlib import Path

    from dynamics.theory import svm

    X, Y, v = authors_prompt_data()
    starts = np.array(PROMPT_STARTS, np.float64)
    folder = Path(tempfile.mkdtemp())
    np.savez(folder / "data.npz", X_train=X, y_train=Y, X_test=X, y_test=Y)
    np.savez(folder / "theta0.npz", U=np.tile(v, (6, 1, 1)), k=starts[:, None, :])
    res = _run_on_files(folder, x64, query="learned", steps=steps, trials=6, log_every=10)
    k = np.asarray(res.curves["param_k"], np.float64)[0, :, :, 0]  # (6, L, d)
    gaps, finals = [], []
    for i, p0 in enumerate(starts):
        ref = reference(X, Y, v, p0, lr=0.1, steps=steps, every=10, query="learned")
        mm = svm.max_margin_p(X, np.argmax(X @ ref[-1], axis=1))
        gaps.append(np.nanmax(np.abs(corr(k[i], mm) - corr(ref, mm))))  # p(0) = 0: no corr at t = 0
        finals.append((float(corr(k[i], mm)[-1]), float(corr(ref, mm)[-1])))
    return {"max_gap": float(np.max(gaps)), "final_corr_mhsim_ref": finals}


def _preset_with(**knobs):
    """The ``max-margin`` preset with ``knobs`` (the API's keyword names) and a snapshot at every
    logged step."""
    from dynamics.api import with_overrides

    return with_overrides("max-margin", head_every=1, **knobs)


def gd_alignment(
    lrs=(0.1, 1.0, 10.0), steps: int = 2000, trials: int = 30, at=(10, 100, 1000, 2000)
) -> list[dict]:
    """Plain GD (no normalisation) on the preset's data at each η: mean 1 − corr(W(t), W^mm) and
    mean ‖W(t)‖ over the data sets at the steps ``at``, beside normalised GD's (the preset's)."""
    from dynamics import run_grid, run_sweep
    from dynamics.theory.maxmargin import alignment

    rows = []
    runs = [("normalized-gd", 0.1, run_sweep(_preset_with(steps=steps, trials=trials), progress=False))]
    gd = run_grid(_preset_with(optimizer="gd", steps=steps, trials=trials), lrs=list(lrs), progress=False)
    runs += [("gd", lr, r) for lr, r in zip(lrs, gd, strict=True)]
    for optimizer, lr, res in runs:
        view = alignment(res)
        cols = [int(np.searchsorted(view.steps, t)) for t in at]
        rows.append({
            "optimizer": optimizer, "lr": lr,
            "gap": {int(t): float(np.mean(1.0 - view.corr[:, c])) for t, c in zip(at, cols, strict=True)},
            "norm": {int(t): float(np.mean(view.norm[:, c])) for t, c in zip(at, cols, strict=True)},
        })  # fmt: skip
    return rows


def optimality_over_d(widths=(4, 8, 16, 32, 64), steps: int = 2000, trials: int = 30) -> list[dict]:
    """Normalised GD on the preset's setting at each token width d: how often the tokens the model
    selects at t = ``steps`` (the argmax of its attention) are each example's globally optimal
    token (the largest y·⟨x_t, v⟩: the data's mask), per example and per data set, and the mean
    corr with W^mm for the model's own selection."""
    from dynamics import run_sweep
    from dynamics.sweeps.trials import trial_data
    from dynamics.theory.maxmargin import alignment

    rows = []
    for d in widths:
        res = run_sweep(_preset_with(d=d, steps=steps, trials=trials), progress=False)
        view = alignment(res)
        masks = [np.asarray(trial_data(res.config, t).mask_train) for t in range(trials)]
        best = np.argmax(np.stack(masks), axis=2)  # (trials, n): each example's optimal token
        hit = view.selected == best  # (trials, n)
        rows.append({
            "d": d, "examples_optimal": float(hit.mean()), "data_sets_all_optimal": float(hit.all(1).mean()),
            "corr_final": float(np.nanmean(view.corr[:, -1])),
        })  # fmt: skip
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="max-margin", choices=("max-margin", "max-margin-prompt"))
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--query", choices=("first", "last", "outside"), help="the query (else the preset's)")
    parser.add_argument("--tokens", type=int, metavar="T", help="tokens T (else the preset's)")
    parser.add_argument("--authors", metavar="CHECKOUT", help="compare with the authors' code there instead")
    parser.add_argument("--gd-lrs", metavar="ETAS", help="plain GD at these η (comma-separated) instead")
    parser.add_argument("--widths", metavar="DS", help="normalised GD at these widths d (comma-separated)")
    args = parser.parse_args(argv)
    if args.gd_lrs:
        for row in gd_alignment([float(x) for x in args.gd_lrs.split(",")], trials=args.trials or 30):
            print(row)
        return
    if args.widths:
        for row in optimality_over_d([int(x) for x in args.widths.split(",")], trials=args.trials or 30):
            print(row)
        return
    if args.authors:
        for row in authors_comparison(args.authors):
            print(row)
        for x64 in (False, True):
            print("prompt", "x64" if x64 else "float32", prompt_comparison(x64=x64))
        return
    r = preset_against_reference(args.preset, args.trials, args.x64, args.query, args.tokens)
    print(
        f"{args.preset} ({'x64' if args.x64 else 'float32'}, query {args.query or 'as the preset'}, "
        f"T = {args.tokens or 'as the preset'}), {r['corr_ref'].shape[0]} data sets, "
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
