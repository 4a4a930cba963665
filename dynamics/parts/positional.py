"""The positional-semantic data model's declarations (Cui, Behrens, Krzakala, Zdeborová 2024;
``datamodels.positional_semantic``): its parameters, their check and its targets' size. Metadata
only (no JAX); registered in ``dynamics.parts.data.DATA_MODELS``."""

from __future__ import annotations

import dataclasses
import math

from datamodels.defaults import POSITIONAL_STARTS
from dynamics.errors import ConfigError
from dynamics.parts.knobs import knob
from dynamics.parts.model import INITS, KEY_QUERIES, QUERIES
from dynamics.parts.value_checks import choice, finite
from dynamics.parts.values import floats_arg


def start_idle(cfg) -> str | None:
    """The start is Q(0) of a tied key-query: a model without one (a free W, factored Q and K, a
    learned query or positions) never reads the world's Q."""
    model = cfg.model
    if QUERIES.get(model.query).matrix and KEY_QUERIES.get(model.key_query).tied:
        return None
    return (
        f"data.start sets a tied key-query's Q(0); model.key_query={model.key_query!r} with "
        f"model.query={model.query!r} has no tied Q (use --key-query tied)"
    )


@dataclasses.dataclass(frozen=True)
class PositionalSemanticParams:
    """x_ℓ = p_ℓ + z_ℓ, z_ℓ ~ N(0, σ²I); y = (1 − ω) softmax((Zq*)(Zq*)ᵀ/d) Z + ω A Z."""

    semantic_noise: float = knob(
        0.5,
        "σ of the semantic parts z_ℓ ~ N(0, σ²I_d)",
        grid=float,
        unit="σ",
        within="(0.0, 1e6]",
        power=4,  # a token scale: the targets' Z and the tokens' Z enter the gradient of Q as Z⁴
    )
    omega: float = knob(
        0.3, "ω: the target's share of the fixed mixing A Z", grid=float, unit="ω", within="[0.0, 1.0]"
    )
    mixing: tuple[float, ...] = knob(
        (0.6, 0.4, 0.4, 0.6),
        "the T×T mixing matrix A, row-major (T² numbers)",
        parse=floats_arg,
        power=2,  # a target scale: the squared loss ∝ y² ∝ A²
        single="already a list, the matrix's T² numbers",
    )
    start: str = knob(
        "semantic",
        "θ(0) of the tied key-query Q: semantic (Q = q*, the teacher) or positional (Q = 1_d/√d), "
        "rank 1; random: the model's init (--init normal, N(0, σ₀²/d) entries, rank r = head size)",
        choices=POSITIONAL_STARTS,
        grid=str,
        idle=start_idle,
    )


def check_positional_semantic(data) -> None:
    if data.T != 2:
        raise ConfigError(f"data.T={data.T}: positional-semantic has T = 2 tokens (codes p₁ = −p₂)")
    if len(data.mixing) != data.T * data.T:
        raise ConfigError(
            f"data.mixing has {len(data.mixing)} numbers; the mixing matrix A is T×T = {data.T * data.T}"
        )
    for a in data.mixing:
        finite("data.mixing", a)
    choice("data.start", data.start, POSITIONAL_STARTS)
    if not math.isfinite(data.semantic_noise):
        raise ConfigError(f"data.semantic_noise={data.semantic_noise!r} must be finite")


def positional_leaves_init(data) -> bool:
    """The random start sets no θ(0): Q(0) is the model's own init."""
    return data.start == "random"


def check_positional_start(model, data) -> None:
    """The start against the model (a ``ModelConfig``): q* and 1_d/√d are one column, so they set a
    tied Q of rank 1 alone; the random start is the model's init, so that init must draw."""
    if data.start == "random":
        if model.init_from is not None:
            raise ConfigError(
                f"data.start='random' draws Q(0) with model.init; model.init_from={model.init_from!r} "
                "sets θ(0) from a file: drop one"
            )
        if not INITS.get(model.init).random:
            raise ConfigError(
                f"data.start='random' draws Q(0) with model.init; model.init={model.init!r} draws "
                "nothing (θ(0) = 0): use model.init='normal' (--init normal)"
            )
    elif KEY_QUERIES.get(model.key_query).tied and model.head_size != 1:
        raise ConfigError(
            f"data.start={data.start!r} sets Q(0) of rank 1 (one column); model.head_size="
            f"{model.head_size!r} asks for rank r ≠ 1: use model.head_size=1 or data.start='random'"
        )


def positional_semantic_outputs(data) -> int:
    """Its targets y (T, d) per example, flattened: o = T·d."""
    return int(data.T) * int(data.d)
