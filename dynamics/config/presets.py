"""The named presets, each declared once (``Preset``): a one-line purpose (``python -m
dynamics.run --list-presets``), the overrides on top of the defaults and its headline. The grid
presets are in ``dynamics.config.grid_axes``."""

from __future__ import annotations

from typing import Any, NamedTuple

from dynamics.config.overrides import apply_overrides
from dynamics.config.sections import DIAGNOSTICS, Config
from dynamics.errors import ConfigError
from dynamics.parts.value_checks import suggest as _suggest

PAPER_HEADS = (1, 2, 4, 8, 16, 32, 64)
# (n_train, n_test) of the papers' runs per data model; the bottleneck uses them too.
PAPER_SIZES = {"dm1": (100, 300), "planted": (1000, 3000)}
_DM1 = {"model": "dm1", "n_train": PAPER_SIZES["dm1"][0], "n_test": PAPER_SIZES["dm1"][1]}
_PLANTED = {"model": "planted", "n_train": PAPER_SIZES["planted"][0], "n_test": PAPER_SIZES["planted"][1]}
_SWEEP = {"heads": PAPER_HEADS, "trials": 5, "log_points": 200}

# The theory's quantities along training (docs/theory.md); η = H is the edge-of-stability
# question, η = 1 the small-step reference.
_THEORY_DM1 = {
    "data": _DM1,
    "optim": {"optimizer": "gd", "lr": 1.0, "lr_scaling": "linear", "steps": 2000},
    "sweep": {"heads": (1, 2, 4, 8, 16, 32), "trials": 3, "log_points": 100, "diagnostics": DIAGNOSTICS},
}

# icl-linear: GD steps for all four drops of its staircase at σ₀ = 0.1 (ten times the authors'
# 0.01, whose fourth drop comes after about 25 000 steps: docs/frontier.md)
ICL_STEPS = 8000

# icl-heads (He, Pan, Chen, Yang 2025): Adam on a fresh batch of 256 each step; the paper trains
# 500 001 steps (--steps 500001), the default a fiftieth of it to stay near ten minutes on two CPU cores
ICL_HEADS_STEPS = 10_000
ICL_HEADS_FULL_STEPS = 500_001
_ICL_D = 5  # x ∈ R^d: tokens [x; y] of width d + 1
ICL_HEADS: dict[str, dict[str, Any]] = {
    "data": {
        "model": "icl-linreg",
        "T": 41,  # L = 40 context tokens and the query
        "d": _ICL_D + 1,
        "covariance": "identity",
        "task_variance": 1.0 / _ICL_D,
        "epsilon": 0.1**0.5,  # noise variance 0.1 on every label
        "n_train": 256,
        "n_test": 10_000,
    },
    "model": {
        "query": "outside",
        "norm": "sum",
        "key_query": "factored",
        "head_size": _ICL_D + 1,
        "readout": "factored",
        "init": "torch",
        "temperature": (_ICL_D + 1) ** -0.5,
    },
    "optim": {
        "optimizer": "adam-minibatch",
        "sampling": "online",
        "batch_size": 256,
        "lr": 1e-3,
        "loss": "mse",
        "steps": ICL_HEADS_STEPS,
    },
    "sweep": {"heads": (1, 2, 4, 8), "trials": 1, "log_points": 100, "save_params": True},
}

# The emergence task (docs/frontier.md): T = d = 16, batches of 64, η = 0.5 with the paper's ½.
EMERGENCE: dict[str, dict[str, Any]] = {
    "data": {"model": "emergence", "T": 16, "d": 16, "n_train": 64, "n_test": 512},
    "model": {"query": "position", "norm": "sum", "init": "zero"},
    "optim": {
        "optimizer": "sgd",
        "sampling": "online",
        "batch_size": 64,
        "lr": 0.25,
        "loss": "mse",
        "steps": 400,
    },
    "sweep": {"heads": (1,), "trials": 8, "log_every": 2},
}

