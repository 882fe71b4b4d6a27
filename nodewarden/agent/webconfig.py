"""The Prometheus exporter web configuration file (``--web.config.file``), as node_exporter reads
it (prometheus/exporter-toolkit, docs/web-configuration.md): TLS and basic auth for
``/metrics`` and ``/healthz``. YAML::

    tls_server_config:
      cert_file: server.crt          # PEM; relative paths are relative to this file's directory
      key_file: server.key           # PEM, the certificate's key
      client_auth_type: NoClientCert # or VerifyClientCertIfGiven, RequireAndVerifyClientCert
      client_ca_file: clients.crt    # PEM CA bundle, needed by the two Verify* types
      min_version: TLS12             # TLS10 .. TLS13 (default TLS12)
      max_version: TLS13
      prefer_server_cipher_suites: true
    http_server_config:
      http2: false                   # accepted; this agent speaks HTTP/1.1
      headers:                       # added to every response
        Strict-Transport-Security: max-age=31536000
    basic_auth_users:                # user: bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')
      prometheus: $2y$10$...

An empty file means plain HTTP without auth. Unknown keys, wrong types, unreadable or mismatched
certificate files, an auth type Python's ``ssl`` cannot do (``RequestClientCert``,
``RequireAnyClientCert``: it always verifies a client certificate it receives), the Go-only
settings (``cipher_suites``, ``curve_preferences``, ``client_allowed_sans``, inline ``cert``/
``key``) and a password that is not a bcrypt hash are a :class:`WebConfigError` naming the file
and the key: the agent exits 2 at start. The file is read once, at start.

Basic auth follows exporter-toolkit: a wrong user costs a bcrypt comparison as a right one does
(against a dummy hash of the same cost), and the outcome of a (user, password) pair is kept in
a small cache (:class:`BasicAuth`), so that a scrape every few seconds does not pay bcrypt's
deliberate cost each time.
"""

from __future__ import annotations

import base64
import binascii
import collections
import dataclasses
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from nodewarden.digests import sha256

if TYPE_CHECKING:
    import ssl

# ssl (and OpenSSL, ~4 MB resident) is imported only when a file asks for TLS
TLS_VERSIONS = {"TLS10": "TLSv1", "TLS11": "TLSv1_1", "TLS12": "TLSv1_2", "TLS13": "TLSv1_3"}  # ssl.TLSVersion
CLIENT_AUTH = {"NoClientCert": "CERT_NONE", "VerifyClientCertIfGiven": "CERT_OPTIONAL",
               "RequireAndVerifyClientCert": "CERT_REQUIRED"}  # ssl.VerifyMode
UNSUPPORTED_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
# exporter-toolkit's allowed response headers (web/tls_config.go, validHeaders)
HEADERS = ("Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options", "X-XSS-Protection",
           "Content-Security-Policy")
TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
            "prefer_server_cipher_suites")
GO_ONLY_TLS_KEYS = ("cipher_suites", "curve_preferences", "client_allowed_sans", "cert", "key", "client_ca")
TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
# $2a$/$2b$/$2y$, cost 04-31, 22 characters of salt and 31 of hash in bcrypt's base64
BCRYPT_RE = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
AUTH_CACHE_SIZE = 100  # as exporter-toolkit


class WebConfigError(ValueError):
    """An unusable web configuration; the message names the file and the key."""


@dataclasses.dataclass(frozen=True)
class WebConfig:
    """A checked web configuration. ``ssl_context``: None for plain HTTP; ``users``: user ->
    bcrypt hash (empty: no auth); ``headers``: added to every response; ``source``: the file."""

    source: str
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"


