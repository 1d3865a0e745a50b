"""The resident service: one process per store that keeps it open and answers CLI commands.

``protocol`` (stdlib only) frames requests and replies and finds a store's socket; ``client``
(stdlib only) is the console script's first module: it asks a running service and falls back to
the in-process CLI; ``server`` runs the commands against a resident Store; ``daemon`` starts,
stops and reports on it.  Output, exit codes and JSON are byte-identical either way: the service
runs the very same CLI code with the client's arguments, directory and environment.
"""
