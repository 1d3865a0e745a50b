"""``python -m snapstore.service.server STORE_DIR IDLE_TIMEOUT``: run one service."""

import sys

from snapstore.service.server import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
