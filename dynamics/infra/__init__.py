"""Infrastructure: the persistent compilation cache, whole programs kept on disk, atomic file writes,
phase timers, interrupts (Ctrl-C that never loses finished work), the fingerprints of what a
kept program names and JAX's import without its look through every distribution's metadata
(``startup``). A leaf: it imports nothing of mhsim outside ``dynamics.infra``."""
