"""The user cache directory: SQLSCOUT_CACHE_DIR, else ~/.cache/sqlscout, created on demand or refused in one line."""

from __future__ import annotations

import pytest

from dbtools.cache import cache_dir
from dbtools.errors import DatabaseToolError


def test_the_environment_names_the_directory_and_it_is_created(tmp_path, monkeypatch):
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(tmp_path / "nested" / "cache"))
    assert cache_dir() == tmp_path / "nested" / "cache"
    assert cache_dir().is_dir()


@pytest.mark.parametrize("setting", [None, ""])
def test_without_a_setting_it_is_the_home_cache(setting, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    if setting is None:
        monkeypatch.delenv("SQLSCOUT_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("SQLSCOUT_CACHE_DIR", setting)
    assert cache_dir() == tmp_path / ".cache" / "sqlscout"
    assert cache_dir().is_dir()


def test_a_tilde_is_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", "~/sqlscout-cache")
    assert cache_dir() == tmp_path / "sqlscout-cache"


def test_an_unusable_directory_is_one_line_naming_the_variable(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SQLSCOUT_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    with pytest.raises(DatabaseToolError) as raised:
        cache_dir()
    message = str(raised.value)
    assert message.startswith(f"cannot create the cache directory {tmp_path / 'a-file' / 'cache'}: ")
    assert "SQLSCOUT_CACHE_DIR" in message and "\n" not in message
