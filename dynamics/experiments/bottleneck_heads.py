"""The heads-at-a-fixed-width half of the low-rank bottleneck (Bhojanapalli et al., ICML 2020).

Train factored multi-head classifiers at a fixed width d on DM1 and the planted model for
H = 1, 2, 4, … with head size ``split`` (d_h = d/H) and fixed (d_h = T), and a fixed layout whose
head count H' matches the split layout's parameter count, each through ``run_sweep``. The preset
``bottleneck-heads`` (``dynamics.experiments.bottleneck``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from dynamics.config.schema import (
    PAPER_SIZES,
    Config,
    ConfigError,
    apply_overrides,
    digest,
    preset,
    validate,
)
from dynamics.core import inits
from dynamics.core import model as mdl
from dynamics.sweeps.headline import entry
from dynamics.sweeps.result_files import SCHEMA_VERSION, write_experiment
from dynamics.sweeps.sweep import run_sweep
from dynamics.sweeps.sweep_result import HEAD_COUNT

HEADS = "bottleneck-heads"


@dataclass(frozen=True)
class HeadsConfig:
    data_models: tuple[str, ...] = ("dm1", "planted")  # one column of the figure each
    width: int = 32  # the fixed embedding width d
    tokens: int = 10  # T; the fixed layout's head size is T
    heads: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # H, at most d (split needs d // H >= 1)
    trials: int | None = None  # None: the preset's (5)
    steps: int | None = None  # None: the preset's (1000 Adam steps)
    n_train: tuple[int, ...] | None = None  # per data model; None: PAPER_SIZES
    n_test: tuple[int, ...] | None = None
    seed: int = 0  # every sweep uses this seed: the same data for split and fixed

    def validate(self) -> HeadsConfig:
        for name in ("data_models", "heads", "n_train", "n_test"):
            value = getattr(self, name)
            if not (isinstance(value, tuple | list) or (value is None and name.startswith("n_"))):
                raise ConfigError(f"{name}={value!r} must be a tuple, e.g. {getattr(HeadsConfig, name)!r}")
        for name in ("trials", "steps", "seed"):
            value, lo = getattr(self, name), 0 if name == "seed" else 1
            if not (value is None and name != "seed") and (
                isinstance(value, bool) or not isinstance(value, int) or value < lo
            ):
                raise ConfigError(f"{name}={value!r} must be an integer >= {lo}")
        for m in self.data_models:
            if m not in PAPER_SIZES:
                raise ConfigError(f"data_models={m!r} is not one of {', '.join(map(repr, PAPER_SIZES))}")
        if not self.heads or not self.data_models:
            raise ConfigError("heads and data_models must be non-empty")
        for name, value in (
            ("width", self.width),
            ("tokens", self.tokens),
            *(("heads", h) for h in self.heads),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        too_many = [h for h in self.heads if h > self.width]
        if too_many:
            raise ConfigError(f"heads={too_many} exceed width={self.width}: the split layout needs H <= d")
        for name, sizes in (("n_train", self.n_train), ("n_test", self.n_test)):
            if sizes is not None and len(sizes) != len(self.data_models):
                raise ConfigError(f"{name}={list(sizes)} needs one value per data model {self.data_models}")
        return self

    def base(self, data_model: str) -> Config:
        """The sweep config of one data model (layout and heads are set per sweep)."""
        i = self.data_models.index(data_model)
        n_train, n_test = PAPER_SIZES[data_model]
        data = {
            "model": data_model,
            "d": self.width,
            "T": self.tokens,
            "n_train": self.n_train[i] if self.n_train else n_train,
            "n_test": self.n_test[i] if self.n_test else n_test,
        }
        sweep: dict[str, Any] = {"seed": self.seed}
        if self.trials is not None:
            sweep["trials"] = self.trials
        optim = {} if self.steps is None else {"steps": self.steps}
        over = {"data": data, "sweep": sweep, "optim": optim}
        cfg = apply_overrides(preset(HEADS), over, HEADS, explicit=False)
        return dataclasses.replace(cfg, name=f"{HEADS}-{data_model}")


QUICK_HEADS = HeadsConfig(
    width=8, tokens=4, heads=(1, 2, 8), trials=2, steps=10, n_train=(16, 16), n_test=(20, 20)
)


def matched_heads(n_heads: int, d: int, head_size: int) -> int:
    """H' ≥ 1 whose fixed-head-size parameter count is closest to the split layout's with H heads."""
    target = inits.param_count(n_heads, d, "factored", "split")
    per_head = inits.param_count(1, d, "factored", head_size)
    lo = max(1, target // per_head)
    return min((lo, lo + 1), key=lambda h: (abs(h * per_head - target), h))


def _layouts(cfg: HeadsConfig) -> dict[str, tuple[str | int, tuple[int, ...]]]:
    """layout -> (head_size, heads to run). The fixed sweep also runs the parameter-matched H'."""
    T = cfg.tokens
    matched = {matched_heads(h, cfg.width, T) for h in cfg.heads}
    return {"split": ("split", tuple(cfg.heads)), "fixed": (T, tuple(sorted(set(cfg.heads) | matched)))}


