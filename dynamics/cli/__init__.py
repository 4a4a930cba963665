"""The command lines: shared flags and the one-line-error parser (``common``), the knob flags
generated from the knobs' declarations (``knobs``), ``python -m dynamics.run`` (``run``), the
bottleneck presets' flags (``bottleneck``) and the ``mhsim`` entry point (``main``)."""
