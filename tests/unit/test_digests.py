"""nodewarden.digests.sha256: CPython's built-in SHA-256, the digests of hashlib's (OpenSSL's)."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from nodewarden.digests import sha256


@given(st.binary(max_size=10_000))
def test_same_digests_as_hashlib(data: bytes) -> None:
    assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    h = sha256()
    h.update(data[:7])
    h.update(data[7:])
    assert h.digest() == hashlib.sha256(data).digest()


def test_known_answer() -> None:  # FIPS 180-2, appendix B.1
    assert sha256(b"abc").hexdigest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_not_openssl() -> None:
    assert sha256.__module__ in ("_sha2", "_sha256")
