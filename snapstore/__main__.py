"""``python -m snapstore``: the same as the ``snapstore`` command."""

import sys

from snapstore.cli import main

sys.exit(main())
