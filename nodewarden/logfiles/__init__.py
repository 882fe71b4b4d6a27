"""Log files for ``events`` and ``analyze``: plain, gzip, bzip2 and xz; UTF-8, UTF-16 and
UTF-32; whole rotated sets; directories of many nodes' logs; turned into FaultEvents.

* :mod:`~nodewarden.logfiles.paths`: which files, in what order, whose host (walk, rotation)
* :mod:`~nodewarden.logfiles.compressed`: gzip/bzip2/xz by magic bytes; gzip members checked
* :mod:`~nodewarden.logfiles.encoding`: UTF-16/UTF-32 text re-encoded to UTF-8
* :mod:`~nodewarden.logfiles.stream`: text to events, in chunks of whole records or whole
* :mod:`~nodewarden.logfiles.read`: one file's events (read whole, streamed, or split)
* :mod:`~nodewarden.logfiles.parallel`: a large plain file parsed by byte ranges in processes

Paths are parameters: tests point the same code at real files. The names below are the
entry points; the sizes that choose between the ways of reading live in their modules.
"""

from nodewarden.logfiles.compressed import open_log
from nodewarden.logfiles.paths import InputError, LogFile, expand_paths, printable
from nodewarden.logfiles.read import iter_file, read_file
from nodewarden.logfiles.stream import FileEvents, drain, events_from_bytes, events_from_stream

__all__ = ["FileEvents", "InputError", "LogFile", "drain", "events_from_bytes", "events_from_stream",
           "expand_paths", "iter_file", "open_log", "printable", "read_file"]
