"""``python -m snapstore``: the same as the ``snapstore`` command."""

import sys

from snapstore.service.client import main

sys.exit(main())
