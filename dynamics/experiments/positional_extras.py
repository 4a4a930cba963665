"""Positional versus semantic attention beyond the two fixed starts (Cui, Behrens, Krzakala,
Zdeborová 2024; the preset ``positional-semantic`` is ``dynamics.experiments.positional_semantic``):

- ``PHASE``, the grid preset ``positional-semantic-phase``: both fixed starts over α = n/d × ω at
  d = 50, the paper's (α, ω) phase diagram (which start's final objective is lower, the global
  minimiser, per cell); ``phase`` reads it, and any grid over n_train × one other knob × the two
  starts the same way (the crossing against σ, ``semantic_noise``, say).
- ``RANDOM``, the grid preset ``positional-semantic-random``: a tied Q of rank r = 2 from a random
  start (``data.start = "random"``: Q(0) is the model's normal init, entries N(0, σ₀²/d) from each
  trial's init key), trained by Adam, over α; ``random_start`` reads it.

The overlaps at rank r are those of ``positional_semantic.overlaps``: m = ‖Qᵀ1‖/d and
θ = ‖Qᵀq*‖/d, the norms of r-vectors. They are functions of QQᵀ alone (‖Qᵀv‖² = vᵀQQᵀv), as the
model is (f depends on Q only through the scores XQQᵀXᵀ), so a rotation Q → QO of the r columns,
which changes no prediction, changes neither; at r = 1 they are the paper's |1ᵀQ|/d and |q*ᵀQ|/d.
The objective's decay term is λ/2 of the squared norm of all r columns.
"""

from __future__ import annotations

import numpy as np

from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.config.schema import apply_overrides
from dynamics.experiments import positional_semantic as ps

PHASE = "positional-semantic-phase"
RANDOM = "positional-semantic-random"


def key(name: str):
    """The results' cache key of ``python -m figures NAME``: a ``key()`` of the grid's hash."""
    return lambda: resolve_grid(*grid_preset(name)).hash()


def run(name: str, progress: bool = True, axes=None, **overrides):
    """The grid preset ``name`` (``overrides``: {section: {field: value}} on its base config;
    ``axes``: {knob: values} replacing the preset's), run, with the overlaps m, θ and the
    objective added to its curves (``positional_semantic.add_overlaps``)."""
    from dynamics.sweeps.grid_runner import run_grid_experiment  # lazy: JAX, the engine: on a run

    cfg, preset_axes = grid_preset(name)
    if overrides:
        cfg = apply_overrides(cfg, overrides, f"{name} overrides")
    result = run_grid_experiment(resolve_grid(cfg, preset_axes if axes is None else axes), progress=progress)
    ps.add_overlaps(result)
    return result


def producer(name: str):
    """``python -m figures``' producer of the grid preset ``name``: run, written as a grid."""

    def produce(results_dir, progress: bool) -> None:
        from dynamics.sweeps.grid_runner import write_grid  # lazy: JAX, the engine: on a run

        result = run(name, progress=progress)
        result.extra.update(complete=True)
        write_grid(result, results_dir)

    return produce


def final(result, curve: str, first: tuple[str, ...]) -> np.ndarray:
    """``result.curves[curve]`` at its last step, first H, float64, with the grid axes ``first``
    moved to the front in that order (the other axes after them, then trials)."""
    names = [name for name, _ in result.grid.axes]
    last = np.asarray(result.curves[curve], np.float64)[0][..., -1]  # (*grid, trials)
    return np.moveaxis(last, [names.index(n) for n in first], list(range(len(first))))


