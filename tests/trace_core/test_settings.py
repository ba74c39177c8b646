"""trace_core.settings: every TRACE_* variable parsed one way, and documented in one table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trace_core.settings import SETTINGS, SettingError, get, settings_table

ROOT = Path(__file__).resolve().parents[2]
FLAGS = [name for name, s in SETTINGS.items() if s.kind == "flag"]
INTS = [name for name, s in SETTINGS.items() if s.kind == "int"]


@pytest.mark.parametrize("name", FLAGS)
@pytest.mark.parametrize("raw, expected", [
    ("1", True), ("true", True), ("TRUE", True), ("Yes", True), ("on", True), (" On ", True),
    ("0", False), ("false", False), ("False", False), ("NO", False), ("off", False), ("oFF", False),
])
def test_flags_parse_the_usual_words_in_any_case(monkeypatch, name, raw, expected):
    monkeypatch.setenv(name, raw)
    assert get(name) is expected


@pytest.mark.parametrize("name", FLAGS)
def test_unset_or_empty_flag_is_its_default(monkeypatch, name):
    monkeypatch.delenv(name, raising=False)
    assert get(name) is SETTINGS[name].default
    monkeypatch.setenv(name, "")
    assert get(name) is SETTINGS[name].default


def test_local_files_false_turns_file_reading_off(monkeypatch):
    # The bug this module fixed: any non-empty value used to leave it on.
    monkeypatch.setenv("TRACE_LOCAL_FILES", "false")
    assert get("TRACE_LOCAL_FILES") is False
    monkeypatch.setenv("TRACE_LOCAL_FILES", "on")
    assert get("TRACE_LOCAL_FILES") is True
    monkeypatch.delenv("TRACE_LOCAL_FILES")
    assert get("TRACE_LOCAL_FILES") is False  # off unless the deployment turns it on


def test_data_dir_is_unset_by_default_and_read_as_text(monkeypatch, tmp_path):
    monkeypatch.delenv("TRACE_DATA_DIR", raising=False)
    assert get("TRACE_DATA_DIR") == ""
    monkeypatch.setenv("TRACE_DATA_DIR", f" {tmp_path} ")
    assert get("TRACE_DATA_DIR") == str(tmp_path)


@pytest.mark.parametrize("raw", ["maybe", "2", "yes please", "tru"])
def test_a_flag_with_another_value_is_an_error_naming_variable_and_value(monkeypatch, raw):
    monkeypatch.setenv("TRACE_TRUST_REMOTE_CODE", raw)
    with pytest.raises(SettingError, match=rf"TRACE_TRUST_REMOTE_CODE='{raw}': expected one of 1/true/yes/on"):
        get("TRACE_TRUST_REMOTE_CODE")


def test_a_long_garbage_value_is_shortened_in_the_message(monkeypatch):
    monkeypatch.setenv("TRACE_ALLOW_PICKLE_WEIGHTS", "x" * 5000)
    with pytest.raises(SettingError) as info:
        get("TRACE_ALLOW_PICKLE_WEIGHTS")
    assert len(str(info.value)) < 400 and "5,000 characters" in str(info.value)


@pytest.mark.parametrize("name", INTS)
def test_ints_parse_whole_numbers_at_least_one(monkeypatch, name):
    monkeypatch.setenv(name, " 42 ")
    assert get(name) == 42
    monkeypatch.setenv(name, "+7")
    assert get(name) == 7
    monkeypatch.setenv(name, "")
    assert get(name) == SETTINGS[name].default


@pytest.mark.parametrize("raw", ["0", "-5", "1.5", "1e3", "ten", "0x10", "1000000001", str(2**43)])
def test_bad_ints_are_errors_naming_variable_and_value(monkeypatch, raw):
    monkeypatch.setenv("TRACE_MAX_ROWS", raw)
    with pytest.raises(SettingError, match=rf"TRACE_MAX_ROWS='{re.escape(raw)}': expected a whole number from 1 to "
                                           r"1,000,000,000"):
        get("TRACE_MAX_ROWS")


@pytest.mark.parametrize("name", [n for n, s in SETTINGS.items() if s.kind == "int"])
def test_every_number_setting_has_a_bound_that_holds(monkeypatch, name):
    setting = SETTINGS[name]
    assert setting.default is None or 1 <= setting.default <= setting.maximum
    monkeypatch.setenv(name, str(setting.maximum))
    assert get(name) == setting.maximum
    for raw in (str(setting.maximum + 1), str(2**53), str(2**63)):
        monkeypatch.setenv(name, raw)
        with pytest.raises(SettingError, match=f"{name}='{raw}': expected a whole number from 1 to "):
            get(name)


def test_setting_error_is_a_value_error():
    assert issubclass(SettingError, ValueError)


def test_the_allowlist_is_a_comma_separated_list(monkeypatch):
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", " org/model , /srv/models/x,,assets/demo-model ")
    assert get("TRACE_MODEL_ALLOWLIST") == ("org/model", "/srv/models/x", "assets/demo-model")
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", " , ")
    assert get("TRACE_MODEL_ALLOWLIST") == ()  # set but lists nothing: the loader refuses every model
    monkeypatch.setenv("TRACE_MODEL_ALLOWLIST", "")
    assert get("TRACE_MODEL_ALLOWLIST") is None
    monkeypatch.delenv("TRACE_MODEL_ALLOWLIST")
    assert get("TRACE_MODEL_ALLOWLIST") is None


def test_text_settings_default_to_empty(monkeypatch):
    monkeypatch.delenv("TRACE_SCREENSHOTS", raising=False)
    assert get("TRACE_SCREENSHOTS") == ""
    monkeypatch.setenv("TRACE_SCREENSHOTS", "docs/screenshots")
    assert get("TRACE_SCREENSHOTS") == "docs/screenshots"


def test_values_are_read_when_asked_not_at_import(monkeypatch):
    monkeypatch.setenv("TRACE_MAX_NEW_TOKENS", "10")
    assert get("TRACE_MAX_NEW_TOKENS") == 10
    monkeypatch.setenv("TRACE_MAX_NEW_TOKENS", "20")
    assert get("TRACE_MAX_NEW_TOKENS") == 20


def test_an_unknown_setting_is_a_key_error_listing_the_known_ones():
    with pytest.raises(KeyError, match="unknown setting 'TRACE_NOPE'; known: TRACE_TRUST_REMOTE_CODE"):
        get("TRACE_NOPE")


def test_settings_table_lists_every_setting_once_with_kind_and_default():
    lines = settings_table().splitlines()
    assert lines[0] == "| variable | value | default | meaning |"
    rows = {line.split("|")[1].strip().strip("`"): [c.strip() for c in line.split("|")[2:-1]] for line in lines[2:]}
    assert list(rows) == list(SETTINGS)
    assert rows["TRACE_LOCAL_FILES"][:2] == ["on/off", "off"]
    assert rows["TRACE_DATA_DIR"][:2] == ["folder", "unset"]
    assert rows["TRACE_TRUST_REMOTE_CODE"][:2] == ["on/off", "off"]
    assert rows["TRACE_MAX_ROWS"][:2] == ["number, 1 to 1,000,000,000", "100,000"]
    assert rows["TRACE_MODEL_ALLOWLIST"][:2] == ["list", "unset"]
    assert all(rows[name][2] == s.help for name, s in SETTINGS.items())


def test_the_docs_show_the_settings_table():
    assert settings_table() in (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")


def test_no_other_library_module_reads_a_trace_variable():
    reader = re.compile(r"(environ|getenv)\W[^\n]*TRACE_")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "trace_core").rglob("*.py")
                 if p.name != "settings.py" and reader.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
