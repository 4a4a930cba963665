"""What a config's parts allow the engine: the exact fast path and packing runs of different H.
Read from the parts' own rules (``dynamics.parts.model``, ``dynamics.parts.training``); no JAX."""

from __future__ import annotations

import dataclasses
import functools

from dynamics.infra import fingerprints
from dynamics.parts.model import ACTIVATIONS, INITS, KEY_QUERIES, NORMS, QUERIES
from dynamics.parts.training import OPTIMIZERS


def uses_fast_path(cfg) -> bool:
    """One stored head of weight H stands exactly for H identical heads: asked for
    (``sweep.fast_path``), a symmetric init, and every part's rule allows it."""
    m = cfg.model
    return bool(
        cfg.sweep.fast_path
        and m.init_from is None  # a file's θ(0): heads not known to be equal
        and INITS[m.init].symmetric
        and KEY_QUERIES[m.key_query].fast_path
        and QUERIES[m.query].fast_path
        and ACTIVATIONS[m.attention].fast_path
        and NORMS[m.norm].fast_path
        and OPTIMIZERS[cfg.optim.optimizer].per_coordinate
    )


def can_pack_heads(cfg) -> bool:
    """Runs of different H can share S head slots when a head's shapes do not depend on H:
    not for factored split heads (d_h = d // H)."""
    return KEY_QUERIES[cfg.model.key_query].packs_across_heads(cfg.model.head_size)


# A static program argument (the engine's Program, a DataConfig) names its parts in fields named as
# the config's (each registry declares its field: ``Registry.field``); the engine's online sampler
# is a reference with the data model's name.
_ALIASES = {"sampler": "model"}


@functools.cache
def _fields() -> dict:
    # dynamics.parts builds REGISTRIES after importing this module: read on first use
    from dynamics.parts import REGISTRIES

    fields = {r.field.split(".")[1]: r for r in REGISTRIES.values()}
    return {**fields, **{alias: fields[name] for alias, name in _ALIASES.items()}}


def parts_of(obj) -> list:
    """The registered parts a dataclass (a Program, a DataConfig) names in its fields."""
    if not dataclasses.is_dataclass(obj):
        return []
    found = []
    for field in dataclasses.fields(obj):
        registry = _fields().get(field.name)
        value = getattr(obj, field.name)
        value = value if isinstance(value, str) else getattr(value, "name", value)
        if registry is not None and isinstance(value, str) and value in registry:
            found.append(registry[value])
    return found


def parts_fingerprint(static: dict) -> str | None:
    """The fingerprints of every part the static arguments name, in one string; None if one of
    them has no readable source (then its program is not kept on disk)."""
    prints = []
    for value in static.values():
        if getattr(value, "user_metrics", ()):  # a user's functions: identified by object, not kept
            return None
        for part in parts_of(value):
            fp = part.fingerprint()
            if fp is None:
                return None
            prints.append(f"{type(part).__name__}:{part.name}:{fp}")
    return "\n".join(prints)


fingerprints.register(parts_fingerprint)  # a kept program's key names the parts' source
