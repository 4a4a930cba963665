"""The config hash covers every declared knob and every part, read from the declarations.

For each knob (``schema.declared()``: the sections' fields and every data model's parameters) and
each registered part of each field that names one, a changed value is tried on a few base configs:
either validation refuses it (a one-line ConfigError: out of range, or "has no effect" there) or
the resolved config's hash changes. The quick test is exhaustive over the declarations (no
simulation); the slow one runs a sample and checks that a changed hash comes with changed numbers
and an unchanged one with identical numbers.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from dynamics import parts
from dynamics.config import schema
from dynamics.errors import ConfigError

# The bases a changed value is tried on, in order: the first that accepts it is the one compared.
# Each names a setting under which some knobs act (SGD's batch, normalised GD's guard, a factored
# key-query, a random init, a learned query, a regression model, the diagnostics).
BASES = {
    "default": {},
    "sgd": {"optim": {"optimizer": "sgd", "batch_size": 10}},
    "ngd": {"optim": {"optimizer": "normalized-gd"}},
    "adam": {"optim": {"optimizer": "adam", "lr": 0.01}},
    "factored": {"model": {"key_query": "factored", "init": "normal"}, "sweep": {"fast_path": False}},
    "normal": {"model": {"init": "normal"}, "sweep": {"fast_path": False}},
    "learned": {"model": {"query": "learned", "init": "sphere"}, "sweep": {"fast_path": False}},
    "diagnostics": {"sweep": {"diagnostics": ("maxmargin",)}},
    "head_view": {"sweep": {"head_metrics": "on", "heads": (1, 2)}},
}
SMALL = {"sweep": {"heads": (1, 2), "trials": 1}, "optim": {"steps": 4}}

# Fields whose value is a file's path: their contents are hashed (test_trust covers them).
PATHS = {"data.path", "model.init_from"}


@functools.cache
def _valid_base(name: str, model: str = "dm1") -> schema.Config:
    """``_base`` validated, once per base and data model (every knob's case reads the same ones)."""
    return schema.validate(_base(name, model))


def _base(name: str, model: str = "dm1") -> schema.Config:
    cfg = schema.apply_overrides(schema.Config(), {"data": {"model": model}}, "base", explicit=False)
    cfg = schema.apply_overrides(cfg, SMALL, "base", explicit=False)
    return schema.apply_overrides(cfg, BASES[name], "base", explicit=False)


def _changed(value, k):
    """Values other than ``value`` a knob may take: every other choice, else a nearby number."""
    choices = k.spec.choices
    if choices is not None:
        return [c for c in choices if c != value]
    if isinstance(value, bool) or k.spec.switch:
        return [not value]
    if k.name == "heads":
        return [(1, 3)]
    if k.name in ("readout_steps", "attention_steps"):
        return [(0, 2)]
    if k.name == "diagnostics":
        return [("sharpness",), ("kernel",)]
    if k.name == "head_size":
        return [2]
    if isinstance(value, int):
        return [value + 1, max(value - 1, 1), value * 2]
    if isinstance(value, float):
        return [value * 0.5 if value else 0.1, value + 0.25]
    if isinstance(value, tuple) and value and all(isinstance(v, float) for v in value):
        return [tuple(v * 0.5 for v in value)]
    if value is None:
        return [2, 0.1, 5]
    return []


def _cases():
    """(knob key, the data model it is tried under) for every declared knob and data parameter."""
    out = []
    for k in schema.declared():
        if k.key in PATHS:
            continue
        if k.section == "data" and k.variants:
            out += [(k.key, model) for models, _ in k.variants for model in models]
        else:
            out.append((k.key, "dm1"))
    return out


def _value(cfg: schema.Config, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def _try(cfg: schema.Config, key: str, value):
    """The resolved config with ``key`` set to ``value`` by a user, or None where it is refused."""
    section, name = key.split(".")
    try:
        return schema.validate(schema.apply_overrides(cfg, {section: {name: value}}, "test"))
    except ConfigError:
        return None


def _accepted_changes(key: str, model: str):
    """Every (base, value, resolved base, resolved changed) the validation accepts."""
    found = []
    for base_name in BASES:
        try:
            base = _valid_base(base_name, model)
        except ConfigError:
            continue
        current = _value(base, key)
        for value in _changed(current, _declared(key, model)):
            changed = _try(base, key, value)
            if changed is not None and changed != base:
                found.append((base_name, value, base, changed))
    return found


def _declared(key: str, model: str):
    k = next(k for k in schema.declared() if k.key == key)
    for models, spec in k.variants:
        if model in models:
            return dataclasses.replace(k, spec=spec)
    return k


@pytest.mark.parametrize("key,model", _cases(), ids=lambda v: str(v))
def test_every_accepted_change_of_a_knob_changes_the_hash(key, model):
    """A user's changed value is refused or moves the hash: never a silent no-op under one hash."""
    found = _accepted_changes(key, model)
    for base_name, value, base, changed in found:
        assert changed.hash() != base.hash(), (base_name, key, value)
    if not found:  # refused everywhere: the reason is one line naming the knob
        k = _declared(key, model)
        base = schema.validate(_base("default", model))
        values = _changed(_value(base, key), k)
        assert not values or _try(base, key, values[0]) is None


def test_every_part_of_every_registry_moves_the_hash_or_is_refused():
    """Each registered part in turn, in the field its registry declares (``Registry.field``)."""
    tried = 0
    for field_key, registry in schema.part_fields().items():
        for name in registry.names:
            for base_name in BASES:
                try:
                    base = _valid_base(base_name)
                except ConfigError:
                    continue
                if _value(base, field_key) == name:
                    continue
                changed = _try(base, field_key, name)
                if changed is not None:
                    assert changed.hash() != base.hash(), (base_name, field_key, name)
                    tried += 1
    assert tried >= sum(len(r) - 1 for r in parts.REGISTRIES.values())


def test_a_user_part_in_any_registry_is_in_the_hash(tmp_path, monkeypatch):
    """Every field that names a part records a user part's source, which the hash covers: an
    edited part never keeps its hash (a user init's scale changed from 1 to 3 kept it, once)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    for field_key in schema.part_fields():
        section, name = field_key.split(".")
        cfg = schema.Config()
        cfg = dataclasses.replace(
            cfg, **{section: dataclasses.replace(getattr(cfg, section), **{name: "hp:part"})}
        )
        assert field_key in schema.user_sources(cfg), field_key
        assert field_key in cfg.to_dict()["sources"], field_key
    hashes = []
    for exponent in (0.5, 1.0):  # the same name, the code edited between two runs
        (tmp_path / "hp_scaling.py").write_text(f"class sched:\n    exponent = {exponent}\n")
        cfg = schema.apply_overrides(schema.Config(), {"optim": {"lr_scaling": "hp_scaling:sched"}}, "test")
        hashes.append(schema.validate(cfg).hash())
        import sys

        sys.modules.pop("hp_scaling", None)
    assert hashes[0] != hashes[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "key,value",
    [
        ("optim.lr", 0.5),
        ("model.temperature", 2.0),
        ("model.init", "normal"),
        ("optim.loss", "exp"),
        ("optim.lr_scaling", "sqrt"),
        ("model.norm", "mean"),
        ("model.attention", "sigmoid"),
        ("data.n_train", 50),
        ("sweep.seed", 1),
        ("sweep.x64", True),
    ],
)
def test_a_changed_hash_comes_with_changed_numbers(key, value):
    from dynamics import run_sweep

    base = schema.validate(_base("default"))
    changed = _try(base, key, value)
    if changed is None:  # an init that draws needs the full path
        changed = _try(schema.validate(_base("normal")), key, value)
        base = schema.validate(_base("normal"))
    assert changed is not None and changed.hash() != base.hash()
    a, b = (run_sweep(c, progress=False) for c in (base, changed))
    assert not np.array_equal(a.curves["train_loss"], b.curves["train_loss"]), key
    again = run_sweep(base, progress=False)
    assert again.config.hash() == a.config.hash()
    assert np.array_equal(again.curves["train_loss"], a.curves["train_loss"])


def _idle_cases():
    """(base, key, value) where a knob's declared ``idle`` says the value changes nothing."""
    out = []
    for base_name in BASES:
        for model in ("dm1", "max-margin"):
            try:
                base = _valid_base(base_name, model)
            except ConfigError:
                continue
            for k in schema.declared():
                if k.spec.idle is None or k.section == "data" or k.key in PATHS:
                    continue
                for value in _changed(_value(base, k.key), k)[:1]:
                    section = k.key.split(".")[0]
                    try:
                        cfg = schema.apply_overrides(base, {section: {k.name: value}}, "t", explicit=False)
                    except ConfigError:
                        continue
                    if k.spec.idle(cfg.resolved()) is not None:
                        out.append((base_name, model, k.key, value))
    return out


def test_a_value_without_effect_is_refused_on_every_surface_with_one_message():
    """The knob's ``idle`` is the one reason: a keyword, a TOML table and a flag-made config
    (all explicit) are refused with it."""
    cases = _idle_cases()
    assert any(key == "model.init" and model == "max-margin" for _, model, key, _ in cases)
    for base_name, model, key, value in cases:
        base = _base(base_name, model)
        section, name = key.split(".")
        with pytest.raises(ConfigError, match="has no effect") as err:
            schema.validate(schema.apply_overrides(base, {section: {name: value}}, "test"))
        assert "\n" not in str(err.value)


@pytest.mark.slow
def test_a_value_declared_without_effect_changes_no_number():
    """By simulation, on a sample of the rules' cases: the run with the refused value (set as a
    preset would, not refused) gives the same curves, bit for bit."""
    from dynamics import run_sweep

    cases = _idle_cases()
    sample = [c for c in cases if c[2] in ("model.init", "model.init_scale", "sweep.head_sims")]
    assert sample
    seen = set()
    for base_name, model, key, value in sample:
        if (model, key) in seen:
            continue
        seen.add((model, key))
        base = _base(base_name, model)
        section, name = key.split(".")
        changed = schema.apply_overrides(base, {section: {name: value}}, "t", explicit=False)
        a, b = (run_sweep(c, progress=False) for c in (base, changed))
        assert np.array_equal(a.curves["train_loss"], b.curves["train_loss"], equal_nan=True), (model, key)