def phase(result) -> dict:
    """Which fixed start is the global minimiser over α = n/d × one other knob, from a grid over
    ``n_train`` × that knob × ``start`` (semantic, positional) with the objective in its curves:
    ``knob`` its name, ``alpha`` (A,), ``values`` (K,); ``difference`` (A, K) the mean over trials
    of the per-trial final objective semantic − positional (the starts share each trial's data),
    ``difference_std`` (A, K); ``better`` (A, K) the start with the lower mean (positional at a
    tie); ``crossing`` (K,) the α where the difference changes sign at each value
    (``positional_semantic.crossing``; NaN where it keeps one sign); per start ``test_loss``,
    ``m``, ``theta`` (A, K), means over trials."""
    axes = dict(result.grid.axes)
    others = [name for name in axes if name not in ("n_train", "start")]
    if "n_train" not in axes or len(others) != 1 or sorted(axes.get("start", ())) != sorted(ps.STARTS):
        raise ValueError(f"phase needs a grid over n_train × one knob × start {ps.STARTS}, not {list(axes)}")
    if ps.OBJECTIVE not in result.curves:
        raise ValueError("the grid's curves hold no objective: call add_overlaps(result) first")
    order = [axes["start"].index(s) for s in ps.STARTS]
    first = ("n_train", others[0], "start")

    def by_start(curve):  # (A, K, 2 starts, trials)
        return final(result, curve, first)[:, :, order]

    paired = by_start(ps.OBJECTIVE)
    paired = paired[:, :, 0] - paired[:, :, 1]  # (A, K, trials)
    diff = np.nanmean(paired, axis=-1)
    alpha = np.asarray(axes["n_train"], np.float64) / int(result.grid.points[0].data.d)
    out = {"knob": others[0], "alpha": alpha, "values": np.asarray(axes[others[0]], np.float64)}
    out |= {"difference": diff, "difference_std": np.nanstd(paired, axis=-1)}
    out["better"] = np.where(diff < 0, ps.STARTS[0], ps.STARTS[1])
    out["crossing"] = np.array([ps.crossing(alpha, diff[:, k]) for k in range(diff.shape[1])])
    for k, start in enumerate(ps.STARTS):
        out[start] = {
            key: np.nanmean(by_start(name)[:, :, k], axis=-1)
            for key, name in (
                ("test_loss", "test_loss"),
                ("m", ps.M_POSITIONAL),
                ("theta", ps.THETA_SEMANTIC),
            )
        }
    return out


def singular_cosines(Q: np.ndarray, teacher: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the r directions of ``Q`` (..., trials, d, r) point: its left singular vectors u_k
    (largest singular value first; functions of QQᵀ alone) against ``teacher`` q* (trials, d):
    (|u_kᵀ q*|/‖q*‖, |u_kᵀ 1|/√d), each (..., trials, r), float64."""
    Q = np.asarray(Q, np.float64)
    u = np.linalg.svd(Q, full_matrices=False)[0]  # (..., trials, d, r)
    unit = np.asarray(teacher, np.float64)
    unit = unit / np.linalg.norm(unit, axis=-1, keepdims=True)
    semantic = np.abs(np.einsum("...tdr,td->...tr", u, unit))
    return semantic, np.abs(u.sum(axis=-2)) / np.sqrt(Q.shape[-2])


def random_start(result) -> dict:
    """The random start's final state against α = n/d, from a grid over ``n_train`` alone with the
    overlaps in its curves: ``alpha`` (A,); ``test_loss``, ``m``, ``theta``, ``objective`` (A,)
    means over trials and their stds (``<name>_std``); ``rank`` r of Q; ``cos_semantic``,
    ``cos_positional`` (A, r): the mean over trials of each singular direction's |cos| with q* and
    with 1_d at the last snapshot (``singular_cosines``)."""
    axes = dict(result.grid.axes)
    if list(axes) != ["n_train"]:
        raise ValueError(f"random_start needs a grid over n_train alone, not {list(axes)}")
    alpha = np.asarray(axes["n_train"], np.float64) / int(result.grid.points[0].data.d)
    out = {"alpha": alpha, "rank": int(result.curves["param_Q"].shape[-1])}
    for name, curve in (
        ("test_loss", "test_loss"),
        ("m", ps.M_POSITIONAL),
        ("theta", ps.THETA_SEMANTIC),
        ("objective", ps.OBJECTIVE),
    ):
        values = final(result, curve, ("n_train",))  # (A, trials)
        out[name], out[f"{name}_std"] = np.nanmean(values, axis=-1), np.nanstd(values, axis=-1)
    last = result.curves["param_Q"][0][..., -1, 0, :, :]  # (A, trials, d, r): the first head
    cosines = singular_cosines(last, ps.teachers(result.grid.points[0]))
    out["cos_semantic"], out["cos_positional"] = (np.nanmean(c, axis=-2) for c in cosines)
    return out
