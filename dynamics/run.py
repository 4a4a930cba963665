"""``python -m dynamics.run``: the sweep's command line, whose home is ``dynamics.cli.run``."""

from dynamics.cli.run import main
from dynamics.infra import interrupts

if __name__ == "__main__":
    interrupts.finish(main())
