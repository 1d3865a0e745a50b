"""``snapstore ui``: a local web page to browse checkpoints, compare them and roll back.

The server (Starlette on uvicorn, both imported only when the UI starts) renders HTML on the
server; a little plain JavaScript adds keyboard navigation, locale formatting and live updates.
Every page and action is one :class:`snapstore.store.Store` call; nothing from a request
reaches the file system any other way.  :mod:`snapstore.ui.security` holds the guards (token
cookie, Host check, same-origin POSTs); :mod:`snapstore.ui.html` makes escaping the default.

The modules, what the UI may import and where to start reading: docs/packages/ui.md.
"""
