"""What the two recording scripts (``record_fixtures.py``, ``record_llamacpp.py``) share: the project root on the
import path (they run as scripts), and saving each response next to the request that asked for it."""

from __future__ import annotations

import json
import sys
import urllib.error
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.server_throughput import post_json  # noqa: E402


def record(url: str, asked: dict[str, tuple[str, dict]], out: Path, requests_name: str) -> None:
    """Send each request of `asked` (file name -> endpoint and body) to the server at `url` and save its response,
    pretty-printed, under that name in `out`; then the requests themselves in `requests_name` (file name ->
    endpoint and body), so that each response can be read with what asked for it."""
    out.mkdir(parents=True, exist_ok=True)
    for name, (endpoint, body) in asked.items():
        try:
            response = json.loads(post_json(url + endpoint, body))
        except urllib.error.HTTPError as exc:
            raise SystemExit(f"{endpoint} answered {exc.code}: {exc.read()[:2000]!r}") from exc
        (out / name).write_text(json.dumps(response, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {out / name}")
    kept = out / requests_name  # a partial recording (--only) keeps the other responses' requests
    requests = json.loads(kept.read_text(encoding="utf-8")) if kept.is_file() else {}
    requests.update({name: {"endpoint": endpoint, "body": body} for name, (endpoint, body) in asked.items()})
    kept.write_text(json.dumps(requests, indent=2) + "\n")
