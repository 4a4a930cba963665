"""``python -m figures``: the figures' command line, ``dynamics.cli.figures`` (the package
``figures`` draws; the command line that runs experiments and calls it lives with the others)."""

from dynamics.cli.figures import main
from dynamics.infra import interrupts

if __name__ == "__main__":
    interrupts.finish(main())
