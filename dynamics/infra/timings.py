"""Where a command's wall time goes: imports, data, compile, simulation, writing, plotting.

The command lines open a ``Timings`` recorder; code anywhere marks its work with
``with phase("data"): ...`` (a no-op when no recorder is open). Phases nest: time spent in
an inner phase counts for it, not for the outer one. Compilation is told apart from the
phase that triggers it by JAX's own compile events (``jax.monitoring``: tracing, lowering
and the XLA compile or persistent-cache load of every program, with their start and end
times; ``dynamics.infra.executables`` adds its own event for a whole program loaded from disk), so
the first call of a program counts its compile under ``compile`` and only the rest under its
phase. The same events count the programs compiled and those loaded from the persistent
cache (``dynamics.infra.cache``, ``dynamics.infra.executables``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

PHASES = ("imports", "data", "compile", "simulation", "writing", "plotting")

# jax._src.dispatch's event names (also in jax.monitoring's documentation).
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
_BACKEND_EVENT = _COMPILE_EVENTS[2]
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
# dynamics.infra.executables records this span for a whole program loaded from disk (no JAX event)
PROGRAM_LOAD_EVENT = "/mhsim/executables/load"

_active: list[Timings] = []


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint intervals covering the same time as ``spans`` (nested compile events overlap)."""
    out: list[list[float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def _overlap(spans: list[tuple[float, float]], disjoint: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e, e2) - max(s, s2)) for s, e in spans for s2, e2 in disjoint)


class Timings:
    """A recorder of phases and of JAX's compile events, from ``start()`` to ``stop()``."""

    def __init__(self):
        self.spans: dict[str, list[tuple[float, float]]] = {}  # phase -> its own (start, end)
        self.compile_spans: list[tuple[float, float]] = []
        self.programs = 0  # XLA compiles or cache loads (JAX's backend-compile events)
        self.cache_hits = 0  # programs loaded from the persistent cache
        self._stack: list[tuple[str, float]] = []
        self._start = self._stop = None
        self._listening = False

    # recording

    def start(self) -> Timings:
        self._start = time.time()
        _active.append(self)
        return self

    def stop(self) -> None:
        """End the recording (again: no-op); the numbers stay readable."""
        if self._stop is not None:
            return
        self._stop = time.time()
        if self in _active:
            _active.remove(self)
        if self._listening:
            import jax.monitoring as mon  # lazy: JAX: only when a run listens to its events

            mon.unregister_event_time_span_listener(self._on_span)
            mon.unregister_event_listener(self._on_event)
            self._listening = False

    def listen(self) -> None:
        """Record JAX's compile events from now on (call once JAX is imported)."""
        if self._listening:
            return
        import jax.monitoring as mon  # lazy: JAX: only when a run listens to its events

        mon.register_event_time_span_listener(self._on_span)
        mon.register_event_listener(self._on_event)
        self._listening = True

    def _on_span(self, event: str, start: float, end: float, **kwargs) -> None:
        if event in _COMPILE_EVENTS or event == PROGRAM_LOAD_EVENT:
            self.compile_spans.append((start, end))
            self.programs += event in (_BACKEND_EVENT, PROGRAM_LOAD_EVENT)
            self.cache_hits += event == PROGRAM_LOAD_EVENT

    def _on_event(self, event: str, **kwargs) -> None:
        self.cache_hits += event == _CACHE_HIT_EVENT

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        now = time.time()
        if self._stack:  # the outer phase pauses
            outer, since = self._stack[-1]
            self.spans.setdefault(outer, []).append((since, now))
        self._stack.append((name, now))
        try:
            yield
        finally:
            end = time.time()
            _, since = self._stack.pop()
            self.spans.setdefault(name, []).append((since, end))
            if self._stack:
                self._stack[-1] = (self._stack[-1][0], end)

    # results

    def seconds(self) -> dict[str, float]:
        """Seconds per phase (compile taken out of the others), ``other`` (the rest) and ``total``."""
        end = self._stop if self._stop is not None else time.time()
        compiles = _union([(max(s, self._start), min(e, end)) for s, e in self.compile_spans if e > s])
        out = {p: 0.0 for p in PHASES}
        for name, spans in self.spans.items():
            out[name] = out.get(name, 0.0) + sum(e - s for s, e in spans) - _overlap(spans, compiles)
        out["compile"] = sum(e - s for s, e in compiles)
        total = end - self._start
        out["other"] = max(0.0, total - sum(out.values()))
        out["total"] = total
        return out

    def to_dict(self) -> dict:
        """For results.json: seconds per phase and what the compile phase did."""
        return {
            **{k: round(v, 4) for k, v in self.seconds().items()},
            "programs": self.programs,
            "compiled": self.programs - self.cache_hits,
            "cache_hits": self.cache_hits,
        }

    def report(self) -> str:
        """One line per phase, for ``--timings``."""
        s = self.seconds()
        lines = [f"{'phase':<11}{'s':>8}"]
        extra = [k for k in s if k not in (*PHASES, "other", "total")]  # e.g. "diagnostics"
        for name in (*PHASES, *extra, "other", "total"):
            lines.append(f"{name:<11}{s[name]:>8.2f}")
        lines.append(
            f"programs: {self.programs} ({self.programs - self.cache_hits} compiled, "
            f"{self.cache_hits} from the persistent cache)"
        )
        return "\n".join(lines)


def phase(name: str) -> contextlib.AbstractContextManager:
    """Count the time of the ``with`` block for ``name`` in the open recorder (if any)."""
    return _active[-1].phase(name) if _active else contextlib.nullcontext()


def current() -> Timings | None:
    """The open recorder, if a command line opened one."""
    return _active[-1] if _active else None
