"""What a compiled program's static arguments name beyond themselves, for its key on disk.

``dynamics.infra.executables`` keys a kept program by its static arguments' text; the parts those
arguments name by string (an activation, a loss, a data model, …) are code whose source must be
in the key too. Infra knows nothing of the parts: the layer that owns them registers how to
describe them (``register``), and ``describe`` asks it. No JAX here.
"""

from __future__ import annotations

from collections.abc import Callable

_DESCRIBERS: list[Callable[[dict], str | None]] = []


def register(describer: Callable[[dict], str | None]) -> None:
    """Add ``describer(static) -> str | None``: the fingerprint of what ``static`` names, or None
    when a program built from it must not be kept on disk. Registering the same one twice is a no-op."""
    if describer not in _DESCRIBERS:
        _DESCRIBERS.append(describer)


def describe(static: dict) -> str | None:
    """Every registered describer's fingerprint of ``static``, in one string; None if any says None."""
    prints = []
    for describer in _DESCRIBERS:
        text = describer(static)
        if text is None:
            return None
        prints.append(text)
    return "\n".join(prints)
