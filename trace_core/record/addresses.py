"""Model-server addresses in one normal form, compared with the deployment's allow-list and key entries.

:func:`base_url_of` gives an address the form requests are sent to (scheme and host lower-cased, ``/v1`` and trailing
``/`` dropped, percent-escapes and dot segments resolved; credentials, queries and fragments refused);
:func:`served_under` compares two addresses in that form; :func:`key_variable_for` finds the API-key variable the
deployment ties to an address (``TRACE_SERVER_KEYS``).
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from typing import Any

from trace_core import settings
from trace_core.checks import shorten

__all__ = ["base_url_of", "key_variable_for", "served_under"]


def base_url_of(base_url: Any) -> str:
    """``scheme://host[:port][/prefix]`` without ``/v1`` and trailing ``/``; credentials, queries refused."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValueError(f"`base_url` must be the server's address (http://host:port), got {shorten(base_url)}")
    try:
        parts = urllib.parse.urlsplit(base_url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ValueError("`base_url` is not a valid URL; expected http://host:port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"`base_url` must start with http:// or https:// and name a host, got "
                         f"{shorten(parts.scheme + '://' + (parts.hostname or ''))}")
    if parts.username is not None or parts.password is not None:  # never echo them
        raise ValueError("`base_url` must not hold credentials; put the API key in the environment variable named "
                         "by `api_key_env`")
    if parts.query or parts.fragment:
        raise ValueError("`base_url` must not have a query or a fragment; expected http://host:port")
    path = _normal_path(parts.path)
    if path.endswith("/v1"):
        path = path[:-3]
    host = parts.hostname
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme.lower()}://{host}{port}{path}"


def served_under(url: str, entry: str) -> bool:
    """Whether the server address ``url`` is ``entry`` or a path under it, both compared in :func:`base_url_of`'s
    normal form (so ``http://h/team-a/../team-b`` is not under ``http://h/team-a``); False for a malformed entry."""
    try:
        url, entry = base_url_of(url), base_url_of(entry)
    except ValueError:
        return False
    return url == entry or url.startswith(entry + "/")


def key_variable_for(base_url: str) -> str | None:
    """The environment variable whose API key the deployment lets the dashboard send to ``base_url``: the first
    ``TRACE_SERVER_KEYS`` entry that ``base_url`` is :func:`served_under`; None (send no key) when none is."""
    for entry, variable in settings.server_keys():
        if served_under(base_url, entry):
            return variable
    return None


def _normal_path(path: str) -> str:
    """A URL path as a server resolves it, in one spelling: percent-escapes decoded (``%2e%2e`` is ``..``), dot
    segments resolved (``/team-a/../team-b`` is ``/team-b``), repeated and trailing slashes dropped, then quoted
    again. Allow-list entries are compared, and requests sent, in this form."""
    decoded = urllib.parse.unquote(path)
    if re.search(r"[\x00-\x1f\x7f\\]", decoded):
        raise ValueError("`base_url` has control characters or a backslash in its path; expected http://host:port")
    normal = posixpath.normpath("/" + decoded) if decoded.strip("/") else ""
    normal = re.sub(r"/{2,}", "/", normal).rstrip("/")
    return urllib.parse.quote(normal, safe="/:@!$&'()*+,;=-._~")
