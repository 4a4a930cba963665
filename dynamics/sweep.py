"""Run a sweep over the number of heads and collect curves and a summary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from dynamics.config import Config, log_schedule, validate
from dynamics.data import make_data, width_of
from dynamics.engine import METRICS, mask_diverged, program_for, step_size, train_trials

SUMMARY_METRICS = ("train_loss", "test_loss", "train_error", "test_error")


@dataclass
class SweepResult:
    config: Config  # resolved
    heads: np.ndarray  # (n_heads,)
    steps: np.ndarray  # (L,) logged steps, 0 = before the first update
    curves: dict[str, np.ndarray]  # metric -> (n_heads, trials, L); NaN after divergence
    diverged_at: np.ndarray  # (n_heads, trials): step of the first non-finite loss, -1 = never
    wall_time_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> list[dict[str, Any]]:
        """Per H: mean and std over the trials that did not diverge of each final metric."""
        rows = []
        for i, h in enumerate(self.heads):
            ok = self.diverged_at[i] < 0
            row: dict[str, Any] = {
                "heads": int(h),
                "trials": int(ok.size),
                "n_diverged": int((~ok).sum()),
                "diverged": bool((~ok).any()),
                "diverged_at": [int(s) for s in self.diverged_at[i]],
            }
            for name in SUMMARY_METRICS:
                final = self.curves[name][i, ok, -1]
                row[name] = {
                    "mean": float(np.mean(final)) if ok.any() else None,
                    "std": float(np.std(final)) if ok.any() else None,
                }
            rows.append(row)
        return rows


def run_sweep(cfg: Config, *, progress: bool = True) -> SweepResult:
    """Validate, build the data, run every H; one compiled program per distinct shape."""
    cfg = validate(cfg)
    start = time.perf_counter()
    root = jax.random.PRNGKey(cfg.sweep.seed)
    k_data, k_init = jax.random.split(root)
    data, shared = make_data(cfg.data, k_data, cfg.sweep.trials)
    d = width_of(data)
    schedule = log_schedule(cfg.optim.steps, cfg.sweep.log_every, cfg.sweep.log_points)
    steps = np.array(schedule)
    init_keys = jnp.stack([jax.random.fold_in(k_init, i) for i in range(cfg.sweep.trials)])

    per_head: list[dict[str, np.ndarray]] = []
    div_rows = []
    heads = list(cfg.sweep.heads)
    bar = tqdm(heads, desc=f"{cfg.name}", unit="H", disable=not progress, leave=False)
    for h in bar:
        bar.set_postfix(H=h)
        prog = program_for(cfg, h, d, schedule)
        metrics, div_at = train_trials(
            prog,
            init_keys,
            data,
            jnp.float32(h),
            jnp.float32(step_size(cfg, h)),
            jnp.float32(cfg.model.init_scale),
            shared_data=shared,
        )
        metrics = {k: np.array(v, dtype=np.float64) for k, v in metrics.items()}
        div_at = np.array(div_at)
        # A non-finite metric at a logged step (e.g. exp loss overflowing at the last step,
        # after the in-program check) also counts as divergence at that step.
        bad = ~np.isfinite(metrics["train_loss"])  # (trials, L)
        first_bad = np.where(bad.any(axis=1), steps[np.argmax(bad, axis=1)], div_at)
        div_at = np.minimum(div_at, first_bad)
        mask_diverged(metrics, steps, div_at)
        per_head.append(metrics)
        div_rows.append(np.where(div_at > cfg.optim.steps, -1, div_at))
    bar.close()
    curves = {k: np.stack([m[k] for m in per_head]) for k in METRICS}
    return SweepResult(
        config=cfg,
        heads=np.array(heads),
        steps=steps,
        curves=curves,
        diverged_at=np.stack(div_rows),
        wall_time_s=time.perf_counter() - start,
    )
