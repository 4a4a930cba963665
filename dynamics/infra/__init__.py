"""Infrastructure: the persistent compilation cache, whole programs kept on disk, atomic file writes,
phase timers, interrupts (Ctrl-C that never loses finished work) and memory limits."""