# The plain sweep's headline: per H the final train and test loss.
GENERIC_HEADLINE = "dynamics.sweeps.headline:final_losses"


class Preset(NamedTuple):
    """A preset's declaration: what it is for, its overrides, and its headline, the numbers it is
    about (results.json's "headline", the line under the command's table, ``result.headline()``)."""

    purpose: str  # one line (``--list-presets``)
    overrides: dict[str, dict[str, Any]]  # {section: {field: value}} on top of the defaults
    # The dotted "module:function" path of the function that computes the headline from the result
    # (a SweepResult; a bottleneck preset: its results dict), loaded on first use as a part's impl
    # (no import here: the functions live with their math, in the layers above); a plain sweep's
    # is GENERIC_HEADLINE.
    headline: str


# name -> its declaration; ``tests/test_headline.py`` checks that every headline loads.
PRESETS: dict[str, Preset] = {
    "default": Preset("small DM1 sweep, GD η=1 (the no-argument run)", {}, GENERIC_HEADLINE),
    "fig2": Preset(
        "DM1, GD η=1.0 constant: effect of H at a fixed step (Deora et al. Fig. 2)",
        {"data": _DM1, "optim": {"optimizer": "gd", "lr": 1.0, "steps": 10000}, "sweep": _SWEEP},
        GENERIC_HEADLINE,
    ),
    "fig3-gd": Preset(
        "DM1, GD η=1.0·H: step size scaled as O(H) (Fig. 3 left)",
        {
            "data": _DM1,
            "optim": {"optimizer": "gd", "lr": 1.0, "lr_scaling": "linear", "steps": 10000},
            "sweep": _SWEEP,
        },
        GENERIC_HEADLINE,
    ),
    "fig3-adam": Preset(
        "DM1, Adam η=0.06: adaptive steps (Fig. 3 right)",
        {"data": _DM1, "optim": {"optimizer": "adam", "lr": 0.06, "steps": 1000}, "sweep": _SWEEP},
        GENERIC_HEADLINE,
    ),
    "planted-gd": Preset(
        "planted teacher-student, GD η=1.0·H",
        {
            "data": _PLANTED,
            "optim": {"optimizer": "gd", "lr": 1.0, "lr_scaling": "linear", "steps": 3000},
            "sweep": _SWEEP,
        },
        GENERIC_HEADLINE,
    ),
    "planted-adam": Preset(
        "planted teacher-student, Adam η=0.06",
        {"data": _PLANTED, "optim": {"optimizer": "adam", "lr": 0.06, "steps": 1000}, "sweep": _SWEEP},
        GENERIC_HEADLINE,
    ),
    "theory-dm1": Preset(
        "DM1, GD η=1.0·H, H=1..32 with sharpness, tangent kernel and max-margin diagnostics",
        _THEORY_DM1,
        GENERIC_HEADLINE,  # and the diagnostics' own (sharpness peak, kernel distance, max-margin cos)
    ),
    "theory-dm1-constant": Preset(
        "DM1, GD η=1.0 constant, H=1..32 with sharpness, tangent kernel and max-margin diagnostics",
        {**_THEORY_DM1, "optim": {**_THEORY_DM1["optim"], "lr_scaling": "constant"}},
        GENERIC_HEADLINE,
    ),
    "icl-linear": Preset(
        "in-context linear regression, 5 rank-one linear-attention heads summed: one loss drop per "
        "eigenvalue of Λ (Zhang et al. 2025)",
        {
            "data": {"model": "icl-linreg", "n_train": 5000, "n_test": 1000},
            "model": {
                "query": "last",
                "attention": "linear",
                "norm": "sum",
                "key_query": "factored",
                "head_size": 1,
                "init": "icl",
                "init_scale": 0.1,
            },
            "optim": {"optimizer": "gd", "lr": 0.02, "loss": "mse", "steps": ICL_STEPS},
            "sweep": {"heads": (5,), "trials": 5, "log_points": 400},
        },
        "dynamics.experiments.icl:headline",  # measured plateau levels beside the closed form
    ),
    "icl-heads": Preset(
        "in-context linear regression with H = 1, 2, 4, 8 softmax heads, Adam on fresh batches: test "
        f"mse per H beside the reference predictors (He et al. 2025; {ICL_HEADS_STEPS} steps, the "
        f"paper's {ICL_HEADS_FULL_STEPS} with --steps {ICL_HEADS_FULL_STEPS}, which moved each H's test mse "
        "by at most 0.002 and takes about 50 times as long)",
        ICL_HEADS,
        "dynamics.experiments.icl_heads:headline",  # test mse per H, the references, the structure
    ),
    # The two bottleneck presets run through dynamics.experiments.bottleneck, which sets the data
    # model, n and head layout per sweep on top of the overrides below.
    "bottleneck-expressivity": Preset(
        "one factored head's T×T attention fitted to random targets: best error vs head size d_h",
        {},
        "dynamics.experiments.expressivity:headline",  # d_h that fits vs T − 1
    ),
    "bottleneck-heads": Preset(
        "DM1 and planted at d=32, H=1..32: head size d/H (split) vs fixed = T, Adam η=0.06",
        {
            "data": {"d": 32},
            "model": {"key_query": "factored", "head_size": "split", "init": "normal", "init_scale": 1.0},
            "optim": {"optimizer": "adam", "lr": 0.06, "steps": 1000},
            "sweep": {"heads": (1, 2, 4, 8, 16, 32), "trials": 5, "log_points": 100},
        },
        "dynamics.experiments.bottleneck_heads:headline",  # final losses, smallest heads
    ),
    # Head specialisation (dynamics.experiments.specialisation; its figure runs erf, softmax and
    # softmax1). Tuned: η = 0.01 (0.02 oscillates), β = 2 (sharper competition), σ₀ = 0.5 (heads
    # start apart enough that the extra head rarely duplicates a feature), 2·10⁴ steps.
    "specialisation": Preset(
        "multi-location F=3 (c = 1, 0.7, 0.5), d=64, H=4 learned queries, online SGD: "
        "which head takes which feature",
        {
            "data": {
                "model": "multi-location",
                "d": 64,
                "T": 10,
                "strengths": (1.0, 0.7, 0.5),
                "n_train": 64,
                "n_test": 1000,
            },
            "model": {
                "query": "learned",
                "norm": "sum",
                "init": "normal",
                "init_scale": 0.5,
                "attention": "softmax",
                "temperature": 2.0,
            },
            "optim": {"optimizer": "sgd", "lr": 0.01, "steps": 20000, "batch_size": 64, "sampling": "online"},
            "sweep": {
                "heads": (4,),
                "trials": 5,
                "log_points": 100,
                "head_metrics": "on",
                "save_params": True,
            },
        },
        "dynamics.experiments.specialisation:headline",  # features held, in order
    ),
    # Marion, Berthier, Biau, Boyer (ICLR 2025), their SGD experiment (docs/frontier.md): one erf
    # head with a learned query k and readout v on the sphere, β_t = 2/(1 + 10⁻⁴ t), online SGD.
    "single-location": Preset(
        "single-location regression, one erf head on the sphere, online SGD (Marion et al. 2025)",
        {
            "data": {"model": "single-location", "d": 80, "T": 10, "n_train": 5, "n_test": 1000},
            "model": {
                "query": "learned",
                "attention": "erf",
                "temperature": 2.0,
                "temperature_decay": 1e-4,
                "norm": "sum",
                "init": "sphere",
            },
            "optim": {
                "optimizer": "sgd",
                "loss": "mse",
                "lr": 1e-3,
                "batch_size": 5,
                "sampling": "online",
                "constraint": "sphere",
                "steps": 200_000,
            },
            "sweep": {"heads": (1,), "trials": 30, "log_every": 500},
        },
        "dynamics.experiments.single_location:headline",  # excess risk vs its floor
    ),
    # Tarzanagh, Li, Thrampoulidis, Oymak (2023), their local-convergence experiment (docs/frontier.md):
    # the readout set to the world's unit v and frozen, W(0) ~ U(±1/√d), normalised GD η = 0.1.
    "max-margin": Preset(
        "max-margin token selection: one softmax head, query x_1, U = v frozen, normalized GD η=0.1 "
        "(Tarzanagh et al. 2023)",
        {
            "data": {"model": "max-margin", "setting": "local", "T": 8, "d": 10, "n_train": 6, "n_test": 6},
            "model": {"query": "first", "norm": "sum", "init": "zero"},
            "optim": {
                "optimizer": "normalized-gd",
                "lr": 0.1,
                "loss": "logistic",
                "steps": 2000,
                "readout_lr_factor": 0.0,
            },
            # snapshots at every logged step (201): the figure's curves are read from them
            "sweep": {"heads": (1,), "trials": 30, "log_every": 10, "save_params": True, "head_every": 1},
        },
        "dynamics.theory.maxmargin:headline",  # corr(W, W^mm), ‖W‖
    ),
    # Their learned-prompt experiment: a learned query p, the readout v (the score coordinate) frozen.
    "max-margin-prompt": Preset(
        "max-margin token selection with a learned prompt p, U = v frozen, normalized GD η=0.1 "
        "(Tarzanagh et al. 2023)",
        {
            "data": {"model": "max-margin", "setting": "prompt", "T": 7, "d": 3, "n_train": 3, "n_test": 3},
            "model": {"query": "learned", "norm": "sum", "init": "zero"},
            "optim": {
                "optimizer": "normalized-gd",
                "lr": 0.1,
                "loss": "logistic",
                "steps": 1000,
                "readout_lr_factor": 0.0,
            },
            "sweep": {"heads": (1,), "trials": 6, "log_every": 10, "save_params": True},
        },
        "dynamics.theory.maxmargin:headline",  # corr(p, p^mm), ‖p‖
    ),
    # Zucchet, d'Angelo, Lampinen, Chan (2025), as docs/frontier.md sets it up: y = W*x_T ∈ R^d, one
    # head of position logits a ∈ R^T and a matrix readout U ∈ R^{d×d} from 0, online SGD. Their
    # loss has a ½ and mhsim's mse has none: η = 0.5 on theirs is lr 0.25 here.
    "emergence": Preset(
        "emergence of sparse attention: y = W*x_T, positional attention, vector readout, online SGD "
        "(Zucchet et al. 2025)",
        EMERGENCE,
        "dynamics.sweeps.headline:emergence_times",  # t_att, t_loss beside t*
    ),
}


