"""Test certificates made with ``openssl`` at test time: a CA, a server certificate for
127.0.0.1/localhost signed by it, a client certificate signed by it, and a second, unrelated CA."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

OPENSSL = shutil.which("openssl")


@dataclasses.dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_key: Path


def _run(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
         "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", cwd=d)
    return d / f"{name}.crt", d / f"{name}.key"


def _leaf(d: Path, name: str, ca: str, ext: str) -> tuple[Path, Path]:
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={name}",
         "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
         "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d)
    return d / f"{name}.crt", d / f"{name}.key"


def make(d: Path) -> Certs:
    """Write the certificates into directory ``d`` (created). Needs ``openssl`` on PATH."""
    if OPENSSL is None:
        raise RuntimeError("openssl not on PATH")
    d.mkdir(parents=True, exist_ok=True)
    ca, _ = _ca(d, "ca")
    other, other_key = _ca(d, "other-ca")
    sc, sk = _leaf(d, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    cc, ck = _leaf(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    return Certs(ca=ca, server_cert=sc, server_key=sk, client_cert=cc, client_key=ck, other_ca=other,
                 other_key=other_key)
