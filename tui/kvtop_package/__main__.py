"""``python -m kvtop``: the ``kvtop`` command."""

import sys

from kvtop.tui.cli import main

sys.exit(main())
