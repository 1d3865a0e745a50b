"""``python -m snapstore``: the same as the ``snapstore`` command, always in-process (no
resident service: tests and debugging compare the two)."""

import sys

from snapstore.service.client import working_directory_gone

gone = working_directory_gone(sys.argv[1:])
if gone is not None:
    sys.exit(gone)

from snapstore.cli import main  # noqa: E402 - only once the working directory is known

sys.exit(main())
