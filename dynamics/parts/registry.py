"""Parts found by name: a ``Registry`` of small frozen objects, each the one home of a choice.

A part is metadata (its name, a line of help, the rules the engine relies on) plus the dotted
path of its implementation, ``impl = "module:attribute"``, imported on first use
(``Part.load``). Metadata never imports JAX, so the command lines' ``--help``, the config
layer and validation stay JAX-free; the engine loads the functions when it traces.

Every place that offers a choice reads its registry: the flags' ``choices``, TOML and
keyword validation (``Registry.get``: a one-line error naming the field, the bad value and the
allowed ones, with a suggestion), ``--help`` texts and figure labels. Registering a part makes
it available everywhere at once::

    from dynamics.parts import OPTIMIZERS, Optimizer
    OPTIMIZERS.register(Optimizer("rmsprop", "optax's RMSProp", impl="mypkg.opt:rmsprop_direction",
                                  per_coordinate=True))
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import inspect
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from dynamics.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Part:
    """A named choice. ``impl``: ``"module:attribute"`` of its function (or object), loaded lazily."""

    name: str
    help: str
    impl: str = ""
    label: str = ""  # how figures name it (default: the name)

    def load(self) -> Any:
        """The implementation ``impl`` points at (imported on first use; Python caches modules)."""
        if not self.impl:
            raise ConfigError(f"{type(self).__name__.lower()} {self.name!r} has no implementation")
        module, _, attr = self.impl.partition(":")
        try:
            obj = importlib.import_module(module)
            for name in attr.split("."):
                obj = getattr(obj, name)
        except (ImportError, AttributeError) as err:
            raise ConfigError(
                f"{self.name!r}: its implementation {self.impl!r} cannot be loaded ({err})"
            ) from None
        return obj

    @property
    def title(self) -> str:
        return self.label or self.name

    def fingerprint(self) -> str | None:
        """A digest of what this part is: its metadata, and the source of its implementation and of
        every function among its fields (each with its module's whole file). None when some source
        cannot be read (a function typed at a prompt): a program built from it is then not kept on
        disk. A replaced or edited part thus never gets another part's compiled program."""
        cached = _FINGERPRINTS.get(id(self))
        obj = self.load() if self.impl else None
        if cached is not None and cached[0] is self and cached[1] is obj:
            return cached[2]
        digest = hashlib.sha256(type(self).__qualname__.encode())
        values = [getattr(self, f.name) for f in dataclasses.fields(self)]
        for value in [*values, obj]:
            text = _source(value) if callable(value) else repr(value)
            if text is None:
                digest = None
                break
            digest.update(text.encode() + b"\0")
        result = None if digest is None else digest.hexdigest()
        _FINGERPRINTS[id(self)] = (self, obj, result)
        return result


_FINGERPRINTS: dict[int, tuple[Part, Any, str | None]] = {}


def _source(fn: Any) -> str | None:
    """The source of ``fn`` and of its module's file, or None if either cannot be read."""
    try:
        own = inspect.getsource(fn)
        path = inspect.getsourcefile(fn)
        with open(path, "rb") as f:  # type: ignore[arg-type]
            whole = f.read()
    except (OSError, TypeError):
        return None
    return own + hashlib.sha256(whole).hexdigest()


P = TypeVar("P", bound=Part)


class Registry(Mapping[str, P], Generic[P]):
    """Parts of one kind by name, in registration order (the first is listed first in ``--help``).

    ``field`` is the config field that names a part of this kind (``model.query``): errors name it.
    """

    def __init__(self, kind: str, field: str, parts: tuple[P, ...] = (), part_type: type | None = None):
        self.kind, self.field = kind, field
        self.part_type = part_type or (type(parts[0]) if parts else Part)  # what register takes
        self._parts: dict[str, P] = {}
        for part in parts:
            self.register(part)

    def register(self, part: P, *, replace: bool = False) -> P:
        """Add ``part`` (``replace=True`` to swap one of the same name); returns it."""
        if not isinstance(part, self.part_type):
            raise TypeError(
                f"the {self.kind} registry takes {self.part_type.__name__} parts, got {type(part).__name__}"
            )
        if not isinstance(part.name, str) or not part.name:
            raise ValueError(f"a part's name must be a non-empty string, got {part.name!r}")
        if part.impl and (":" not in part.impl or not all(part.impl.partition(":")[::2])):
            raise ValueError(f"{self.kind} {part.name!r}: impl={part.impl!r} must be 'module:attribute'")
        if part.name in self._parts and not replace:
            raise ConfigError(f"{self.kind} {part.name!r} is registered already (replace=True to swap it)")
        self._parts[part.name] = part
        return part

    def get(self, name: object, field: str | None = None) -> P:  # type: ignore[override]
        """The part called ``name``; an enum member counts by its value. A one-line ConfigError
        naming the field, the value and what is allowed otherwise."""
        key = getattr(name, "value", name)
        if isinstance(key, str) and key in self._parts:
            return self._parts[key]
        allowed = ", ".join(map(repr, self._parts))
        close = difflib.get_close_matches(str(key), list(self._parts), n=1) if isinstance(key, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{field or self.field}={key!r} is not one of {allowed}{hint}")

    def __getitem__(self, name: str) -> P:
        return self._parts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._parts

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._parts)

    def label(self, name: str) -> str:
        """How figures name the part ``name``: its label, or the name itself for a part not
        registered in this process (a results file written with a user's part)."""
        return self._parts[name].title if name in self._parts else str(name)

    def help(self) -> str:
        """'name: help; name: help' for ``--help``."""
        return "; ".join(f"{p.name}: {p.help}" for p in self._parts.values())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._parts)})"
