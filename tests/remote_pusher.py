"""A pusher that SIGKILLs itself before its (k+1)-th request: ``python remote_pusher.py TREE K``.

Packs are made small (64 KiB, nothing inline) so a push of a few hundred KiB takes several
pack requests, the path large pushes take.  Exit 0 when the push finished within K requests.
"""

from __future__ import annotations

import os
import signal
import sys

from snapstore.remote import layout
from snapstore.remote import transport as tr
from snapstore.store import Store


def main() -> None:
    tree, limit = sys.argv[1], int(sys.argv[2])
    layout.PACK_TARGET = 64 << 10
    layout.INLINE_MAX = 0
    real = tr.connect
    made = [0]

    class Killing(tr.CountingTransport):
        def count(self, kind: str) -> None:
            made[0] += 1
            if made[0] > limit:
                os.kill(os.getpid(), signal.SIGKILL)

    def connect(*args: object, **kwargs: object) -> tr.Transport:
        return Killing(real(*args, **kwargs))  # type: ignore[arg-type]

    tr.connect = connect  # type: ignore[assignment]
    with Store.open(tree) as s:
        s.push()


if __name__ == "__main__":
    main()
