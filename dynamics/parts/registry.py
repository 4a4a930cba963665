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

A *user part* needs no registration: a name ``"package.module:attribute"`` that no part has is
imported (``Registry.get``) and wrapped in a part of the registry's type (``Part.from_object``:
the object's attributes named as the part type's rules set them, e.g. a loss function's ``task``,
an activation's ``normalises``, a data model's ``task`` and ``sizes``). Its ``fingerprint`` covers
its source (the object's and its module file's), so compiled programs are keyed by it; one whose
source cannot be read is never kept on disk. ``Registry.adopt(obj)`` names an object handed over
from Python (``run_sweep(cfg, data=model)``) the same way.

Each registry declares the ``Probe`` of its kind: the attributes a user's part must declare, and
how it is called on a tiny input and what it must return (``dynamics.parts.probes``), or why its
kind takes no user part. A user part is probed once, when first named, before anything runs; a
registry that declares no probe refuses user parts (never one that is read and then ignored).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import inspect
import re
import sys
import threading
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
        return import_object(self.impl, f"{self.name!r}: its implementation {self.impl!r}")

    @classmethod
    def from_object(cls, name: str, obj: Any) -> Part:
        """A user part named ``name`` (``"module:attribute"``) for ``obj``: help from its docstring,
        each rule of this part type from the object's attribute of the same name, where it has one."""
        own = ("name", "help", "impl", "label")
        rules = {
            f.name: getattr(obj, f.name)
            for f in dataclasses.fields(cls)
            if f.name not in own and hasattr(obj, f.name)
        }
        return cls(name, first_line(obj), name, **rules)

    def source(self) -> dict[str, str | None]:
        """Where the implementation's code is: its file and the file's sha256 (16 hex digits),
        None where it cannot be read (an object defined at a prompt)."""
        return source_record(self.load()) if self.impl else {"path": None, "sha256": None}

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
        texts = [_source(v) if callable(v) else repr(v) for v in values]
        texts.append(repr(obj) if obj is None else _object_source(obj))
        for text in texts:
            if text is None:
                digest = None
                break
            digest.update(text.encode() + b"\0")
        result = None if digest is None else digest.hexdigest()
        _FINGERPRINTS[id(self)] = (self, obj, result)
        return result


_FINGERPRINTS: dict[int, tuple[Part, Any, str | None]] = {}
# Objects handed over from Python (``Registry.adopt``), by the "module:attribute" name they run as.
_ADOPTED: dict[str, Any] = {}


def import_object(path: str, where: str | None = None) -> Any:
    """The object ``"module:attribute"`` names (an adopted object first); a one-line ConfigError
    ``"<where> cannot be loaded (...)"`` (default: the quoted path) when it cannot be imported."""
    if path in _ADOPTED:
        return _ADOPTED[path]
    module, _, attr = path.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as err:  # noqa: BLE001 -- a user's module may raise anything on import
        raise ConfigError(f"{where or repr(path)} cannot be loaded ({type(err).__name__}: {err})") from None
    return obj


def first_line(obj: Any) -> str:
    doc = (inspect.getdoc(obj) or "").strip()
    return doc.splitlines()[0] if doc else "a user's part"


def _object_source(obj: Any) -> str | None:
    """The source of a part's implementation: a function's or class's (``_source``); for an
    instance, its class's and its state (a dataclass's repr, or its attributes)."""
    if inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismodule(obj):
        return _source(obj)
    wrapped = getattr(obj, "__wrapped__", None)
    if inspect.isfunction(wrapped):  # jax.custom_jvp / custom_vjp / jit / functools.wraps: a wrapper
        # whose state holds addresses; its function's source, and a custom rule's (``jvp``/``fwd``/``bwd``)
        rules = [getattr(obj, name, None) for name in ("jvp", "fwd", "bwd")]
        texts = [_source(f) for f in (wrapped, *rules) if inspect.isfunction(f)]
        return None if None in texts else "".join(texts)
    if inspect.ismethod(obj) or inspect.isbuiltin(obj) or not hasattr(obj, "__dict__"):
        return _source(obj) if callable(obj) else repr(obj)
    own = _source(type(obj))
    if own is None:
        return None
    state = repr(obj) if type(obj).__repr__ is not object.__repr__ else repr(sorted(vars(obj).items()))
    return own + state


def source_record(obj: Any) -> dict[str, str | None]:
    """{"path", "sha256"} of the file defining ``obj`` (or its class), None where unreadable."""
    target = obj if inspect.isfunction(obj) or inspect.isclass(obj) else type(obj)
    try:
        path = inspect.getsourcefile(target)
        with open(path, "rb") as f:  # type: ignore[arg-type]
            return {"path": str(path), "sha256": hashlib.sha256(f.read()).hexdigest()[:16]}
    except (OSError, TypeError):
        return {"path": None, "sha256": None}


_SOURCE_LOCK = threading.Lock()


def _source(fn: Any) -> str | None:
    """The source of ``fn`` and of its module's file, or None if either cannot be read.
    ``inspect.getsource`` parses the file with ``ast``, whose recursion-depth bookkeeping in
    CPython 3.11 is not thread-safe ("AST constructor recursion depth mismatch" when two threads
    parse at once): the parse is serialised, and that error is read as "cannot be read" (the
    program is then not kept on disk) rather than ending the run."""
    try:
        with _SOURCE_LOCK:
            own = inspect.getsource(fn)
        path = inspect.getsourcefile(fn)
        with open(path, "rb") as f:  # type: ignore[arg-type]
            whole = f.read()
    except (OSError, TypeError, SystemError):
        return None
    return own + hashlib.sha256(whole).hexdigest()


