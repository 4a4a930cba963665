"""The inputs of the PyTorch loop (``benchmarks.torch_loop``): mhsim's own data and θ(0) for a sweep.

    python -m benchmarks.loop_inputs --file inputs.npz -- --data-model dm1 --init normal --heads 1,2 ...

The arguments after ``--`` are ``python -m dynamics.run``'s; the sweep they describe is read with
the command line's own parser (``dynamics.cli.run.config_from_args``), its data drawn as the sweep
draws it (``make_data`` from the sweep's data key, without x64) and each run's θ(0) as the engine
draws it (``inits.init_params`` from the trial's init key: head h from fold_in(key, h)). So the
loop trains on the same arrays from the same start, and a file-to-file comparison of the curves
checks the loop (``tests/test_torch_loop.py``).

The file holds, with C = len(heads) · trials configurations in the order (H, trial):
``X_train`` (trials, n, T, d), ``y_train``, ``X_test``, ``y_test``, ``mask_test`` (trials, n_test, T),
``directions`` (trials, P, d) (absent when the data has none), ``heads``, ``trial``, ``lr`` (C,),
``U0`` (ΣH, d) and ``W0`` (ΣH, d, d) (the configurations' heads one after the other), ``log_steps``
(the logged steps, 0 … steps), ``steps``, ``head_metrics`` (whether mhsim logs the per-head
metrics: ``--head-metrics`` with its ``auto`` rule, or ``--log``), ``head_steps`` (the per-head
view's steps), ``head_sims`` (the head–head matrices too: ``--head-sims`` or ``--log all``) and
``norm`` (c_H: sqrt, mean or sum).
Only what the loop implements is accepted: GD on the logistic loss, softmax attention at β = 1,
query ``first``, a free W per head, no bias, zero or normal init; anything else is refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

SUPPORTED = {  # (section, field): the values the loop implements
    ("optim", "optimizer"): ("gd",),
    ("optim", "loss"): ("logistic",),
    ("optim", "batch_size"): (0, None),
    ("model", "query"): ("first",),
    ("model", "key_query"): ("full",),
    ("model", "attention"): ("softmax",),
    ("model", "temperature"): (1.0,),
    ("model", "temperature_decay"): (0.0,),
    ("model", "bias"): (False,),
    ("model", "init"): ("zero", "normal"),
    ("model", "init_from"): (None,),
}


def check_supported(cfg) -> None:
    """A ValueError naming the first setting the loop does not implement, and what it allows."""
    for (section, field), allowed in SUPPORTED.items():
        value = getattr(getattr(cfg, section), field, allowed[0])
        if value not in allowed:
            raise ValueError(f"{section}.{field}={value!r}: the PyTorch loop implements only {allowed}")


def build(argv: list[str]) -> dict[str, np.ndarray]:
    """The arrays of the file for the sweep ``argv`` (``python -m dynamics.run``'s arguments)."""
    import jax

    from dynamics.cli.run import build_parser, config_from_args
    from dynamics.core import inits, rng
    from dynamics.core.data import make_data
    from dynamics.parts.metrics import head_metrics_on, head_schedule, head_sims_on
    from dynamics.sweeps.sweep import step_size

    exp = config_from_args(build_parser().parse_args(argv))
    if not hasattr(exp, "steps"):
        raise ValueError(f"{' '.join(argv)!r} is a grid (a knob with several values); give one sweep")
    cfg = exp.config
    check_supported(cfg)
    trials, heads = cfg.sweep.trials, tuple(cfg.sweep.heads)
    k_data, k_init = rng.split(rng.seed(cfg.sweep.seed))  # as the sweep splits its seed
    with jax.enable_x64(False):
        data, shared = make_data(cfg.data, k_data, trials, task=cfg.optim.task)
    if shared:
        raise ValueError("data from a file: give the synthetic model mhsim draws (the loop reads per trial)")
    init_keys = [rng.fold_in(k_init, i) for i in range(trials)]
    d = int(data.X_train.shape[-1])
    U0, W0, rows = [], [], []
    for H in heads:
        for t in range(trials):
            if cfg.model.init == "zero":
                p = inits.init_params(None, H, d)
            else:
                p = inits.init_params(init_keys[t], H, d, init="normal", scale=cfg.model.init_scale)
            U0.append(np.asarray(p["U"], np.float32))
            W0.append(np.asarray(p["W"], np.float32))
            rows.append((H, t, step_size(cfg, H)))
    out = {
        name: np.asarray(getattr(data, name), np.float32)
        for name in ("X_train", "y_train", "X_test", "y_test")
    }
    out["mask_test"] = np.asarray(data.mask_test, bool)
    if data.directions is not None:
        out["directions"] = np.asarray(data.directions, np.float32)
    out["heads"] = np.array([r[0] for r in rows], np.int64)
    out["trial"] = np.array([r[1] for r in rows], np.int64)
    out["lr"] = np.array([r[2] for r in rows], np.float32)
    out["U0"] = np.concatenate(U0)
    out["W0"] = np.concatenate(W0)
    out["log_steps"] = np.asarray(exp.steps, np.int64)
    out["steps"] = np.int64(cfg.optim.steps)
    out["head_metrics"] = np.bool_(head_metrics_on(cfg))
    out["head_steps"] = np.asarray(head_schedule(exp.steps, cfg), np.int64)  # the per-head view's
    out["head_sims"] = np.bool_(head_sims_on(cfg))  # --head-sims, or --log all
    out["norm"] = np.str_(cfg.model.norm)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, sweep = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog="python -m benchmarks.loop_inputs", description=__doc__.split("\n\n")[0])
    p.add_argument("--file", type=Path, required=True, help="the .npz to write")
    args = p.parse_args(ours)
    np.savez(args.file, **build(sweep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
