"""In-context linear regression with multi-head softmax attention (He, Pan, Chen, Yang, *In-Context
Linear Regression Demystified*, ICML 2025, arXiv 2503.12734): the preset ``icl-heads``.

Tokens z_ℓ = [x_ℓ; y_ℓ] ∈ R^{D+1} (D = d − 1 in mhsim's token width d), ℓ = 1 … L, and a query
[x_q; 0] outside the keys; x ~ N(0, I_D), β ~ N(0, v·I_D) per sequence (v = 1/D), y = βᵀx + ε with
ε ~ N(0, σ²) on every label, the query's target included (so every test mse below contains σ²).
The preset trains H = 1, 2, 4, 8 heads ŷ = Σ_h O_h V_h Σ_ℓ softmax_ℓ(β (K_h z_q)·(Q_h z_ℓ)) z_ℓ
with Adam on a fresh batch each step. This module holds what its headline and figure put beside
the runs, all in float64 numpy:

``reference_predictors(D, L, sigma2, v, seed=0, sequences=None, fit_sequences=None)``
    The test mse of four predictors that read the same context (the Monte Carlo ones measured on
    ``sequences`` sequences, default ``MC_SEQUENCES``, after a fit on ``fit_sequences``, default
    ``FIT_SEQUENCES``: a smaller sample is faster and its standard errors larger):

    - ``gd_step``: one step of GD from 0 on the context's least squares, ŷ = η (1/L) Σ_ℓ y_ℓ x_ℓᵀ x_q
      at the best η, in closed form: with g = (1/L) Σ_ℓ y_ℓ x_ℓ, E‖β‖² = vD, E gᵀβ = vD and
      E‖g‖² = vD + ((D + 1) vD + σ² D)/L (Isserlis), the mse at η is vD − 2η vD + η² E‖g‖² + σ²,
      least at η* = vD/E‖g‖² (``best_gd_step``): vD − (vD)²/E‖g‖² + σ².
    - ``ridge``: the Bayes predictor, ridge regression with λ = σ²/v (σ²D for v = 1/D); exact Monte
      Carlo (``MC_SEQUENCES`` sequences) with its standard error.
    - ``single_kernel``: the best one-head predictor of the form the trained head takes (a
      key-query ω·I on x, the value reading y): ŷ = c Σ_ℓ softmax_ℓ(ω x_ℓᵀx_q) y_ℓ.
    - ``paired_heads``: two such heads of opposite signs, ŷ = μ Σ_ℓ (softmax_ℓ(ω s) −
      softmax_ℓ(−ω s)) y_ℓ, s_ℓ = x_ℓᵀx_q (for small ω this is a GD step).

    The last two by a small optimisation: ω by a bounded scalar search on ``FIT_SEQUENCES``
    sequences with c (μ) in closed form for each ω (the least-squares coefficient), then the mse
    measured on ``MC_SEQUENCES`` fresh sequences, with its standard error.

``head_structure(params, D)``
    Per head: the *KQ diagonal share* — of the key-query matrix W_h = Q_h K_hᵀ's x–x block (the
    D×D block that scores x_ℓ against x_q; the query's y is 0, so the rest reads nothing of it
    but the key's y row), the share of its squared Frobenius norm on the diagonal, Σ_i W_ii² /
    ‖W_xx‖_F² (1 for a diagonal block, about 1/D for a random one) — and the *OV y-share* — of
    the head's readout U_h = V_hᵀ O_h (what O_h V_h reads of the attended token), the share of
    ‖U_h‖² on the y coordinate (1 when it reads y alone).

``length_curve(result)``
    The test mse of each H's trained parameters (trial 0 and every trial, the last snapshot) at
    other context lengths L ∈ ``LENGTHS``, on fresh sequences of the run's own data model.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
from scipy.optimize import minimize_scalar

from dynamics.core import model as mdl
from dynamics.core.data import data_model
from dynamics.errors import ConfigError
from dynamics.sweeps.headline import entry

PRESET = "icl-heads"
MC_SEQUENCES = 200_000  # the references' Monte Carlo sample: standard errors about 0.001
FIT_SEQUENCES = 20_000  # the sample ω is fitted on (independent of the measuring one)
LENGTHS = (10, 20, 40, 60, 80, 100)  # context lengths L the trained heads are tested at
LENGTH_SEQUENCES = 4000  # test sequences per length
OMEGA_RANGE = (1e-4, 5.0)  # the scalar search's bounds on ω


def _draw(rng: np.random.Generator, n: int, D: int, L: int, sigma2: float, v: float):
    """(x (n, L, D), y (n, L), x_q (n, D), y_q (n,)) of n sequences, float64."""
    x = rng.standard_normal((n, L, D))
    xq = rng.standard_normal((n, D))
    beta = rng.standard_normal((n, D)) * np.sqrt(v)
    y = np.einsum("nld,nd->nl", x, beta) + np.sqrt(sigma2) * rng.standard_normal((n, L))
    yq = np.einsum("nd,nd->n", xq, beta) + np.sqrt(sigma2) * rng.standard_normal(n)
    return x, y, xq, yq


def _gd_moments(D: int, L: int, sigma2: float, v: float) -> tuple[float, float]:
    """(E‖β‖², E‖g‖²) of the one-step-GD predictor (module docstring)."""
    b2 = v * D  # E‖β‖²
    return b2, b2 + ((D + 1) * b2 + sigma2 * D) / L


def best_gd_step(D: int, L: int, sigma2: float, v: float) -> float:
    """The step η* = E gᵀβ / E‖g‖² that minimises the one-step-GD predictor's test mse."""
    b2, g2 = _gd_moments(D, L, sigma2, v)
    return b2 / g2


