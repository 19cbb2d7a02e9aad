"""A short reachability probe of a tracking URI, run before any trial.

MLflow's own clients are patient: an HTTP store retries 7 times with exponential backoff and a
120 s timeout, and a database store retries engine creation for about 100 s. That is right for a
blip in the middle of a study and wrong at start-up, where a typo in the URI should fail in seconds.
So pagetune first probes with one short request; MLflow's clients run only once the probe passes.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from typing import NamedTuple

from tuner.redact import mask_text

_HTTP_SCHEMES = ("http", "https")
# Database dialects whose drivers take a libpq/MySQL-style connect_timeout (seconds).
_DB_TIMEOUT_DIALECTS = ("postgresql", "mysql")
_DB_SCHEMES = (*_DB_TIMEOUT_DIALECTS, "mssql")


class Probe(NamedTuple):
    reachable: bool
    detail: str  # what was tried and, when unreachable, why (masked)


def probe(uri: str, timeout_s: float) -> Probe:
    """Probe ``uri`` once within about ``timeout_s``. Local stores (sqlite, file) are not probed."""
    scheme = urllib.parse.urlsplit(uri).scheme.lower()
    dialect = scheme.split("+", 1)[0]
    if scheme in _HTTP_SCHEMES:
        return _probe_http(uri, timeout_s)
    if dialect in _DB_SCHEMES:
        return _probe_db(uri, dialect, timeout_s)
    return Probe(True, f"no probe for scheme {scheme or 'file'!r}")


def _without_userinfo(uri: str) -> str:
    # urllib cannot send "user:pw@" in a URL; reachability needs no credentials anyway.
    parts = urllib.parse.urlsplit(uri)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _probe_http(uri: str, timeout_s: float) -> Probe:
    url = _without_userinfo(uri) + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # http(s) only, checked above
            return Probe(True, f"GET {url}: HTTP {response.status}")
    except urllib.error.HTTPError as err:
        # Any answer below 500 (401 from an auth proxy, 404 under a path prefix) means a server is
        # listening; MLflow's first real call then says whether it is an MLflow server.
        return Probe(err.code < 500, f"GET {url}: HTTP {err.code}")
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return Probe(False, mask_text(f"GET {url}: {reason}"))


def _probe_db(uri: str, dialect: str, timeout_s: float) -> Probe:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    connect_args = {"connect_timeout": max(1, round(timeout_s))} if dialect in _DB_TIMEOUT_DIALECTS else {}
    try:
        engine = sqlalchemy.create_engine(uri, poolclass=NullPool, connect_args=connect_args)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()
    except Exception as err:  # any driver error (missing driver, refused, auth) means "cannot track"
        return Probe(False, mask_text(f"connect: {type(err).__name__}: {err}".splitlines()[0]))
    return Probe(True, "connect: ok")
