"""What a config's parts allow the engine: the exact fast path and packing runs of different H.
Read from the parts' own rules (``dynamics.parts.model``, ``dynamics.parts.training``); no JAX."""

from __future__ import annotations

import dataclasses

from dynamics.infra import fingerprints
from dynamics.parts.data import DATA_MODELS
from dynamics.parts.model import ACTIVATIONS, INITS, KEY_QUERIES, NORMS, QUERIES, READOUTS
from dynamics.parts.training import CONSTRAINTS, LOSSES, LR_SCALINGS, OPTIMIZERS, REDUCTIONS, SAMPLINGS


def uses_fast_path(cfg) -> bool:
    """One stored head of weight H stands exactly for H identical heads: asked for
    (``sweep.fast_path``), a symmetric init, and every part's rule allows it."""
    m = cfg.model
    return bool(
        cfg.sweep.fast_path
        and m.init_from is None  # a file's θ(0): heads not known to be equal
        and (INITS[m.init].symmetric or world_sets_start(cfg) is not None)  # a world's θ(0): heads equal
        and KEY_QUERIES[m.key_query].fast_path
        and QUERIES[m.query].fast_path
        and ACTIVATIONS[m.attention].fast_path
        and NORMS[m.norm].fast_path
        and OPTIMIZERS[cfg.optim.optimizer].per_coordinate
    )


def drawn_params(cfg) -> frozenset[str]:
    """The head arrays θ(0) draws for ``cfg``'s model: the readout U and the attention's (W; Q and
    K; a learned k; position logits a). The bias b starts at 0 in every init."""
    return head_arrays(cfg.model)


def head_arrays(model) -> frozenset[str]:
    """A head's arrays in the model (a ``ModelConfig``): U (or V and O) and the attention's."""
    query, layout = QUERIES[model.query], KEY_QUERIES[model.key_query]
    if query.positional:
        attention = {"a"}
    elif query.learned:
        attention = {"k"}
    else:
        attention = ({"Q"} if layout.tied else {"Q", "K"}) if layout.factored else {"W"}
    readout = READOUTS[getattr(model, "readout", "direct")]
    if getattr(model, "output", "pooled") == "sequence":  # value identity (no readout U) or a value V
        return frozenset({*(readout.params if readout.values else ()), *attention})
    return frozenset({*readout.params, *attention})


def world_sets_start(cfg) -> frozenset[str] | None:
    """The arrays of θ(0) the data model's worlds set, where they are every array the init would
    draw (then the init, its scale and a file's θ(0) change nothing); None otherwise."""
    model = DATA_MODELS.get(cfg.data.model)
    if model.leaves_init is not None and model.leaves_init(cfg.data):
        return None
    drawn = drawn_params(cfg)
    return drawn if model.sets_init and drawn <= set(model.world_params) else None


def world_sets_attention(cfg) -> bool:
    """The data model's worlds set the attention's arrays of θ(0) but not every array the init
    draws (a learned value V beside a world's Q): θ(0) is then no zero of the attention."""
    model = DATA_MODELS.get(cfg.data.model)
    if not model.sets_init:
        return False
    readout = set(READOUTS[getattr(cfg.model, "readout", "direct")].params)
    attention = head_arrays(cfg.model) - readout
    return bool(attention) and attention <= set(model.world_params)


def can_pack_heads(cfg) -> bool:
    """Runs of different H can share S head slots when a head's shapes do not depend on H:
    not for factored split heads (d_h = d // H)."""
    return KEY_QUERIES[cfg.model.key_query].packs_across_heads(cfg.model.head_size)


# Every registry of parts, by the name of the config field its parts fill; each registry also
# declares that field as "section.field" (``Registry.field``), the one home of the mapping.
REGISTRIES = {
    r.field.split(".")[1] if r is not DATA_MODELS else "data_model": r
    for r in (
        DATA_MODELS,
        LOSSES,
        OPTIMIZERS,
        LR_SCALINGS,
        SAMPLINGS,
        CONSTRAINTS,
        QUERIES,
        ACTIVATIONS,
        NORMS,
        KEY_QUERIES,
        INITS,
        REDUCTIONS,
        READOUTS,
    )
}

# A static program argument (the engine's Program, a DataConfig) names its parts in fields named as
# the config's; the engine's online sampler is a reference with the data model's name.
_FIELDS = {r.field.split(".")[1]: r for r in REGISTRIES.values()}
_FIELDS["sampler"] = DATA_MODELS


def parts_of(obj) -> list:
    """The registered parts a dataclass (a Program, a DataConfig) names in its fields."""
    if not dataclasses.is_dataclass(obj):
        return []
    found = []
    for field in dataclasses.fields(obj):
        registry = _FIELDS.get(field.name)
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
