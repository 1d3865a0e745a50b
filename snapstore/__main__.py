"""``python -m snapstore``: the same as the ``snapstore`` command."""

import sys

from .cli import main

sys.exit(main())
