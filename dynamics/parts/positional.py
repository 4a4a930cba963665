"""The positional-semantic data model's declarations (Cui, Behrens, Krzakala, Zdeborová 2024;
``datamodels.positional_semantic``): its parameters, their check and its targets' size. Metadata
only (no JAX); registered in ``dynamics.parts.data.DATA_MODELS``."""

from __future__ import annotations

import dataclasses
import math

from datamodels.defaults import POSITIONAL_STARTS
from dynamics.errors import ConfigError
from dynamics.parts.knobs import knob
from dynamics.parts.value_checks import choice, finite
from dynamics.parts.values import floats_arg


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
        "θ(0) of the tied key-query Q (d, 1): semantic (Q = q*, the teacher) or positional (Q = 1_d/√d)",
        choices=POSITIONAL_STARTS,
        grid=str,
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


def positional_semantic_outputs(data) -> int:
    """Its targets y (T, d) per example, flattened: o = T·d."""
    return int(data.T) * int(data.d)
