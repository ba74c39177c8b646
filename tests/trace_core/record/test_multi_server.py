"""Several servers of one model used as one (trace_core.record.multi): each call goes to the least busy server, never
more than ``concurrency`` at one server, results in input order, the first failure raised; servers that differ, or
an address given twice, are refused."""

from __future__ import annotations

import threading
import time

import pytest

from trace_core.record import MultiServer, ServerError, ServerModel, connect_servers
from trace_core.record.backends import MultiServerBackend, backend_of


def _server(port, **options):
    return ServerModel(**{"base_url": f"http://127.0.0.1:{port}", "model": "m", "tokenizer": None,
                          "vocab_size": 10, "context_length": 64, "concurrency": 2, **options})


def test_calls_are_spread_with_at_most_concurrency_at_each_server():
    multi = MultiServer([_server(1), _server(2), _server(3)])
    lock = threading.Lock()
    now, most, seen = [0, 0, 0], [0, 0, 0], []

    def call(server, item):
        with lock:
            now[server] += 1
            most[server] = max(most[server], now[server])
            seen.append(server)
        time.sleep(0.01)
        with lock:
            now[server] -= 1
        return item * 10

    assert multi.map(call, range(30)) == [i * 10 for i in range(30)]
    assert max(most) <= 2 and sum(most) >= 5  # 3 servers x 2 in flight, reached
    assert sorted(set(seen)) == [0, 1, 2] and multi.in_flight() == [0, 0, 0] and multi.slots == 6
    assert isinstance(backend_of(multi), MultiServerBackend)


def test_the_first_failure_in_input_order_is_raised():
    multi = MultiServer([_server(1), _server(2)])

    def call(server, item):
        if item in (3, 5):
            raise ServerError(f"failed {item}")
        return item

    with pytest.raises(ServerError, match="failed 3"):
        multi.map(call, range(8))
    assert multi.in_flight() == [0, 0]


@pytest.mark.parametrize("options, words", [
    ({"model": "other"}, "another served model name"),
    ({"context_length": 32}, "another context length"),
    ({"top_logprobs": 5}, "another settings"),
])
def test_a_server_unlike_the_first_is_refused_naming_its_address(options, words):
    with pytest.raises(ServerError, match=words) as caught:
        MultiServer([_server(1), _server(2, **options)])
    assert "http://127.0.0.1:2 does not serve the same model as the one at http://127.0.0.1:1" in str(caught.value)


def test_an_address_given_twice_is_refused_before_connecting():
    with pytest.raises(ValueError, match="given twice"):
        connect_servers(["http://127.0.0.1:1", "http://127.0.0.1:1/v1"], "m")
    with pytest.raises(ValueError, match="given twice"):
        MultiServer([_server(1), _server(1)])
