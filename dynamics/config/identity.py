"""What identifies a config: which of its values the hashed document keeps (the one rule,
``kept``: a field at its baseline is left out, so a field added later keeps every older config's
hash), the code of the user parts it names, the contents of the files it reads, and the hash of it
all (``digest``, with ``NUMERICS_VERSION``). ``Config.hash`` and ``Config.to_dict``
(``dynamics.config.sections``) read them. No JAX."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from dynamics import parts
from dynamics.errors import ConfigError
from dynamics.parts.knobs import UNSET, knob_of

# Part of every config hash (results caches, --resume checkpoints): bump it when the same
# config starts giving other numbers, so that old results are recomputed, never mixed in.
# 2: random init draws head h from fold_in(key, h) (packed runs).
# 3: a query whose largest softmax weight is within 1e-2 of 1 takes the derivative relative to
#    that weight (exact at saturation); normalised GD's norm is scaled by max|g| where √Σg² would
#    under- or overflow, and a group with step factor 0 adds nothing to it. Runs that never come
#    near saturation keep their numbers bit for bit (fig2, fig3-gd, planted-gd do), but any
#    run with a saturated query (planted-adam, fig3-adam: last-bit changes, 1e-6 relative on their
#    final losses) changes, so every config hash changes: --resume recomputes every point of a run
#    made before (its checkpoints carry the old hash) and an old results folder reads as another
#    config's (refused where its hash is checked), never mixed in.
# 4: the saturated softmax derivative's transpose selects token r's own term out instead of
#    cancelling it against a copy (a GPU rounded the two copies apart). Runs with a saturated
#    query move in the last bits (fig3-adam and planted-adam final losses by <= 8.4e-7
#    relative, the bottleneck-heads grid and the Hessian diagnostics alike); fig2, fig3-gd and
#    planted-gd keep theirs bit for bit. As for 3: every config hash changes.
NUMERICS_VERSION = 4


def part_fields() -> dict[str, parts.Registry]:
    """``"section.field"`` -> the registry whose part that field names: each registry declares its
    field (``Registry.field``), the one home of the mapping."""
    return {registry.field: registry for registry in parts.REGISTRIES.values()}


def user_sources(cfg) -> dict[str, dict[str, str | None]]:
    """{"section.field": {"path", "sha256"}} of every user part (``"module:attribute"``) the config
    names, for every field that names a part (``part_fields``): where its code is, so results.json
    records it and the config hash covers it."""
    found = {}
    for name, registry in part_fields().items():
        section, field_name = name.split(".")
        value = getattr(getattr(cfg, section), field_name)
        if parts.registry.is_user_name(value) and value not in registry.names:
            try:
                found[name] = registry.get(value, name).source()
            except ConfigError:
                found[name] = {"path": None, "sha256": "unavailable"}
    return found


def file_digest(path: str) -> str:
    try:
        stat = Path(path).stat()
    except OSError:
        return "missing"
    return _cached_digest(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _cached_digest(path: str, size: int, mtime_ns: int) -> str:  # size and mtime key the cache
    from datamodels.npz import content_digest  # lazy: numpy: data from a file only

    try:
        return content_digest(path)
    except OSError:
        return "unreadable"


def digest(doc: dict[str, Any]) -> str:
    """The 16-hex-digit hash of ``doc`` and ``NUMERICS_VERSION``: the ``config_hash`` of every
    result file (a sweep's ``Config.hash``, the bottleneck experiments' keys)."""
    text = json.dumps({"numerics": NUMERICS_VERSION, **doc}, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def declared_fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if knob_of(f) is not None]


def kept(f: dataclasses.Field, value: Any) -> bool:
    """The one rule of the hashed document: a field is left out at its default (its ``baseline``,
    the value every run had before it existed) or None, unless declared ``hashed="always"`` (the
    fields of the first results files, written whatever their value)."""
    spec = knob_of(f)
    if spec is not None and spec.hashed == "always":
        return True
    baseline = spec.baseline if spec is not None and spec.baseline is not UNSET else f.default
    return value not in (baseline, None)


def hashed(section: Any, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of ``section``'s fields without those ``kept`` leaves out."""
    fields = {f.name: f for f in dataclasses.fields(section)}
    return {k: v for k, v in values.items() if kept(fields[k], v)}


def resolved_baselines(cls) -> dict[str, Any]:
    """The fields of a section that resolution fills (default None, a declared ``baseline``): left
    out of a written config, they were at that baseline (``optim.task``, ``sweep.x64``)."""
    out = {}
    for f in declared_fields(cls):
        spec = knob_of(f)
        if f.default is None and spec.baseline is not UNSET:
            out[f.name] = spec.baseline
    return out


def added_fields(cls) -> dict[str, Any]:
    """The fields of a section added after the first results files, with their baseline: what
    the theory diagnostics' replay (the first model and step) needs them at."""
    out = {}
    for f in declared_fields(cls):
        spec = knob_of(f)
        if spec.hashed != "always":
            out[f.name] = spec.baseline if spec.baseline is not UNSET else f.default
    return out
