"""In-context linear regression's own parameters and check (``icl-linreg`` in ``dynamics.parts.data``),
in a module of their own to keep that one short. Metadata and checks import no JAX."""

from __future__ import annotations

import dataclasses

from datamodels.defaults import ICL_BASES, ICL_COVARIANCES
from dynamics.errors import ConfigError
from dynamics.parts.knobs import knob
from dynamics.parts.value_checks import choice


@dataclasses.dataclass(frozen=True)
class IclParams:
    """In-context linear regression's own parameters (Zhang, Singh, Latham, Saxe 2025)."""

    basis: str = knob(
        "random",
        "Λ's eigenvectors: a random orthonormal basis per trial, or identity",
        choices=ICL_BASES,
        hashed="always",
        grid=str,
    )
    # added after results existed, each left out of the config hash at its default
    whiten: bool = knob(
        False,
        "whiten each drawn set's task vectors (mean 0, covariance I) and centre its inputs over the set "
        "(the authors' data); default: every sequence an independent draw",
    )
    covariance: str = knob(
        "spectrum", "x's covariance Λ: ∝ 1..D as above, or I_D", choices=ICL_COVARIANCES, grid=str
    )
    task_variance: float = knob(  # v and ε: a target variance and scale, the loss ∝ v, ∝ ε²
        1.0, "task variance v: w ~ N(0, v·I_D)", grid=float, within="(0.0, 1e6]", power=1
    )
    epsilon: float = knob(
        0.0,
        "label noise, y = wᵀx + εg, every label (floor ε²)",
        grid=float,
        unit="ε",
        within="[0.0, inf)",
        power=2,
    )


def check_icl(data) -> None:
    choice("data.basis", data.basis, ICL_BASES)
    choice("data.covariance", data.covariance, ICL_COVARIANCES)
    if data.whiten and data.task_variance != 1.0:  # whitening sets the covariance to I
        raise ConfigError(f"data.whiten=True ignores data.task_variance={data.task_variance}: drop one")
    if data.d < 2 or data.T < 2:
        raise ConfigError(
            f"data.T={data.T}, data.d={data.d}: icl-linreg needs d = D + 1 >= 2 and T = N + 1 >= 2"
        )
