"""The laptop's timings: watch debounce and the transcripts' growth thresholds, from the environment over
proxy.toml over the defaults, checked naming the variable or the key, shown by `memory-proxy show`, and acting."""

from __future__ import annotations

import time

import anyio
import pytest

from channel.keys import PrivateKey
from client_proxy.cli import main
from client_proxy.config import ProxyConfig, render_config, write_config
from client_proxy.errors import ConfigError
from client_proxy.sync.watcher import Wakeup
from client_proxy.tuning import LaptopTuning

SERVER = PrivateKey.generate("memory-server").public


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `init` sets up the folder it runs in as a project
    home = tmp_path / "proxy-home"
    monkeypatch.setenv("MEMORY_PROXY_HOME", str(home))
    for variable in ("MEMORY_PROXY_WATCH_DEBOUNCE_MS", "MEMORY_PROXY_TRANSCRIPTS_DELTA_BYTES"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("MEMORY_PROXY_TRANSCRIPTS_DELTA_LINES", raising=False)
    assert main(["init", "--server", "https://memory.lan", "--server-key", SERVER.line(), "--name", "alice"]) == 0
    return home


def configure(home, **tuning: int) -> None:
    config = ProxyConfig.load(home)
    write_config(home, render_config(config.server_url, config.server_key, config.device_name, tuning=tuning))


def test_the_environment_wins_over_proxy_toml_which_wins_over_the_defaults(home):
    configure(home, watch_debounce_ms=750, transcripts_delta_lines=10)
    config = ProxyConfig.load(home)
    tuning = LaptopTuning.resolve({"MEMORY_PROXY_TRANSCRIPTS_DELTA_LINES": "5"}, config.tuning)
    assert (tuning.watch_debounce_ms, tuning.transcripts_delta_lines, tuning.transcripts_delta_bytes) == (
        750,
        5,
        64 * 1024,
    )
    assert dict(tuning.origins) == {
        "watch_debounce_ms": "file",
        "transcripts_delta_lines": "env",
        "transcripts_delta_bytes": "default",
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEMORY_PROXY_WATCH_DEBOUNCE_MS": "5"}, "MEMORY_PROXY_WATCH_DEBOUNCE_MS must be from 10 to 60000, not 5"),
        ({"MEMORY_PROXY_WATCH_DEBOUNCE_MS": "fast"}, "MEMORY_PROXY_WATCH_DEBOUNCE_MS must be a whole number"),
        ({"MEMORY_PROXY_WATCH_DEBOUNCE_MS": "--50"}, "MEMORY_PROXY_WATCH_DEBOUNCE_MS must be a whole number"),
        ({"MEMORY_PROXY_WATCH_DEBOUNCE_MS": "9" * 5000}, "MEMORY_PROXY_WATCH_DEBOUNCE_MS must be a whole number"),
        ({"MEMORY_PROXY_TRANSCRIPTS_DELTA_LINES": "-5"}, "MEMORY_PROXY_TRANSCRIPTS_DELTA_LINES must be from 1 to"),
        ({"MEMORY_PROXY_TRANSCRIPTS_DELTA_BYTES": "10"}, "MEMORY_PROXY_TRANSCRIPTS_DELTA_BYTES must be from 1024"),
        ({"MEMORY_PROXY_TRANSCRIPTS_DELTA_LINES": "0"}, "MEMORY_PROXY_TRANSCRIPTS_DELTA_LINES must be from 1 to"),
    ],
)
def test_a_bad_timing_in_the_environment_is_refused_naming_the_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        LaptopTuning.resolve(env, {})


def test_a_timing_of_thousands_of_digits_stops_the_proxy_with_one_line_not_a_traceback(home, monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_PROXY_WATCH_DEBOUNCE_MS", "9" * 5000)
    assert main(["show"]) == 2
    err = capsys.readouterr().err
    assert "MEMORY_PROXY_WATCH_DEBOUNCE_MS must be a whole number" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("watch_debounce_ms = 100000", "watch_debounce_ms must be from 10 to 60000, not 100000"),
        ('transcripts_delta_lines = "40"', "transcripts_delta_lines must be a whole number"),
        ("transcripts_delta_bytes = true", "transcripts_delta_bytes must be a whole number"),
        ("watch_debounce = 100", "unknown field 'watch_debounce'"),
    ],
)
def test_a_bad_timing_in_proxy_toml_is_refused_naming_the_file_and_key(home, line, message):
    path = home / "proxy.toml"
    path.write_text(path.read_text() + line + "\n")
    with pytest.raises(ConfigError) as refused:
        ProxyConfig.load(home)
    assert str(refused.value).count(str(path)) == 1 and message in str(refused.value)


def test_init_again_keeps_the_timings_and_show_prints_each_with_its_origin(home, monkeypatch, capsys):
    configure(home, transcripts_delta_bytes=4096)
    assert main(["init", "--server", "https://memory.lan", "--server-key", SERVER.line()]) == 0
    assert ProxyConfig.load(home).tuning == {"transcripts_delta_bytes": 4096}
    capsys.readouterr()
    monkeypatch.setenv("MEMORY_PROXY_WATCH_DEBOUNCE_MS", "300")
    assert main(["show"]) == 0
    shown = {line.split()[0]: line.split()[1:3] for line in capsys.readouterr().out.splitlines() if "(" in line}
    assert shown["watch_debounce_ms"] == ["300", "(env;"]
    assert shown["transcripts_delta_bytes"] == ["4096", "(file;"]
    assert shown["transcripts_delta_lines"] == ["40", "(default;"]


@pytest.mark.anyio
@pytest.mark.parametrize("debounce_ms", [50, 400])
async def test_the_watch_debounce_is_how_long_saves_must_pause_before_the_scan(debounce_ms):
    wakeup = Wakeup.debounced(LaptopTuning(watch_debounce_ms=debounce_ms).debounce_seconds)
    started = time.monotonic()
    wakeup.poke()
    with anyio.fail_after(10):
        assert await wakeup.wait(10)
    assert time.monotonic() - started >= debounce_ms / 1000
