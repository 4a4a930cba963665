"""Head specialisation on the multi-location task, erf, softmax and softmax1 side by side.

After Sagitova, Duranthon, Zdeborová, *Specialization of softmax attention heads* (2026, arXiv
2603.03993), whose exact model this is not: F planted features of decreasing strength c_f, H
heads with a learned query k_h each, online SGD from a small random init. A head *holds* feature
f when |cos(k_h, k*_f)| ≥ ``THRESHOLD``; the experiment asks which head holds which feature, from
which logged step on, and what the heads that hold none do.

- ``configs()``: the preset ``specialisation`` once per activation (``ACTIVATIONS``), each with
  its own step where one is needed (``LR``); ``key``/``produce``: the figure entry's results, one
  sweep folder per activation under the results folder and a ``results.json`` of their own with
  the takeovers and the idle heads (``summarise``);
- ``takeovers`` (pure numpy): from per-head cosine curves (L, H, F), the head that holds each
  feature at the end (one head per feature, distinct) and the first logged step from which it
  holds it without a break;
- ``idle_heads``: for the heads that hold no feature, ‖U_h‖ and, replayed from the saved
  parameters on fresh examples in numpy, their total attention weight Σ_t σ_t and the spread of
  their output (the noise they add), with the same for the holding heads beside them.

The grid ``specialisation-grid`` (``dynamics.config.grid_axes``) runs H × activation; ``held_fraction``
reads its curves.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from dynamics.config.schema import Config, apply_overrides, digest, preset, resolve
from dynamics.sweeps.headline import entry

NAME = "specialisation"
GRID = "specialisation-grid"
ACTIVATIONS = ("erf", "softmax", "softmax1")
# The preset's step (0.01) diverges with erf (σ is not normalised: T − F noise tokens each add
# their full weight); erf gets the largest of 0.01, 0.005, 0.002 that did not diverge here.
LR = {"erf": 0.002}
THRESHOLD = 0.9  # |cos(k_h, k*_f)| at which head h holds feature f
# The onset of a takeover: the holder's |cos| ≥ ONSET from then on. The strongest feature's holder
# often lingers below 0.9 long after it has taken the feature, so the order is read at the onset.
ONSET = 0.5
SUMMARY_VERSION = 2  # part of the figure's key: a changed summary is recomputed, never reused
MC_EXAMPLES = 2048  # fresh examples of the idle-head replay


def configs() -> dict[str, Config]:
    """The preset once per activation, ``LR`` applied."""
    base = preset(NAME)
    out = {}
    for act in ACTIVATIONS:
        model = {"attention": act}
        optim = {"lr": LR[act]} if act in LR else {}
        cfg = apply_overrides(base, {"model": model, "optim": optim}, f"{NAME} {act}", explicit=False)
        out[act] = dataclasses.replace(cfg, name=f"{NAME}-{act}")
    return out


def key() -> str:
    """The figure's results key: every activation's resolved config."""
    doc = {a: c.resolved().to_dict() for a, c in configs().items()}
    return digest({"experiment": NAME, "summary_version": SUMMARY_VERSION, **doc})


def produce(results_dir: Path, progress: bool = True) -> None:
    """One sweep per activation into ``results_dir/<activation>/``, then ``results.json`` (last)."""
    from dynamics.sweeps.result_files import write_files, write_results  # lazy: JAX, the engine: on a run
    from dynamics.sweeps.sweep import run_sweep  # lazy: JAX, the engine: on a run

    results_dir = Path(results_dir)
    summary, wall = {}, 0.0
    for act, cfg in configs().items():
        result = run_sweep(resolve(cfg), progress=progress)
        (results_dir / act).mkdir(parents=True, exist_ok=True)
        write_results(result, results_dir / act)
        wall += result.wall_time_s
        summary[act] = summarise(result)
    meta = {"config_hash": key(), "experiment": NAME, "activations": list(ACTIVATIONS)}
    meta.update(threshold=THRESHOLD, onset=ONSET, wall_time_s=wall, summary=summary, complete=True)
    write_files(results_dir, "summary.npz", {"activations": np.array(ACTIVATIONS)}, meta)


def feature_count(config: Config | dict) -> int:
    """F, the number of planted features (strengths) of a multi-location config."""
    data = config["data"] if isinstance(config, dict) else config.resolved().data.to_dict()
    return len(data["strengths"])


def takeovers(cos: np.ndarray, steps: np.ndarray, threshold: float = THRESHOLD) -> list[dict[str, Any]]:
    """Which head holds which feature at the end, and from when.

    ``cos`` (L, H, F): |cos(k_h, k*_f)| at the logged ``steps`` (L,). The holders are distinct heads,
    chosen at the last logged step to hold as many features as possible (|cos| ≥ ``threshold``),
    then with the largest summed |cos|. Per feature f: ``head`` (None when no head holds it at the
    end), ``cos`` (the holder's final |cos|, or the best head's when none holds it), ``step`` (the
    first logged step from which the holder's |cos| stays ≥ threshold to the end; None when not
    held) and ``onset`` (likewise for |cos| ≥ ``ONSET``, at most ``step``). NaN counts as 0 (a
    diverged run holds nothing). ``threshold`` in (0, 1]: a |cos| is at most 1, and every head
    reaches 0."""
    real = isinstance(threshold, int | float | np.number) and not isinstance(threshold, bool)
    if not real or not 0 < threshold <= 1:
        raise ValueError(f"threshold={threshold!r} must be in (0, 1]: the |cos| a holder reaches")
    cos = np.nan_to_num(np.asarray(cos, float), nan=0.0)
    L, H, F = cos.shape
    final = cos[-1]
    best, best_score = None, (-1, -np.inf)
    for heads in itertools.permutations(range(H), min(F, H)):
        vals = final[list(heads), list(range(len(heads)))]
        score = (int((vals >= threshold).sum()), float(vals.sum()))
        if score > best_score:
            best, best_score = heads, score
    out = []
    for f in range(F):
        h = best[f] if best is not None and f < len(best) else None
        if h is None or final[h, f] < threshold:
            out.append(
                {"feature": f, "head": None, "cos": float(final[:, f].max()), "step": None, "onset": None}
            )
            continue
        step, onset = (
            int(steps[_stays_from(cos[:, h, f], level)]) for level in (threshold, min(ONSET, threshold))
        )
        out.append({"feature": f, "head": int(h), "cos": float(final[h, f]), "step": step, "onset": onset})
    return out


def _stays_from(curve: np.ndarray, level: float) -> int:
    """The first index from which ``curve`` stays ≥ ``level`` to its end (its last value is)."""
    below = np.nonzero(curve < level)[0]
    return 0 if below.size == 0 else int(below[-1]) + 1


def holds_all(taken: list[dict[str, Any]]) -> bool:
    """Every feature held by a head of its own at the end."""
    return all(t["head"] is not None for t in taken)


def in_strength_order(taken: list[dict[str, Any]], when: str = "onset") -> bool | None:
    """Whether the features (ordered by decreasing strength) were taken in that order at their
    ``when`` ("onset" or "step"; ties allowed); None when not all were taken."""
    if not holds_all(taken):
        return None
    return all(a[when] <= b[when] for a, b in itertools.pairwise(taken))


def _cos_features(curves: dict, directions: list[str], F: int) -> np.ndarray:
    """(n_heads, trials, L, H_max, F): |cos(k_h, k*_f)| from the per-head curves."""
    cos = np.asarray(curves["head_key_cos"])
    if not directions:  # a grid's results name none: the multi-location order, k*_0…k*_F-1, v*_0…
        if cos.shape[-1] != 2 * F:
            raise ValueError(f"head_key_cos has {cos.shape[-1]} planted directions, expected 2F = {2 * F}")
        directions = [f"{n}_star_{f}" for n in "kv" for f in range(F)]
    return cos[..., [directions.index(f"k_star_{f}") for f in range(F)]]


def summarise(result) -> dict[str, Any]:
    """Per H and trial of a ``SweepResult``: the takeovers, whether all were held, in order, and the
    idle heads (``idle_heads``); the final excess risk."""
    cfg = result.config
    F = feature_count(cfg)
    directions = list(result.extra.get("directions") or [])
    cos = _cos_features(result.curves, directions, F)
    rows = []
    for i, H in enumerate(result.heads):
        for trial in range(cos.shape[1]):
            taken = takeovers(cos[i, trial, :, :H], result.head_steps)
            row = {"heads": int(H), "trial": trial, "takeovers": taken, "holds_all": holds_all(taken)}
            row["in_order"] = in_strength_order(taken)
            row["excess_risk"] = _finite(result.curves["excess_risk"][i, trial, -1])
            if result.params:
                row["heads_detail"] = idle_heads(result, i, trial, taken)
            rows.append(row)
    return {"runs": rows, "held_all": sum(r["holds_all"] for r in rows), "n_runs": len(rows)}


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def idle_heads(result, i: int, trial: int, taken: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per head of run (H index i, trial) at its last logged step: whether it holds a feature,
    ‖U_h‖, and replayed on ``MC_EXAMPLES`` fresh examples of the trial's world (numpy): the total
    attention weight Σ_t σ_t (1 for softmax; softmax1 may attend to nothing) and the standard
    deviation of the head's output U_hᵀ Xᵀ σ_h (what it adds to Φ)."""
    cfg = result.config.resolved()
    H = int(result.heads[i])
    U = np.asarray(result.params["U"][i, trial, -1, :H], float)
    k = np.asarray(result.params["k"][i, trial, -1, :H], float)
    X = _examples(cfg, {n: v[trial] for n, v in result.planted.items()}, trial)
    A = _attention(X @ k.T * cfg.model.temperature, cfg.model.attention)  # (n, T, H)
    out = np.einsum("nth,ntd,hd->nh", A, X, U)
    held = {t["head"] for t in taken if t["head"] is not None}
    return [
        {
            "head": h,
            "holds": h in held,
            "u_norm": float(np.linalg.norm(U[h])),
            "attention_total": float(A[:, :, h].sum(axis=1).mean()),
            "output_std": float(out[:, h].std()),
        }
        for h in range(H)
    ]


