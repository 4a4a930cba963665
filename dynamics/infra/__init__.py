"""Infrastructure: the persistent compilation cache, whole programs kept on disk, atomic file writes,
phase timers, interrupts (Ctrl-C that never loses finished work) and the fingerprints of what a
kept program names. A leaf: it imports nothing of mhsim outside ``dynamics.infra``."""