@dataclasses.dataclass(frozen=True)
class Probe:
    """How a registry's kind of part is checked when a user names one of theirs (``"module:attr"``).

    ``declares``: the attributes the object must have, the rules the engine reads (``why`` says what
    they are); ``calls`` and ``returns``: how the engine calls a part of this kind and what it must
    give back, in words (the refusals quote them); ``check``: ``"module:attribute"`` of
    ``check(at, obj, part, probe)``, which makes that call on a tiny input and refuses in one line a
    part that raises, returns None or returns another type or shape ('' where the object is checked
    elsewhere, as a data model's traced sample is); ``refuse``: why this kind takes no user part at
    all ('' where it does). A registry that declares no probe refuses user parts (``NO_PROBE``)."""

    calls: str = ""
    returns: str = ""
    check: str = ""
    declares: tuple[str, ...] = ()
    why: str = ""
    refuse: str = ""

    def admit(self, at: str, obj: Any) -> None:
        """The user object ``obj`` named ``at`` (``"field='module:attr'"``) refused where this kind
        takes none or it lacks a declaration (before its rules are read): a one-line ConfigError."""
        if self.refuse:
            raise ConfigError(f"{at} is refused: {self.refuse}")
        missing = [name for name in self.declares if not hasattr(obj, name)]
        if missing:
            raise ConfigError(f"{at} does not declare {', '.join(missing)}: {self.why}")

    def call(self, at: str, obj: Any, part: Part) -> None:
        """``obj`` (its rules read into ``part``) called as the engine calls this kind, on a tiny
        input: a one-line ConfigError where it raises or returns what the engine cannot use."""
        if self.check:
            import_object(self.check)(at, obj, part, self)

    def failed(self, at: str, err: BaseException) -> ConfigError:
        """The refusal of a part whose call raised ``err``."""
        text = " ".join(str(err).split())[:160]
        return ConfigError(
            f"{at} fails when called as {self.calls} ({type(err).__name__}: {text}); "
            f"it must return {self.returns}"
        )

    def wrong(self, at: str, got: str) -> ConfigError:
        """The refusal of a part that returned ``got`` (in words: 'None', 'shape (2,)')."""
        return ConfigError(f"{at} returned {got} when called as {self.calls}; it must return {self.returns}")


# The probe of a registry that declares none: its kind's user parts are refused, never ignored.
NO_PROBE = Probe(refuse="no probe is declared for this kind of part, so a user's one cannot be checked")

P = TypeVar("P", bound=Part)


def is_user_name(name: object) -> bool:
    """``"package.module:attribute"``: the name of a user part (no built-in part has a colon)."""
    if not isinstance(name, str) or name.count(":") != 1:
        return False
    module, attr = name.split(":")
    return (
        bool(module) and bool(attr) and all(p.isidentifier() for p in [*module.split("."), *attr.split(".")])
    )


class Registry(Mapping[str, P], Generic[P]):
    """Parts of one kind by name, in registration order (the first is listed first in ``--help``).

    ``field`` is the config field that names a part of this kind (``model.query``): errors name it.
    """

    def __init__(
        self,
        kind: str,
        field: str,
        parts: tuple[P, ...] = (),
        part_type: type | None = None,
        probe: Probe | None = None,
    ):
        self.kind, self.field = kind, field
        self.probe = probe or NO_PROBE  # how a user's part of this kind is checked
        self.part_type = part_type or (type(parts[0]) if parts else Part)  # what register takes
        self._parts: dict[str, P] = {}
        self._users: dict[str, tuple[Any, P]] = {}  # "module:attribute" -> (its object, its part)
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
        if is_user_name(key):
            return self.user_part(key, field)
        allowed = ", ".join(map(repr, self._parts))
        close = difflib.get_close_matches(str(key), list(self._parts), n=1) if isinstance(key, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{field or self.field}={key!r} is not one of {allowed}{hint}")

    def user_part(self, path: str, field: str | None = None) -> P:
        """The user part of the object ``path`` (``"module:attribute"``) names, imported now (again
        when the object changed: a notebook redefined it); a one-line ConfigError otherwise."""
        at = f"{field or self.field}={path!r}"
        obj = import_object(path, at)
        cached = self._users.get(path)
        if cached is not None and cached[0] is obj:
            return cached[1]
        self.probe.admit(at, obj)
        part = self.part_type.from_object(path, obj)
        self.probe.call(at, obj, part)
        self._users[path] = (obj, part)
        return part

    def adopt(self, obj: Any) -> str:
        """The name a Python object runs under as a user part: ``"module:attribute"`` where its module
        holds it under that attribute, else ``"module:<its qualified name>"``; the object is kept
        under that name, so ``get`` finds this very object (until another is adopted as it)."""
        module = getattr(obj, "__module__", None) or type(obj).__module__
        attrs = [k for k, v in vars(sys.modules.get(module, object)).items() if v is obj] if module else []
        qual = re.sub(r"\W", "_", getattr(obj, "__qualname__", type(obj).__qualname__))
        path = f"{module}:{attrs[0] if attrs else qual}"
        _ADOPTED[path] = obj
        self.user_part(path)
        return path

    def __getitem__(self, name: str) -> P:
        if name not in self._parts and is_user_name(name):
            return self.user_part(name)
        return self._parts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __contains__(self, name: object) -> bool:
        """A registered name, or a ``"module:attribute"`` that imports (a user part)."""
        if isinstance(name, str) and name in self._parts:
            return True
        if not is_user_name(name):
            return False
        try:
            self.user_part(name)  # type: ignore[arg-type]
        except ConfigError:
            return False
        return True

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
