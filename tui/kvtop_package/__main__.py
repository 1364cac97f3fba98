"""``python -m kvtop``: the ``kvtop`` command."""

import sys

from kvtop.tui.start.cli import main

sys.exit(main())