def train_label(config: dict) -> str:
    """What a run trains on, from a results.json config: 'batch 64, online' for online SGD (a fresh
    batch each update, no training set), else 'n = 100 train'."""
    optim = config.get("optim", {})
    if optim.get("optimizer") in ("sgd", "adam-minibatch") and optim.get("sampling") == "online":
        return f"batch {optim.get('batch_size')}, online"
    return f"n = {config['data']['n_train']} train"


# Presets that run an experiment of their own rather than a sweep: name -> the command-line
# module whose ``main(argv)`` runs it (``python -m dynamics.run --preset NAME`` goes there).
OWN_RUNNERS = {
    "bottleneck-expressivity": "dynamics.cli.bottleneck",
    "bottleneck-heads": "dynamics.cli.bottleneck",
}


def unknown_preset(name: str, known) -> ConfigError:
    """The one-line error for a preset name that is none of ``known``."""
    return ConfigError(
        f"unknown preset {name!r}{_suggest(name, known)}; run --list-presets (known: {', '.join(known)})"
    )


def preset(name: str) -> Config:
    if not isinstance(name, str):
        raise ConfigError(f"preset name {name!r} must be a string; known: {', '.join(PRESETS)}")
    if name not in PRESETS:
        raise unknown_preset(name, PRESETS)
    return apply_overrides(Config(name=name), PRESETS[name][1], f"preset {name}", explicit=False)