def gd_step_mse(D: int, L: int, sigma2: float, v: float, eta: float | None = None) -> float:
    """The one-step-GD predictor's test mse (closed form, module docstring): at the best step by
    default, else at ``eta``, E‖β − ηg‖² + σ² = vD − 2η vD + η² E‖g‖² + σ²."""
    b2, g2 = _gd_moments(D, L, sigma2, v)
    if eta is None:
        return b2 - b2 * b2 / g2 + sigma2
    return b2 - 2 * eta * b2 + eta * eta * g2 + sigma2


def _ridge(x, y, xq, lam: float) -> np.ndarray:
    gram = np.einsum("nld,nle->nde", x, x) + lam * np.eye(x.shape[2])  # (n, D, D)
    rhs = np.einsum("nld,nl->nd", x, y)[..., None]  # (n, D, 1)
    return np.einsum("nd,nd->n", np.linalg.solve(gram, rhs)[..., 0], xq)


def _kernel(x, y, xq, omega: float, paired: bool) -> np.ndarray:
    """Σ_ℓ softmax_ℓ(ω s) y_ℓ (minus the same at −ω when ``paired``), s_ℓ = x_ℓᵀ x_q: (n,)."""
    s = np.einsum("nld,nd->nl", x, xq)

    def attend(w):
        e = np.exp(w * s - np.max(w * s, axis=1, keepdims=True))
        return np.sum(e * y, axis=1) / np.sum(e, axis=1)

    return attend(omega) - attend(-omega) if paired else attend(omega)


def _fit_kernel(sample, paired: bool) -> tuple[float, float]:
    """(ω, c) minimising the mse of c·_kernel on ``sample``: c in closed form for each ω."""
    x, y, xq, yq = sample

    def mse(omega):
        k = _kernel(x, y, xq, omega, paired)
        c = np.dot(k, yq) / np.dot(k, k)
        return np.mean((c * k - yq) ** 2), c

    found = minimize_scalar(
        lambda w: mse(w)[0], bounds=OMEGA_RANGE, method="bounded", options={"xatol": 1e-5}
    )
    return float(found.x), float(mse(found.x)[1])


def _measured(err: np.ndarray) -> tuple[float, float]:
    """(mean, its standard error) of squared errors."""
    sq = err**2
    return float(np.mean(sq)), float(np.std(sq, ddof=1) / np.sqrt(sq.size))


@functools.lru_cache(maxsize=8)
def reference_predictors(
    D: int,
    L: int,
    sigma2: float,
    v: float,
    seed: int = 0,
    sequences: int | None = None,
    fit_sequences: int | None = None,
) -> dict[str, dict]:
    """name -> {"mse", "se" (None for a closed form), "how", and the fitted "omega", "c"}: the Monte
    Carlo predictors measured on ``sequences`` sequences (default ``MC_SEQUENCES``) after ω's fit on
    ``fit_sequences`` (default ``FIT_SEQUENCES``); at the defaults the preset's numbers."""
    if D < 1 or L < 1 or sigma2 < 0 or v <= 0:
        raise ValueError(f"D={D}, L={L}, sigma2={sigma2}, v={v}: need D, L >= 1, σ² >= 0, v > 0")
    n_mc = MC_SEQUENCES if sequences is None else sequences
    n_fit = FIT_SEQUENCES if fit_sequences is None else fit_sequences
    for name, n in (("sequences", n_mc), ("fit_sequences", n_fit)):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 2:
            raise ConfigError(f"{name}={n!r}: need an integer >= 2 (a standard error needs two sequences)")
    rng = np.random.default_rng(seed)
    fit = _draw(rng, n_fit, D, L, sigma2, v)
    x, y, xq, yq = _draw(rng, n_mc, D, L, sigma2, v)
    out = {"gd_step": {"mse": gd_step_mse(D, L, sigma2, v), "se": None, "how": "closed form"}}
    lam = sigma2 / v
    mse, se = _measured(_ridge(x, y, xq, lam) - yq)
    out["ridge"] = {"mse": mse, "se": se, "how": f"Monte Carlo, λ = σ²/v = {lam:g}", "lambda": lam}
    for name, paired in (("single_kernel", False), ("paired_heads", True)):
        omega, c = _fit_kernel(fit, paired)
        mse, se = _measured(c * _kernel(x, y, xq, omega, paired) - yq)
        out[name] = {"mse": mse, "se": se, "how": "ω fitted, then Monte Carlo", "omega": omega, "c": c}
    return out


