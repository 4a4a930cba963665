"""Registries of mhsim's parts (``dynamics.parts.registry``): data models, losses, optimisers and
their step-size scalings, query modes, attention activations, head normalisations, key-query
layouts and inits. Each part is the one home of its choice; metadata loads without JAX."""

from dynamics.parts.data import DATA_MODELS, DataModel
from dynamics.parts.model import (
    ACTIVATIONS,
    INITS,
    KEY_QUERIES,
    NORMS,
    QUERIES,
    Activation,
    Init,
    KeyQuery,
    Norm,
    Query,
    check_icl_init,
    check_init,
    check_sphere,
)
from dynamics.parts.registry import Part, Probe, Registry
from dynamics.parts.rules import REGISTRIES, can_pack_heads, uses_fast_path
from dynamics.parts.training import (
    CONSTRAINTS,
    GROUPS,
    LOSSES,
    LR_SCALINGS,
    OPTIMIZERS,
    PER_RUN_PARAMS,
    SAMPLINGS,
    Constraint,
    Loss,
    LrScaling,
    Optimizer,
    Sampling,
)

__all__ = [
    "ACTIVATIONS",
    "CONSTRAINTS",
    "GROUPS",
    "PER_RUN_PARAMS",
    "SAMPLINGS",
    "Constraint",
    "Sampling",
    "check_sphere",
    "DATA_MODELS",
    "INITS",
    "KEY_QUERIES",
    "LOSSES",
    "LR_SCALINGS",
    "NORMS",
    "OPTIMIZERS",
    "QUERIES",
    "REGISTRIES",
    "Activation",
    "DataModel",
    "Init",
    "KeyQuery",
    "Loss",
    "LrScaling",
    "Norm",
    "Optimizer",
    "Part",
    "Query",
    "Registry",
    "can_pack_heads",
    "check_icl_init",
    "check_init",
    "uses_fast_path",
    "Probe",
]
