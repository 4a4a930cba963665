"""The built-in data models' own parameters: a frozen dataclass each (its section of the config,
every field declared with ``knob``: default, help, grid axis, range) and the check of the resolved
values, one-line errors. Registered in ``dynamics.parts.data.DATA_MODELS``; the in-context and the
positional-semantic models' are in ``dynamics.parts.icl`` and ``dynamics.parts.positional``. No JAX."""

from __future__ import annotations

import dataclasses
import math

from datamodels.defaults import DM1_DEFAULTS, GEOMETRIES, MAX_MARGIN_SETTINGS
from dynamics.errors import ConfigError
from dynamics.parts.knobs import knob
from dynamics.parts.value_checks import choice, finite
from dynamics.parts.values import floats_arg


@dataclasses.dataclass(frozen=True)
class MixtureParams:
    """The tokenized mixture's own parameters (DM1's values by default)."""

    zeta: float = knob(
        DM1_DEFAULTS["zeta"],
        "sparsity ζ: r = max(1, round(ζT)) relevant tokens",
        grid=float,
        unit="ζ",
        hashed="always",
        within="[0.0, 1.0]",
    )
    r: int | None = knob(
        DM1_DEFAULTS["r"],
        "number of relevant tokens r (overrides ζ)",
        flag="--relevant",
        grid=int,
        unit="r",
        hashed="always",
        within="[1, inf)",
    )
    signal: float = knob(
        DM1_DEFAULTS["signal"],
        "norm S of the means",
        grid=float,
        unit="S",
        hashed="always",
        within="[0.0, inf)",
        power=4,  # a token scale: ∂L/∂W of the squared loss ∝ (Φ − y)·U·X³ ∝ X⁴
    )
    noise: float = knob(
        DM1_DEFAULTS["noise"],
        "noise level σ, g ~ N(0, I/d)",
        grid=float,
        unit="σ",
        hashed="always",
        within="[0.0, inf)",
        power=4,  # a token scale: ∂L/∂W of the squared loss ∝ (Φ − y)·U·X³ ∝ X⁴
    )
    n_irrelevant: int = knob(
        DM1_DEFAULTS["n_irrelevant"],
        "number M of irrelevant means (0: pure noise)",
        flag="--irrelevant-means",
        grid=int,
        unit="M",
        hashed="always",
        within="[0, inf)",
    )
    geometry: str = knob(
        DM1_DEFAULTS["geometry"],
        "class means antipodal (μ₋ = −μ₊) or orthogonal",
        choices=GEOMETRIES,
        hashed="always",
        grid=str,
    )
    first_relevant: bool = knob(DM1_DEFAULTS["first_relevant"], "position 1 always relevant", hashed="always")


@dataclasses.dataclass(frozen=True)
class PlantedParams:
    """The planted teacher's own parameters."""

    teacher_heads: int = knob(
        1,
        "teacher heads H* (1 is realisable by a zero-init student)",
        grid=int,
        unit="H*",
        hashed="always",
        within="[1, 4096]",
    )
    teacher_scale: float = knob(
        1.0,
        "teacher scale β, the std of its scores",
        grid=float,
        unit="β",
        hashed="always",
        within="[0.0, inf)",
        power=1,  # β·s of the teacher, whose labels are signs: as it is
    )
    label_noise: float = knob(
        0.0, "label flip probability p", grid=float, unit="p", hashed="always", within="[0.0, 0.5]"
    )


@dataclasses.dataclass(frozen=True)
class SparseTokenParams:
    """The sparse-token model's own parameters (Barnfield, Cui, Lu 2025)."""

    r: int = knob(
        3,
        "R marked positions of a positive example",
        flag="--relevant",
        grid=int,
        unit="R",
        hashed="always",
        within="[1, inf)",
    )
    positive_rate: float = knob(
        0.2, "probability π of a positive", grid=float, unit="π", hashed="always", within="[0.0, 1.0]"
    )
    signal: float = knob(
        6.0,
        "strength θ of the signal on a marked token",
        grid=float,
        unit="θ",
        hashed="always",
        within="[0.0, inf)",
        power=4,  # a token scale: ∂L/∂W of the squared loss ∝ (Φ − y)·U·X³ ∝ X⁴
    )


@dataclasses.dataclass(frozen=True)
class LocationParams:
    """Single-location regression's own parameters (Marion, Berthier, Biau, Boyer 2025)."""

    gamma: float = knob(
        math.sqrt(0.5),
        "spread γ of the relevant token around √(d/2)·k*",
        grid=float,
        unit="γ",
        hashed="always",
        within="[0.0, inf)",
        power=4,  # a token scale: ∂L/∂W of the squared loss ∝ (Φ − y)·U·X³ ∝ X⁴
    )
    epsilon: float = knob(  # a target scale: the squared loss and the noise floor ∝ ε²
        0.1,
        "target noise ε (noise floor ε²)",
        grid=float,
        unit="ε",
        hashed="always",
        within="[0.0, inf)",
        power=2,
    )


