"""Pure data generators (docs/model.md): key and parameters in, arrays out.

Pure on purpose: nothing here imports from ``dynamics`` (the planted teacher computes its own
Φ), so a data model can be read, tested and reused without the simulator.

The names below are imported on first use (PEP 562), so importing ``datamodels.defaults``
(the config layer does) does not import JAX.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

_EXPORTS = {
    "datamodels.defaults": ("DM1_DEFAULTS", "GEOMETRIES"),
    "datamodels.mixture": ("MIXTURE", "class_means", "dm1", "tokenized_mixture"),
    "datamodels.npz": ("DataError", "UserData", "load_npz"),
    "datamodels.planted": ("PLANTED", "Teacher", "planted", "planted_teacher", "teacher_logits"),
    "datamodels.protocol": (
        "DataModel",
        "World",
        "direction_matrix",
        "direction_names",
        "noise_floor",
        "planted_of",
        "task_of",
    ),
    "datamodels.sparse_token": ("SPARSE_TOKEN",),
    "datamodels.locations": ("MULTI_LOCATION", "SINGLE_LOCATION"),
    "datamodels.icl": ("ICL_LINREG",),
    "datamodels.max_margin": ("MAX_MARGIN",),
    "datamodels.emergence": ("EMERGENCE",),
    "datamodels.positional_semantic": ("POSITIONAL_SEMANTIC",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'datamodels' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """``datamodels.planted`` names a function and a submodule: importing the submodule must not
    replace the function (the eager package imported the function after the module)."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in _MODULE_OF:
            value = getattr(value, name)  # the submodule's function of the same name
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from datamodels.defaults import DM1_DEFAULTS, GEOMETRIES  # noqa: F401
    from datamodels.emergence import EMERGENCE  # noqa: F401
    from datamodels.icl import ICL_LINREG  # noqa: F401
    from datamodels.locations import MULTI_LOCATION, SINGLE_LOCATION  # noqa: F401
    from datamodels.max_margin import MAX_MARGIN  # noqa: F401
    from datamodels.mixture import MIXTURE, class_means, dm1, tokenized_mixture  # noqa: F401
    from datamodels.npz import DataError, UserData, load_npz  # noqa: F401
    from datamodels.planted import PLANTED, Teacher, planted, planted_teacher, teacher_logits  # noqa: F401
    from datamodels.positional_semantic import POSITIONAL_SEMANTIC  # noqa: F401
    from datamodels.protocol import (  # noqa: F401
        DataModel,
        World,
        direction_matrix,
        direction_names,
        noise_floor,
        planted_of,
        task_of,
    )
    from datamodels.sparse_token import SPARSE_TOKEN  # noqa: F401
