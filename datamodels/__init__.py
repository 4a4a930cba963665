"""Pure data generators (SPEC section 5): key and parameters in, arrays out."""

from datamodels.mixture import (
    DM1_DEFAULTS,
    GEOMETRIES,
    class_means,
    dm1,
    tokenized_mixture,
)
from datamodels.npz import DataError, UserData, load_npz
from datamodels.planted import Teacher, planted, planted_teacher, teacher_logits

__all__ = [
    "DM1_DEFAULTS",
    "GEOMETRIES",
    "DataError",
    "Teacher",
    "UserData",
    "class_means",
    "dm1",
    "load_npz",
    "planted",
    "planted_teacher",
    "teacher_logits",
    "tokenized_mixture",
]
