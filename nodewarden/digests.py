"""SHA-256 without OpenSSL: CPython's built-in implementation, the one ``hashlib`` itself falls
back to (``_sha2`` from 3.12, ``_sha256`` before). ``hashlib`` imports its OpenSSL binding
(``_hashlib``, and with it ``libcrypto``: ~3.7 MB of the agent's resident memory) at its own
import, for a digest the agent takes of a few kilobytes (``state.json``'s checksum, the
schedule's host offset, the basic-auth cache key). Same digests as ``hashlib.sha256``."""

from __future__ import annotations

try:
    from _sha2 import sha256  # CPython >= 3.12
except ImportError:
    try:
        from _sha256 import sha256  # CPython <= 3.11
    except ImportError:  # another interpreter: hashlib's, whatever backs it
        from hashlib import sha256

__all__ = ["sha256"]
