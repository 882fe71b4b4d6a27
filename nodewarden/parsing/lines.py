"""Three rules every reader and parser of kernel-log text shares: where one line ends, where
the driver's message starts inside a record, and which words make a record worth parsing
(:data:`TRIGGERS`: the stream's filter and the JSON wrappers' unwrapping use this one list).

Lines. A line ends at LF, CRLF, a lone CR, NEL (U+0085), LINE SEPARATOR (U+2028) or PARAGRAPH
SEPARATOR (U+2029): the newline functions of Unicode (UAX #14) less VT and FF, which stay text.
``str.splitlines()`` is not used: it also cuts at VT, FF and U+001C..U+001E, which file iteration
does not. The file readers (byte scan of whole files), :func:`nodewarden.parsing.stream.records_from_lines`
and the agent's ``/dev/kmsg`` record path all cut with :func:`split_lines`.

Driver message. A fault is what a driver printed, and a driver's message is the text of a
kernel record, after its envelope (time stamp, host, ``kernel:``): ``NVRM: Xid (...)``,
``EDAC MC0: 1 CE ...``, ``mce: [Hardware Error]: ...``, ``mlx5_core 0000:...: ...``. Text that
only *contains* such words is another message quoting them: ``python[4711]: segfault at 0 ...
error 6 in NVRM: Xid (PCI:0000:01:00): 79, ....so[...]`` (the library's file name, chosen by
any user), ``systemd[1]: ... NVRM: Xid ...``, a ``logger`` line. The parsers match their patterns
at the start of :func:`driver_message` only (``re.match``, never ``re.search``), so such a record
is never a fault; :mod:`nodewarden.parsing.stream` counts it as ``unparsed`` (seen, flagged).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

# Words one of which every kernel record a parser reads holds: a cheap substring test before any
# regex (nodewarden.parsing.stream.KernelLogParser.feed) and the test by which a JSON wrapper's
# value is taken as the wrapped kernel line (nodewarden.parsing.envelope). ONE list for both: a
# new fault kind's word goes here, and both readers see it.
TRIGGERS: tuple[str, ...] = ("NVRM", "Xid", "EDAC", "mce: ", "Port: ", "mlx", "fallen off the bus")
# PCIe AER lines (the bit lines carry no word: the device prefix's ": " and their indent), GHES
# records and the AMD MCA decoder ("[Hardware Error]: ...").
TRIGGERS += ("AER", "Bus Error", "status/mask", ":    [", ":  [", "TLP Header", "Error of this Agent",
             "link has been reset", "aer_", "Hardware Error")

# The line ends (see module docstring); CRLF first so that it is one end, not two.
LINE_END_RE = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")
_LINE_END_CHARS = "\r\x85\u2028\u2029"  # besides "\n": a cheap test before the regex


def split_lines(text: str) -> list[str]:
    """``text`` cut at every line end (LF, CRLF, CR, NEL, U+2028, U+2029), ends removed.

    A final line end gives no empty last line (``"a\\n"`` -> ``["a"]``); ``""`` -> ``[]``.
    """
    if not any(c in text for c in _LINE_END_CHARS):
        parts = text.split("\n")
    else:
        parts = LINE_END_RE.split(text)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


# Text before a ";" that a driver's message is glued to in a record without envelope (a repair
# ticket's ``Fault Description:diff:371;NVRM: Xid ...``): a field, not a kernel message. Kernel
# messages that quote user text say who printed them first (``comm[pid]: ``, ``subsys: ``,
# ``(comm)``), so a prefix holding any of these is a message, and no glue is read after it.
_NOT_A_FIELD = re.compile(r"[\[\]()]|:\s")


def driver_message(message: str, bare: bool = False) -> str:
    """The text from where a driver's message starts in a record's ``message``.

    Leading blanks and one leading double quote (a transcription's quoting) are skipped. In a
    ``bare`` record (no envelope was recognized: a pasted line, a ticket field), a message glued
    after the first ``;`` of the line is taken when the text before that ``;`` cannot be a
    kernel message (no ``[``, ``]``, ``(``, ``)``, no ``:`` followed by a blank). Pure; never raises.
    """
    s = message.lstrip(" \t")
    if s[:1] == '"':
        s = s[1:]
    if bare:
        semi = s.find(";", 0, 512)
        if semi > 0 and not _NOT_A_FIELD.search(s, 0, semi):
            return s[semi + 1:].lstrip(" \t")
    return s


def matched_fields(m: re.Match[str], bases: Mapping[str, int]) -> dict[str, Any]:
    """The named groups a line's regex matched (unmatched ones left out), those in ``bases``
    read as integers in their base (``{"status": 16, "cpu": 10}``), the others kept as text."""
    return {k: int(v, bases[k]) if k in bases else v for k, v in m.groupdict().items() if v is not None}