def sweep_configs(cfg: HeadsConfig) -> dict[tuple[str, str], Config]:
    """(data model, layout) -> the validated sweep config that ``run_heads`` runs."""
    cfg.validate()
    out = {}
    for m in cfg.data_models:
        for name, (head_size, heads) in _layouts(cfg).items():
            base = cfg.base(m)
            out[m, name] = validate(
                apply_overrides(
                    base,
                    {
                        "model": {"head_size": head_size},
                        "sweep": {"heads": heads},
                        "name": f"{base.name}-{name}",
                    },
                    HEADS,
                    explicit=False,
                )
            )
    return out


def heads_key(cfg: HeadsConfig | None = None) -> str:
    """The ``config_hash`` that ``run_heads`` writes, without running anything."""
    cfg = cfg or HeadsConfig()
    configs = {f"{m}/{name}": c.to_dict() for (m, name), c in sweep_configs(cfg).items()}
    return _heads_hash(cfg, configs)


def _heads_hash(cfg: HeadsConfig, sweeps: dict[str, dict]) -> str:
    return digest({"payload": {"heads": dataclasses.asdict(cfg), "sweeps": sweeps}})


def run_heads(cfg: HeadsConfig, *, progress: bool = True) -> dict[str, Any]:
    """Both layouts on every data model through ``run_sweep``: {'results', 'arrays'}."""
    if not isinstance(cfg, HeadsConfig):
        raise TypeError(f"cfg={cfg!r:.80} must be a HeadsConfig")
    start = time.perf_counter()
    jobs = sweep_configs(cfg)  # validates cfg first (H > width is its ConfigError, not the model's)
    layouts = _layouts(cfg)
    arrays: dict[str, np.ndarray] = {}
    summary, configs = [], {}
    for (m, name), sweep_cfg in tqdm(
        jobs.items(), desc=HEADS, unit="sweep", disable=not progress, leave=False
    ):
        head_size, _ = layouts[name]
        res = run_sweep(sweep_cfg, progress=progress)
        configs[f"{m}/{name}"] = res.config.to_dict()
        d = res.config.data.d
        for key in ("train_loss", "test_loss", "train_error", "test_error"):
            arrays[f"{m}__{name}__{key}"] = res.curves[key]  # (n_heads, trials, L)
        arrays[f"{m}__{name}__heads"] = res.heads
        arrays[f"{m}__{name}__steps"] = res.steps
        arrays[f"{m}__{name}__diverged_at"] = res.diverged_at
        for row in res.summary():
            h = row.pop(HEAD_COUNT)
            row = {"heads": h, **row}  # this experiment's own table keeps its key (its figures read it)
            row.update(
                data_model=m,
                layout=name,
                head_size=mdl.resolve_head_size(head_size, d, h),
                param_count=inits.param_count(h, d, "factored", head_size),
            )
            summary.append(row)
    matched = [
        {
            "split_heads": h,
            "split_params": inits.param_count(h, cfg.width, "factored", "split"),
            "fixed_heads": (hm := matched_heads(h, cfg.width, cfg.tokens)),
            "fixed_params": inits.param_count(hm, cfg.width, "factored", cfg.tokens),
        }
        for h in cfg.heads
    ]
    results = {
        "schema_version": SCHEMA_VERSION,
        "experiment": HEADS,
        "config": dataclasses.asdict(cfg),
        "sweep_configs": configs,
        "config_hash": _heads_hash(cfg, configs),
        "wall_time_s": time.perf_counter() - start,
        "layouts": {
            "split": "d_h = d // H (the standard layout)",
            "fixed": f"d_h = T = {cfg.tokens} for every H",
        },
        "matching": (
            "param_count = H·d + 2·H·d·d_h; the split count is about d + 2d² for every H, so the "
            "fixed layout is matched by its head count H' (closest count), listed in 'matched'"
        ),
        "matched": matched,
        "summary": summary,
    }
    results["headline"] = headline(results)
    return {"results": results, "arrays": arrays}


def headline(results: dict[str, Any]) -> dict[str, dict]:
    """The experiment's headline (from its results dict): per data model and layout, the final train
    and test loss at the largest H (the smallest heads of the split layout), mean ± std over trials."""
    out = {}
    for row in results["summary"]:
        m, layout = row["data_model"], row["layout"]
        largest = max(r["heads"] for r in results["summary"] if (r["data_model"], r["layout"]) == (m, layout))
        if row["heads"] != largest:
            continue
        for name in ("train_loss", "test_loss"):
            out[f"{m}_{layout}_{name}"] = entry(
                f"{m} {layout} {name.replace('_', ' ')} (H = {largest}, d_h = {row['head_size']})",
                row[name]["mean"],
                std=row[name]["std"],
                about="final value at the largest H, mean ± std over the trials that did not diverge",
            )
    return out


def produce_heads(out_dir: Path, progress: bool = True, cfg: HeadsConfig | None = None) -> None:
    """Run the heads-at-fixed-width experiment (default size) and write its results into
    ``out_dir`` (a figures ``Entry.produce``)."""
    write_experiment(run_heads(cfg or HeadsConfig(), progress=progress), out_dir, "heads.npz")