def load(path: str | Path) -> WebConfig:
    """Read and check the web configuration file ``path``. Raises :class:`WebConfigError`
    ``"<path>: <key>: <problem>"``."""
    name = str(path)
    try:
        import yaml
    except ImportError:  # a core dependency: only a broken install gets here
        raise WebConfigError(f"{name}: reading a web config needs PyYAML (pip install PyYAML)") from None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise WebConfigError(f"{name}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise WebConfigError(f"{name}: not UTF-8 text: {e}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise WebConfigError(f"{name}: not valid YAML: {' '.join(str(e).split())}") from None
    return parse(doc, name, Path(path).parent)


def parse(doc: Any, name: str, base: Path) -> WebConfig:
    """``doc`` (parsed YAML) checked; files named in it are read relative to ``base``."""
    if doc is None:
        return WebConfig(source=name)
    if not isinstance(doc, dict):
        raise WebConfigError(f"{name}: expected a mapping of {', '.join(TOP_KEYS)}")
    for key in doc:
        if key not in TOP_KEYS:
            raise WebConfigError(f"{name}: {key}: unknown key (known: {', '.join(TOP_KEYS)})")
    ctx = _tls(doc.get("tls_server_config"), name, base)
    headers = _http(doc.get("http_server_config"), name)
    users = _users(doc.get("basic_auth_users"), name)
    return WebConfig(source=name, ssl_context=ctx, users=users, headers=headers)


def _mapping(v: Any, name: str, key: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise WebConfigError(f"{name}: {key}: expected a mapping")
    return v


def _str(v: Any, name: str, key: str) -> str:
    if not isinstance(v, str) or not v:
        raise WebConfigError(f"{name}: {key}: expected a non-empty string")
    return v


def _read(base: Path, v: Any, name: str, key: str) -> Path:
    p = base / _str(v, name, key)
    try:
        with open(p, "rb") as f:
            f.read(1)
    except OSError as e:
        raise WebConfigError(f"{name}: {key}: {p}: cannot read: {e.strerror or e}") from None
    return p


def _tls(v: Any, name: str, base: Path) -> ssl.SSLContext | None:
    t = _mapping(v, name, "tls_server_config")
    for key in t:
        if key in GO_ONLY_TLS_KEYS:
            raise WebConfigError(f"{name}: tls_server_config.{key}: not supported by nodewarden "
                                 f"(supported: {', '.join(TLS_KEYS)})")
        if key not in TLS_KEYS:
            raise WebConfigError(f"{name}: tls_server_config.{key}: unknown key (known: {', '.join(TLS_KEYS)})")
    if not t:
        return None
    k = "tls_server_config."
    if "cert_file" not in t:
        raise WebConfigError(f"{name}: {k}cert_file: missing (key_file needs its certificate)")
    if "key_file" not in t:
        raise WebConfigError(f"{name}: {k}key_file: missing (cert_file needs its key)")
    cert = _read(base, t["cert_file"], name, k + "cert_file")
    key = _read(base, t["key_file"], name, k + "key_file")
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as e:
        raise WebConfigError(f"{name}: {k}cert_file/key_file: {cert}, {key}: not a PEM certificate and "
                             f"its key ({e.reason or e})") from None
    versions = {}
    for which, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        val = t.get(which, default)
        if val not in TLS_VERSIONS:
            raise WebConfigError(f"{name}: {k}{which}: expected one of {', '.join(TLS_VERSIONS)}, got {val!r}")
        versions[which] = ssl.TLSVersion[TLS_VERSIONS[val]]
    if versions["min_version"] > versions["max_version"]:
        raise WebConfigError(f"{name}: {k}min_version: above max_version")
    try:
        ctx.minimum_version = versions["min_version"]
        ctx.maximum_version = versions["max_version"]
    except (ValueError, ssl.SSLError) as e:
        raise WebConfigError(f"{name}: {k}min_version: not available in this OpenSSL: {e}") from None
    auth = t.get("client_auth_type", "NoClientCert")
    if auth in UNSUPPORTED_AUTH:
        raise WebConfigError(f"{name}: {k}client_auth_type: {auth} is not supported by nodewarden (Python's "
                             "ssl verifies every client certificate it receives): use VerifyClientCertIfGiven "
                             "or RequireAndVerifyClientCert with client_ca_file")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"{name}: {k}client_auth_type: expected one of {', '.join(CLIENT_AUTH)}, got {auth!r}")
    ca = t.get("client_ca_file")
    if ca is not None:
        if auth == "NoClientCert":
            raise WebConfigError(f"{name}: {k}client_ca_file: set without a client_auth_type that verifies "
                                 "(VerifyClientCertIfGiven or RequireAndVerifyClientCert)")
        ca_path = _read(base, ca, name, k + "client_ca_file")
        try:
            ctx.load_verify_locations(cafile=str(ca_path))
        except ssl.SSLError as e:
            raise WebConfigError(f"{name}: {k}client_ca_file: {ca_path}: not PEM certificates "
                                 f"({e.reason or e})") from None
    elif auth != "NoClientCert":
        raise WebConfigError(f"{name}: {k}client_ca_file: missing ({auth} verifies against it)")
    ctx.verify_mode = ssl.VerifyMode[CLIENT_AUTH[auth]]
    prefer = t.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise WebConfigError(f"{name}: {k}prefer_server_cipher_suites: expected true or false")
    if prefer:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx


def _http(v: Any, name: str) -> tuple[tuple[str, str], ...]:
    h = _mapping(v, name, "http_server_config")
    out: list[tuple[str, str]] = []
    for key, val in h.items():
        if key == "http2":
            if not isinstance(val, bool):
                raise WebConfigError(f"{name}: http_server_config.http2: expected true or false")
        elif key == "headers":
            for hname, hval in _mapping(val, name, "http_server_config.headers").items():
                canon = {x.lower(): x for x in HEADERS}.get(str(hname).lower())
                if canon is None:
                    raise WebConfigError(f"{name}: http_server_config.headers.{hname}: not an allowed header "
                                         f"(allowed: {', '.join(HEADERS)})")
                if not isinstance(hval, str) or not hval or any(c in hval for c in "\r\n\0"):
                    raise WebConfigError(f"{name}: http_server_config.headers.{hname}: expected a one-line string")
                out.append((canon, hval))
        else:
            raise WebConfigError(f"{name}: http_server_config.{key}: unknown key (known: http2, headers)")
    return tuple(out)


def _users(v: Any, name: str) -> dict[str, bytes]:
    u = _mapping(v, name, "basic_auth_users")
    users: dict[str, bytes] = {}
    for user, hashed in u.items():
        key = f"basic_auth_users.{user}"
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError(f"{name}: {key}: a user name is a non-empty string without ':'")
        if not isinstance(hashed, str) or not BCRYPT_RE.fullmatch(hashed):
            raise WebConfigError(f"{name}: {key}: not a bcrypt hash ($2y$10$ and 53 characters; make one with "
                                 "htpasswd -nBC 10 USER or python3 -c 'import bcrypt; "
                                 "print(bcrypt.hashpw(b\"PASSWORD\", bcrypt.gensalt()).decode())')")
        users[user] = hashed.encode()
    if users:
        try:
            import bcrypt  # noqa: F401
        except ImportError:  # a core dependency: only a broken install gets here
            raise WebConfigError(f"{name}: basic_auth_users: checking passwords needs the bcrypt package "
                                 "(pip install bcrypt)") from None
    return users


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Authorization`` header value -> (user, password) for the Basic scheme, else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = raw.partition(":")
    return (user, password) if sep else None


class BasicAuth:
    """Checks ``Authorization`` headers against ``users`` (user -> bcrypt hash). :meth:`cached`
    answers from the cache (no bcrypt) or None; :meth:`check` runs bcrypt (slow by design: call
    it off the event loop). Thread-safe."""

    def __init__(self, users: Mapping[str, bytes]) -> None:
        import bcrypt
        self._bcrypt = bcrypt
        self.users = dict(users)
        cost = max((int(h[4:6]) for h in self.users.values()), default=10)
        # a wrong user pays the same bcrypt cost as a right one (no user enumeration by timing)
        self._dummy = bcrypt.hashpw(b"nodewarden-no-such-user", bcrypt.gensalt(rounds=cost))
        self._cache: collections.OrderedDict[bytes, bool] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _key(self, user: str, password: str) -> tuple[bytes, bytes]:
        hashed = self.users.get(user, self._dummy)
        return sha256(b"\0".join((user.encode(), hashed, password.encode()))).digest(), hashed

    def cached(self, creds: tuple[str, str]) -> bool | None:
        key, _ = self._key(*creds)
        with self._lock:
            ok = self._cache.get(key)
            if ok is not None:
                self._cache.move_to_end(key)
            return ok

    def check(self, creds: tuple[str, str]) -> bool:
        user, password = creds
        key, hashed = self._key(user, password)
        try:
            ok = self._bcrypt.checkpw(password.encode(), hashed) and user in self.users
        except ValueError:
            ok = False
        with self._lock:
            self._cache[key] = ok
            self._cache.move_to_end(key)
            while len(self._cache) > AUTH_CACHE_SIZE:
                self._cache.popitem(last=False)
        return ok