def _examples(cfg: Config, planted: dict[str, np.ndarray], trial: int) -> np.ndarray:
    """(n, T, d) fresh multi-location tokens in numpy: the features' tokens √(d/2)·k*_f + γ·z at
    distinct random positions, the others N(0, I) (``datamodels.locations``)."""
    data = cfg.data
    T, d, F = data.T, data.d, len(data.strengths)
    k_star = np.stack([planted[f"k_star_{f}"] for f in range(F)])
    rng = np.random.default_rng(1000 + trial)
    n = MC_EXAMPLES
    X = rng.standard_normal((n, T, d))
    pos = np.argsort(rng.random((n, T)), axis=1)[:, :F]
    rel = math.sqrt(d / 2) * k_star[None] + data.gamma * rng.standard_normal((n, F, d))
    X[np.arange(n)[:, None], pos] = rel
    return X


def _attention(s: np.ndarray, act: str) -> np.ndarray:
    """σ over the token axis (1) of scores s (n, T, H), as ``dynamics.core.model`` computes it."""
    if act == "erf":
        return np.vectorize(math.erf, otypes=[float])(s)
    top = np.maximum(s.max(axis=1, keepdims=True), 0.0 if act == "softmax1" else -np.inf)
    e = np.exp(s - top)
    if act == "softmax1":
        return e / (np.exp(-top) + e.sum(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def held_fraction(meta: dict, curves: dict) -> tuple[np.ndarray, np.ndarray]:
    """A ``specialisation-grid`` result: (share of trials whose F features are each held by a head of
    its own at the end, share of those taken in order of decreasing strength), (n_heads, *grid)."""
    F = feature_count(meta["config"])
    cos = _cos_features(curves, list(meta.get("directions") or []), F)  # (nH, *grid, trials, L, Hm, F)
    heads = np.asarray(curves["heads"])
    steps = np.asarray(curves.get("head_steps", curves["steps"]))  # the per-head curves' own steps
    held = np.zeros(cos.shape[:-4])
    order = np.full(cos.shape[:-4], np.nan)
    for idx in np.ndindex(*cos.shape[:-4]):
        runs = [takeovers(c[:, : heads[idx[0]]], steps) for c in cos[idx]]
        held[idx] = np.mean([holds_all(t) for t in runs])
        ordered = [in_strength_order(t) for t in runs if holds_all(t)]
        order[idx] = np.mean(ordered) if ordered else np.nan
    return held, order


def load(results_dir: Path) -> tuple[dict, dict[str, tuple[dict, dict]]]:
    """The figure's results: (its results.json, {activation: (meta, arrays) of its sweep})."""
    from dynamics.sweeps.result_files import load_results  # lazy: JAX, the engine: on a run

    results_dir = Path(results_dir)
    meta = json.loads((results_dir / "results.json").read_text())
    return meta, {a: load_results(results_dir / a) for a in meta["activations"]}


def headline(result) -> dict[str, dict]:
    """The preset's headline: in how many trials every feature ends held by a head of its own, in
    how many they were taken in strength order, and the final excess risk (median over trials)."""
    runs = summarise(result)["runs"]
    ordered = [r["in_order"] for r in runs if r["in_order"] is not None]
    risk = [r["excess_risk"] for r in runs if r["excess_risk"] is not None]
    return {
        "held_all": entry(
            "all features held", sum(r["holds_all"] for r in runs), n=len(runs), unit=f"of {len(runs)} runs",
            about=f"runs whose F features each end held by a head of its own (|cos| ≥ {THRESHOLD:g})",
        ),
        "in_order": entry(
            "taken in strength order", sum(ordered), n=len(ordered), unit=f"of {len(ordered)} runs",
            about="runs whose features were taken strongest first (of the runs where all were taken)",
        ),
        "excess_risk": entry(
            "excess risk", float(np.median(risk)) if risk else None, n=len(risk),
            about="final excess test risk, median over the runs",
        ),
    }  # fmt: skip
