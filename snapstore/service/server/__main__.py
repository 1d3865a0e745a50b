"""``python -m snapstore.service.server STORE_DIR IDLE_TIMEOUT``: run one service."""

import sys

from snapstore.service.server import main

sys.exit(main(sys.argv[1:]))
