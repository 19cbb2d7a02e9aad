"""Mask credentials in storage and tracking URLs before pagetune logs or records them.

Optuna storage URLs (``postgresql+psycopg://user:pw@host/db``) and MLflow tracking URIs
(``https://user:pw@mlflow.example``) may carry secrets. Anything pagetune prints, logs, writes to
MLflow or to an exported file goes through :func:`mask_url` or :func:`mask_text` first.

What is masked:
- the password of a ``scheme://user:password@host`` userinfo (the user name stays, it helps debugging);
- the value of secret-looking ``key=value`` pairs, in a query string (``?token=...&password=...``)
  or in a libpq-style DSN (``host=db password=...``).

A user-only userinfo (``postgresql://postgres@host``) and paths (``sqlite:///mlflow.db``) are left as
they are.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "mask_text", "mask_url"]

MASK = "***"

# scheme://user:password@ — the password runs greedily to the last "@" before the end of the
# authority ("/", "?", "#" or whitespace), so an unescaped "@" inside a password is still masked.
_USERINFO = re.compile(
    r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/?#@\s]*:)(?P<secret>[^\s/?#]*)(?P<at>@)"
)

# key=value where the key names a secret; preceded by a query/DSN separator or the start of a word.
_SECRET_KEYS = ("password", "passwd", "pwd", "sslpassword", "token", "access_token", "api_key", "apikey",
                "secret", "client_secret")
_SECRET_PARAM = re.compile(
    r"(?P<head>(?:^|(?<=[?&;\s,(\"']))(?:" + "|".join(_SECRET_KEYS) + r")=)(?P<secret>[^&;\s#,)\"']*)",
    re.IGNORECASE,
)


def _mask_secret(match: re.Match[str]) -> str:
    head = match.group("head")
    tail = match.groupdict().get("at") or ""
    return f"{head}{MASK}{tail}"


def mask_text(text: str) -> str:
    """Return ``text`` with every credential in it masked (URLs, query strings, DSN pairs)."""
    masked = _USERINFO.sub(_mask_secret, text)
    return _SECRET_PARAM.sub(_mask_secret, masked)


def mask_url(url: str) -> str:
    """Return ``url`` with its password and secret query parameters replaced by ``***``.

    >>> mask_url("postgresql+psycopg://tuner:s3cret@db:5432/optuna?sslmode=require&password=x")
    'postgresql+psycopg://tuner:***@db:5432/optuna?sslmode=require&password=***'
    """
    return mask_text(url)


def describe_error(err: BaseException) -> str:
    """`Type: first line of the message`, credentials masked: an error in one line."""
    first_line = (str(err).strip().splitlines() or [""])[0]
    return mask_text(f"{type(err).__name__}: {first_line}")