@dataclasses.dataclass(frozen=True)
class MultiLocationParams(LocationParams):
    """Multi-location regression's own parameters: F = len(strengths) features."""

    strengths: tuple[float, ...] = knob(
        (1.0, 0.7, 0.5),
        "strengths c_f, one per feature, e.g. 1,0.7,0.5",
        parse=floats_arg,
        hashed="always",
        power=2,  # a target scale: the squared loss ∝ y² ∝ c_f²
        single="already a list, one number per feature",
    )


@dataclasses.dataclass(frozen=True)
class MaxMarginParams:
    """Max-margin token selection's own parameters (Tarzanagh, Li, Thrampoulidis, Oymak 2023)."""

    setting: str = knob(
        "local",
        "local: unit-norm Gaussian tokens, ±1 labels (local convergence); prompt: the learned-prompt data",
        choices=MAX_MARGIN_SETTINGS,
        hashed="always",
        single="each setting has its own query (first, or a learned prompt)",
    )
    start_range: float = knob(
        1.0,
        "W(0) and k(0) entries uniform in ±a/√d",
        grid=float,
        unit="a",
        hashed="always",
        within="[0.0, inf)",
        power=2,  # a scale of θ(0), as σ₀: squared
    )


COPY_LOGITS = ("free", "tied")


@dataclasses.dataclass(frozen=True)
class EmergenceParams:
    """The emergence task's own parameters (Zucchet, d'Angelo, Lampinen, Chan 2025)."""

    copies: int = knob(
        1,
        "B in-context copies of the relevant token (the last B positions)",
        grid=int,
        unit="B",
        hashed="always",
        within="[1, inf)",
    )
    copy_logits: str = knob(
        "free",
        "positional attention: each copy its own logit (free), or one shared by the B (tied)",
        choices=COPY_LOGITS,
        hashed="always",
        grid=str,
    )
    repetition: float = knob(
        0.0,
        "cross-sample repetition p: the relevant token is a fixed x̄ with probability p",
        grid=float,
        unit="p",
        hashed="always",
        within="[0.0, 1.0]",
    )
    test_repetition: float = knob(
        0.0,
        "the test set's repetition probability (0: tested without repetition)",
        grid=float,
        unit="p_test",
        hashed="always",
        within="[0.0, 1.0]",
    )
    target_noise: float = knob(
        0.0,
        "target noise σ: y = W*x + σg (noise floor σ²)",
        grid=float,
        unit="σ",
        hashed="always",
        within="[0.0, inf)",
        power=2,  # a target scale: the squared loss ∝ y²
    )


def check_mixture(data) -> None:
    if data.r is not None and data.r > data.T:
        raise ConfigError(f"data.r={data.r} must be <= data.T={data.T}")
    choice("data.geometry", data.geometry, GEOMETRIES)
    if data.d < data.n_irrelevant + 2:
        raise ConfigError(
            f"data.d={data.d} is too small for data.n_irrelevant={data.n_irrelevant}: "
            f"the mixture needs d >= M + 2 = {data.n_irrelevant + 2} orthogonal means"
        )


def check_sparse_token(data) -> None:
    if data.r > data.T:
        raise ConfigError(f"data.r={data.r} must be <= data.T={data.T}")


def check_location(data) -> None:
    if data.d < 2:
        raise ConfigError(f"data.d={data.d} must be >= 2: k* and v* are orthonormal")


def check_multi_location(data) -> None:
    F = len(data.strengths)
    if F == 0:
        raise ConfigError("data.strengths=() is empty: give one strength c_f per feature, e.g. 1,0.7,0.5")
    for c in data.strengths:
        finite("data.strengths", c)
    if F > data.T:
        raise ConfigError(f"data.strengths has F={F} features but data.T={data.T}: F <= T distinct positions")
    if data.d < 2 * F:
        raise ConfigError(f"data.d={data.d} must be >= 2F = {2 * F}: the F keys and F values are orthonormal")


def check_max_margin(data) -> None:
    choice("data.setting", data.setting, MAX_MARGIN_SETTINGS)
    if data.T < 2:
        raise ConfigError(f"data.T={data.T}: max-margin token selection needs T >= 2 tokens")
    if data.setting == "prompt" and (data.d < 3 or data.T < 3):
        raise ConfigError(
            f"data.setting='prompt' needs d >= 3 (two shift coordinates and a score) and T >= 3; "
            f"got d={data.d}, T={data.T}"
        )


def check_emergence(data) -> None:
    if data.copies > data.T:
        raise ConfigError(
            f"data.copies={data.copies} must be <= data.T={data.T} (the copies fill the last B positions)"
        )
    choice("data.copy_logits", data.copy_logits, COPY_LOGITS)


def emergence_outputs(data) -> int:
    """The emergence model's targets y = W*x ∈ R^d: o = d."""
    return int(data.d)
