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
``python -m figures``. Each experiment is a module of its own (``dynamics.experiments.expressivity``,
``dynamics.experiments.bottleneck_heads``); this one names the two and gathers their public names.
Their command line is ``dynamics.cli.bottleneck``, their figures are in ``figures.bottleneck``.
"""

from __future__ import annotations

from dynamics.experiments.bottleneck_heads import (
    HEADS,
    QUICK_HEADS,
    HeadsConfig,
    heads_key,
    matched_heads,
    produce_heads,
    run_heads,
    sweep_configs,
)
from dynamics.experiments.expressivity import (
    EXPRESSIVITY,
    QUICK_EXPRESSIVITY,
    ExpressivityConfig,
    attention_errors,
    expressivity_fits,
    expressivity_key,
    min_rank_threshold,
    produce_expressivity,
    row_kl,
    run_expressivity,
)
from dynamics.sweeps.result_files import write_experiment as write

NAMES = (EXPRESSIVITY, HEADS)

__all__ = [
    "EXPRESSIVITY",
    "HEADS",
    "NAMES",
    "QUICK_EXPRESSIVITY",
    "QUICK_HEADS",
    "ExpressivityConfig",
    "HeadsConfig",
    "attention_errors",
    "expressivity_fits",
    "expressivity_key",
    "heads_key",
    "matched_heads",
    "min_rank_threshold",
    "produce_expressivity",
    "produce_heads",
    "row_kl",
    "run_expressivity",
    "run_heads",
    "sweep_configs",
    "write",
]
