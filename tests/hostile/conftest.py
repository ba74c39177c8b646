"""Fixtures of the hostile-input tests."""

from __future__ import annotations

import pytest
from hostile_server import HostileServer


@pytest.fixture
def hostile(request):
    """A factory of hostile servers (``hostile(get_mode=..., post_mode=...)``), each stopped after the test. A test
    module's ``HOSTILE_ATTRIBUTES`` (a dict) is set on every server it makes, e.g. shorter drips."""
    servers: list[HostileServer] = []
    attributes = getattr(request.module, "HOSTILE_ATTRIBUTES", {})

    def make(**modes) -> HostileServer:
        server = HostileServer(**modes)
        for name, value in attributes.items():
            setattr(server, name, value)
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop()