def setting(cfg) -> tuple[int, int, float, float]:
    """(D, L, σ², v) of an icl-linreg config."""
    data = cfg.data.resolved()
    return data.d - 1, data.T - 1, float(data.epsilon) ** 2, float(data.task_variance)


def head_structure(params: dict, D: int) -> tuple[np.ndarray, np.ndarray]:
    """(KQ diagonal share (H,), OV y-share (H,)) of one run's heads (module docstring): ``params``
    one run's Q, K (H, d, d_h) and V (H, d, d), O (H, d), or W (H, d, d) and U (H, d)."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    W = p["W"] if "W" in p else np.einsum("hda,hea->hde", p["Q"], p["K"])  # (h, d, d)
    U = p["U"] if "U" in p else np.einsum("he,hed->hd", p["O"], p["V"])  # (h, d)
    block = W[:, :D, :D]
    diag = np.einsum("hii->h", block**2) / np.sum(block**2, axis=(1, 2))
    y_share = U[:, D] ** 2 / np.sum(U**2, axis=1)
    return diag, y_share


def final_params(result, i: int, trial: int) -> dict:
    """H index ``i``'s parameters of ``trial`` at the last snapshot, its own H heads."""
    H = int(np.asarray(result.heads)[i])
    return {k: np.asarray(v[i, trial, -1, :H]) for k, v in result.params.items() if k != "b"}


def mse_at_length(result, params: dict, L: int, seed: int = 1, sequences: int | None = None) -> float:
    """The test mse of one run's ``params`` on ``sequences`` (default ``LENGTH_SEQUENCES``) fresh
    sequences of its data model with L context tokens (T = L + 1), as the engine computes Φ
    (float32)."""
    n = LENGTH_SEQUENCES if sequences is None else sequences
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ConfigError(f"sequences={n!r}: need an integer >= 1")
    # Run op by op, not jitted: jitted, the draw and Φ fuse differently (the mse moves by about
    # 4e-8 relative, the headline's numbers with it), and one program per (L, H) compiled at XLA's
    # default level costs more CPU than the op-by-op run at these sizes.
    cfg = result.config
    data = dataclasses.replace(cfg.data, T=L + 1, n_test=int(n)).resolved()
    obj = data_model(data)
    k_world, k_sample = jax.random.split(jax.random.PRNGKey(seed))
    X, y, _ = obj.sample(obj.setup(k_world, data), k_sample, int(n))
    m = cfg.model
    phi = mdl.logits(
        {k: jax.numpy.asarray(v) for k, v in params.items()},
        X,
        query=m.query,
        norm=m.norm,
        activation=m.attention,
        beta=float(m.temperature),
    )
    return float(np.mean((np.asarray(phi, np.float64) - np.asarray(y, np.float64)) ** 2))


def length_curve(result, lengths=LENGTHS) -> np.ndarray:
    """(H values, trials, len(lengths)): each run's test mse at each context length."""
    heads = np.asarray(result.heads)
    trials = np.asarray(result.curves["test_loss"]).shape[1]
    out = np.full((len(heads), trials, len(lengths)), np.nan)
    for i in range(len(heads)):
        for t in range(trials):
            params = final_params(result, i, t)
            out[i, t] = [mse_at_length(result, params, L) for L in lengths]
    return out


REFERENCE_LABELS = {
    "gd_step": "one GD step",
    "ridge": "ridge (Bayes)",
    "single_kernel": "best single-head kernel",
    "paired_heads": "paired opposite-sign heads",
}


