"""The flags of a change event, one vocabulary for every event source (inotify's numbers, so
the Linux source passes the kernel's masks through untouched)."""

MODIFIED = 0x2
ATTRIB = 0x4
CLOSE_WRITE = 0x8
MOVED_FROM = 0x40
MOVED_TO = 0x80
CREATED = 0x100
DELETED = 0x200
DELETED_SELF = 0x400
MOVED_SELF = 0x800
OVERFLOW = 0x4000
#: The watch is gone (its directory was deleted, or the watch removed).
IGNORED = 0x8000
IS_DIR = 0x40000000

#: (overflow, ignored, is a directory, the directory itself went, a name came or went, a
#: name came): the masks the watcher tests.
BITS = (
    OVERFLOW, IGNORED, IS_DIR, DELETED_SELF | MOVED_SELF,
    CREATED | DELETED | MOVED_FROM | MOVED_TO, CREATED | MOVED_TO,
)  # fmt: skip
