"""The mixture's defaults and geometries, in a module without JAX.

Their one home: ``datamodels.mixture`` draws with them and ``dynamics.config.schema`` validates with
them, so the config layer (and ``--help``) never imports JAX.
"""

from __future__ import annotations

import types

GEOMETRIES = ("antipodal", "orthogonal")  # mu_- = -mu_+, or mu_- orthogonal to mu_+

# DM1 as this project defines it (docs/model.md), one value per knob of `tokenized_mixture`;
# `dm1` overrides any of these. The single home of these defaults: dynamics.config.schema uses them.
DM1_DEFAULTS = types.MappingProxyType(
    {
        "T": 10,  # tokens per example
        "zeta": 0.1,  # fraction of relevant tokens: r = max(1, round(zeta * T)) = 1
        "r": None,  # number of relevant tokens; None: from zeta
        "d": 32,  # token width
        "signal": 1.0,  # S = |mu_+| = |nu_j|
        "noise": 1.0,  # sigma; each noise token has norm about sigma
        "n_irrelevant": 4,  # M irrelevant means
        "geometry": "antipodal",  # mu_- = -mu_+
        "first_relevant": False,
    }
)

ICL_BASES = ("random", "identity")  # icl-linreg: Λ's eigenvectors, a random orthonormal basis or e_1..e_D
# icl-linreg: x's covariance Λ, eigenvalues ∝ 1..D (trace 1) or the identity I_D
ICL_COVARIANCES = ("spectrum", "identity")

# max-margin: unit-norm Gaussian tokens (local convergence) or the learned-prompt experiment
MAX_MARGIN_SETTINGS = ("local", "prompt")

# positional-semantic: θ(0) Q = q* (the teacher), Q = 1_d/√d (the positional direction), or the
# model's own random init (any rank r = head size)
POSITIONAL_STARTS = ("semantic", "positional", "random")