def headline(result) -> dict[str, dict]:
    """Per H the final test mse (mean ± std over trials) and the heads' structure (mean over heads
    and trials), the four reference predictors' mse, and per H the test mse at other lengths."""
    D, L, sigma2, v = setting(result.config)
    out = {}
    for name, ref in reference_predictors(D, L, sigma2, v).items():
        omega = f", ω = {ref['omega']:.4g}, c = {ref['c']:.4g}" if "omega" in ref else ""
        out[f"ref_{name}"] = entry(
            REFERENCE_LABELS[name],
            ref["mse"],
            std=ref["se"],
            closed_form=ref["mse"] if ref["se"] is None else None,
            about=f"test mse at L = {L} ({ref['how']}{omega}; std: the Monte Carlo standard error)",
        )
    final = np.asarray(result.curves["test_loss"])[:, :, -1]  # (H values, trials)
    has_params = bool(getattr(result, "params", None))
    curve = length_curve(result) if has_params else None
    for i, h in enumerate(np.asarray(result.heads).tolist()):
        ok = final[i][np.isfinite(final[i])]
        out[f"final_mse_H{h}"] = entry(
            f"test mse (H = {h})",
            float(np.mean(ok)) if ok.size else None,
            std=float(np.std(ok)) if ok.size > 1 else None,
            n=int(ok.size),
            about=f"final test mse at L = {L}, σ² = {sigma2:g} included, mean over trials",
        )
        if not has_params:
            continue
        shares = [head_structure(final_params(result, i, t), D) for t in range(final.shape[1])]
        diag = np.concatenate([s[0] for s in shares])
        yshare = np.concatenate([s[1] for s in shares])
        out[f"kq_diag_share_H{h}"] = entry(
            f"KQ diagonal share (H = {h})",
            float(np.nanmean(diag)),
            about="Σ_i W_ii² / ‖W_xx‖², W_h = Q_h K_hᵀ's x–x block, mean over heads and trials",
        )
        out[f"ov_y_share_H{h}"] = entry(
            f"OV y-share (H = {h})",
            float(np.nanmean(yshare)),
            about="U_h[y]² / ‖U_h‖², U_h = V_hᵀ O_h, mean over heads and trials",
        )
        for j, length in enumerate(LENGTHS):
            out[f"mse_L{length}_H{h}"] = entry(
                f"test mse at L = {length} (H = {h})",
                float(np.nanmean(curve[i, :, j])),
                about=f"the trained heads on {LENGTH_SEQUENCES} fresh sequences of L = {length}, "
                "mean over trials",
            )
    if not has_params:
        out["note"] = entry("note", None, about="no saved parameters: no head structure or other lengths")
    return out


def noise_table(result, sequences: int = MC_SEQUENCES, fit_sequences: int = FIT_SEQUENCES) -> list[dict]:
    """One row per point of a grid over the data (``--epsilon``, ``--task-variance``; a
    ``GridResult``, e.g. ``dynamics.load_results(folder)``): the point's σ² and v, per H its final
    test mse (``mse_H{h}``, mean over trials; ``std_H{h}`` over trials, ``trials_H{h}`` every
    trial's) and the reference predictors' test mse at that σ² and v (``ref_{name}``, with
    ``se_{name}`` the Monte Carlo standard error, None for the closed form), each σ² included."""
    if not hasattr(result, "grid"):
        raise ConfigError("noise_table reads a grid (run with --epsilon or --task-variance as a list)")
    if (model := result.config.data.model) != "icl-linreg":
        raise ConfigError(f"noise_table reads an icl-linreg grid; got data.model={model!r}")
    rows = []
    for k in range(len(result.grid.points)):
        point = result.point(k)
        D, L, sigma2, v = setting(point.config)
        row = {"sigma2": sigma2, "v": v, "L": L}
        final = np.asarray(point.curves["test_loss"], np.float64)[:, :, -1]  # (H values, trials)
        for i, h in enumerate(np.asarray(point.heads).tolist()):
            ok = final[i][np.isfinite(final[i])]
            row[f"mse_H{h}"] = float(np.mean(ok)) if ok.size else None
            row[f"std_H{h}"] = float(np.std(ok)) if ok.size > 1 else None
            row[f"trials_H{h}"] = final[i].tolist()
        refs = reference_predictors(D, L, sigma2, v, sequences=sequences, fit_sequences=fit_sequences)
        for name, ref in refs.items():
            row[f"ref_{name}"], row[f"se_{name}"] = ref["mse"], ref["se"]
        rows.append(row)
    return rows


def noise_markdown(rows: list[dict]) -> str:
    """``noise_table``'s rows as a markdown table: σ², v, each H's test mse (± std over trials)
    and the four references."""
    heads = [key[len("mse_H") :] for key in rows[0] if key.startswith("mse_H")] if rows else []
    head = ["σ²", "v", *(f"H = {h}" for h in heads), *REFERENCE_LABELS.values()]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [f"{row['sigma2']:.4g}", f"{row['v']:.4g}"]
        for h in heads:
            mean, std = row[f"mse_H{h}"], row[f"std_H{h}"]
            cells.append("—" if mean is None else f"{mean:.3f}" + ("" if std is None else f" ± {std:.3f}"))
        cells += [f"{row[f'ref_{name}']:.4f}" for name in REFERENCE_LABELS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
