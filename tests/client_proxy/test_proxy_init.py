"""`memory-proxy init` / `show` and `ProxyConfig.load`: a device key, a pinned server key, nothing unsafe."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from channel.errors import KeyFileError
from channel.keys import PrivateKey, read_private_key
from client_proxy.cli import main
from client_proxy.config import ProxyConfig, default_device_name, proxy_home, render_config, validate_server_url
from client_proxy.errors import ConfigError
from tests.conftest import REPO

SERVER = PrivateKey.generate("memory-server").public
OTHER_SERVER = PrivateKey.generate("impostor").public


@pytest.fixture
def home(tmp_path, monkeypatch):
    path = tmp_path / "config" / "memory-proxy"
    monkeypatch.setenv("MEMORY_PROXY_HOME", str(path))
    monkeypatch.chdir(tmp_path)  # init seeds starter memory files in the current folder: never the checkout
    return path


def test_a_tilde_in_the_config_home_is_expanded(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    assert proxy_home({"MEMORY_PROXY_HOME": "~/.config/memory-proxy"}) == Path("/home/someone/.config/memory-proxy")


@pytest.fixture
def run(home, capsys):
    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def init(run, *extra: str) -> tuple[int, str, str]:
    return run("init", "--server", "https://memory.lan/", "--server-key", SERVER.line(), *extra)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_config_dir_follows_memory_proxy_home_then_xdg_then_home():
    assert proxy_home({"MEMORY_PROXY_HOME": "/a", "XDG_CONFIG_HOME": "/x", "HOME": "/h"}) == Path("/a")
    assert proxy_home({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}) == Path("/x/memory-proxy")
    assert proxy_home({"MEMORY_PROXY_HOME": "", "HOME": "/h"}) == Path("/h/.config/memory-proxy")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://memory.lan/", "https://memory.lan"),
        ("HTTPS://memory.lan:8443/base/", "https://memory.lan:8443/base"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_a_server_url_is_normalised(url, expected):
    assert validate_server_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://memory.lan", "must start with https://"),
        ("memory.lan", "must start with https://"),
        ("https://alice:secret@memory.lan", "must not hold a user or password"),
        ("https://alice@memory.lan", "must not hold a user or password"),
        ("https://memory.lan/?x=1", "must not have a query"),
        ("https://memory.lan/#top", "or fragment"),
        ("https://memory.lan:99999", "invalid port"),
        ("https://memory.lan:0", "invalid port"),
        ("https://[::1", "invalid host"),
        ("https://[zz]/", "invalid host"),
        ("https://", "has no host"),
        ("https://memory.lan/a b", "without spaces"),
        ("", "without spaces"),
    ],
)
def test_a_bad_server_url_is_refused(url, message):
    with pytest.raises(ConfigError, match=message):
        validate_server_url(url)


@pytest.mark.parametrize(
    ("user", "host", "expected"),
    [
        ("alice", "Laptop.local", "alice-laptop"),
        ("Jean Luc", "PC", "jean-luc-pc"),
        ("a..b", "h.example.com", "a.b-h"),
        ("", "", "device"),
        ("ü", "…", "device"),
    ],
)
def test_the_default_device_name_is_a_valid_caller_name(user, host, expected):
    assert default_device_name(user, host) == expected


def test_init_creates_a_0600_key_in_a_0700_dir_and_prints_the_operator_command(run, home):
    code, out, _ = init(run, "--name", "alice-laptop")
    assert code == 0
    key = read_private_key(home / "device.key")
    assert mode(home) == 0o700 and mode(home / "device.key") == 0o600 and mode(home / "proxy.toml") == 0o600
    assert key.public.line() in out and key.public.fingerprint in out and SERVER.fingerprint in out
    expected = f"memory-server callers add alice-laptop --key {shlex.quote(key.public.line())} --grant INDEX=rw"
    assert expected in out
    assert key.file_text().split()[1] not in out
    config = ProxyConfig.load(home)
    assert config == ProxyConfig(home, "https://memory.lan", SERVER, "alice-laptop", key.public)
    assert config.device_key_path == home / "device.key"


def test_the_printed_command_is_accepted_by_memory_server(run, tmp_path, capsys):
    from server.cli.main import main as server_main

    _, out, _ = init(run, "--name", "alice-laptop")
    command = next(line for line in out.splitlines() if "memory-server callers add" in line)
    argv = shlex.split(command.replace("INDEX=rw", "alice=rw"))[1:]
    assert server_main(["--keys-dir", str(tmp_path / "keys"), *argv]) == 0
    assert "added caller alice-laptop" in capsys.readouterr().out


def test_show_prints_what_init_printed(run):
    _, out, _ = init(run)
    code, shown, _ = run("show")
    assert code == 0 and shown in out


def test_init_again_keeps_the_key_and_its_name_and_reports_a_new_pin(run, home):
    init(run, "--name", "alice-laptop")
    key = (home / "device.key").read_bytes()
    code, out, _ = run("init", "--server", "https://memory.lan", "--server-key", OTHER_SERVER.line())
    assert code == 0 and "kept the existing device key" in out
    assert f"was {SERVER.fingerprint}, now {OTHER_SERVER.fingerprint}" in out
    assert (home / "device.key").read_bytes() == key
    assert ProxyConfig.load(home).device_name == "alice-laptop"


def test_init_force_replaces_the_key_and_says_how_to_revoke_the_old_one(run, home):
    init(run, "--name", "alice-laptop")
    old = read_private_key(home / "device.key").public
    code, out, _ = init(run, "--force")
    new = read_private_key(home / "device.key").public
    assert code == 0 and new != old and mode(home / "device.key") == 0o600
    assert f"memory-server callers revoke alice-laptop --key {old.fingerprint}" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--server", "https://u:p@memory.lan", "--server-key", SERVER.line()], "must not hold a user or password"),
        (["--server", "https://memory.lan", "--server-key", "ssh-ed25519 AAAA"], "server key: a public key line"),
        (["--server", "https://memory.lan", "--server-key", SERVER.line(), "--name", "../x"], "invalid device name"),
        (["--server", "https://[::1", "--server-key", SERVER.line()], "server URL has an invalid host"),
        (["--server", "https://memory.lan:0", "--server-key", SERVER.line()], "server URL has an invalid port"),
    ],
)
def test_bad_init_arguments_exit_2_and_create_nothing(run, home, argv, message):
    code, _, err = run("init", *argv)
    assert code == 2 and err.startswith("memory-proxy: error: ") and message in err
    assert not home.exists()


def test_init_refuses_a_config_dir_others_may_write(run, home):
    home.mkdir(parents=True)
    os.chmod(home, 0o777)
    code, _, err = init(run)
    assert code == 2 and "chmod 700" in err and not (home / "device.key").exists()


def test_init_refuses_to_keep_a_group_readable_key(run, home):
    init(run)
    os.chmod(home / "device.key", 0o640)
    code, _, err = init(run)
    assert code == 2 and "mode 0640" in err


def test_show_before_init_says_what_to_run(run):
    code, _, err = run("show")
    assert code == 2 and "run `memory-proxy init" in err


# ProxyConfig.load -----------------------------------------------------------------------------------------------


@pytest.fixture
def ready(run, home):
    init(run, "--name", "alice-laptop")
    return home


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server_url = ", "is not valid TOML"),
        ('server_url = "https://m"\nserver_key = "x"\ndevice_name = "a"\nport = 1\n', "unknown field 'port'"),
        ('server_url = "https://m"\ndevice_name = "a"\n', "server_key must be a string, and is missing"),
        ('server_url = 1\nserver_key = "x"\ndevice_name = "a"\n', "server_url must be a string"),
        (render_config("ftp://m", SERVER, "a"), "proxy.toml: server URL must start with https://"),
        (render_config("https://m", SERVER, "A B"), "proxy.toml: invalid device name"),
        ('server_url = "https://m"\nserver_key = "nope"\ndevice_name = "a"\n', "proxy.toml: server key: a public"),
        (render_config("https://[::1", SERVER, "a"), "proxy.toml: server URL has an invalid host"),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "proxy.toml is nested too deeply to read"),
    ],
)
def test_a_malformed_proxy_toml_is_refused_with_the_file_and_the_fault(ready, text, message):
    (ready / "proxy.toml").write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        ProxyConfig.load(ready)
    assert str(ready) in str(caught.value)


SECRET = PrivateKey.generate("laptop").file_text().split()[1]  # a private key's base64, pasted by mistake


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("device_name", f"memory-ed25519-private {SECRET}", "invalid device name: use lowercase letters"),
        ("index", f"memory-ed25519-private {SECRET}", "invalid index name: use lowercase letters"),
        ("server_url", f"https://memory.lan/?token={SECRET}", "server URL must not have a query"),
        # percent-encoded, as a URL holds a password or a port: a raw "/" of the base64 would end the host there
        # (a key starting "/" or "443/" then had no port or a good one)
        ("server_url", f"https://bob:{quote(SECRET, safe='')}@memory.lan", "server URL must not hold a user"),
        ("server_url", f"https://memory.lan:{quote(SECRET, safe='')}", "server URL has an invalid port"),
        ("server_url", f"https://[{SECRET}]", "server URL has an invalid host"),
        ("server_url", f"https://[{quote(SECRET, safe='')}]:8443", "server URL has an invalid host"),
        ("server_url", f"memory.lan/{SECRET}", "server URL must start with https://"),
        ("sync_exclude", ["notes/**", f"/{SECRET}"], "sync_exclude pattern 2: a pattern is a relative path"),
    ],
)
def test_a_refused_setting_is_named_with_its_fault_but_its_value_is_never_shown(ready, setting, value, message):
    values = {"server_url": "https://memory.lan", "server_key": SERVER.line(), "device_name": "alice", setting: value}
    (ready / "proxy.toml").write_text("".join(f"{name} = {json.dumps(v)}\n" for name, v in values.items()))
    with pytest.raises(ConfigError, match=message) as caught:
        ProxyConfig.load(ready)
    shown = str(caught.value)
    assert SECRET not in shown and SECRET[:12] not in shown and quote(SECRET, safe="")[:12] not in shown


def test_a_proxy_toml_others_may_write_is_refused(ready):
    os.chmod(ready / "proxy.toml", 0o666)
    with pytest.raises(ConfigError, match="mode 0666 lets others change the pinned key; run: chmod 600"):
        ProxyConfig.load(ready)


@pytest.mark.parametrize("key_mode", [0o604, 0o640, 0o644])
def test_a_device_key_others_may_read_is_refused(ready, key_mode):
    os.chmod(ready / "device.key", key_mode)
    with pytest.raises(KeyFileError, match=f"mode 0{key_mode:o}"):
        ProxyConfig.load(ready)


def test_a_symlinked_device_key_is_refused(ready, tmp_path):
    (ready / "device.key").rename(tmp_path / "real.key")
    (ready / "device.key").symlink_to(tmp_path / "real.key")
    with pytest.raises(KeyFileError, match="it is a symlink"):
        ProxyConfig.load(ready)


def test_a_config_dir_others_may_write_is_refused_on_load(ready):
    os.chmod(ready, 0o775)
    with pytest.raises(ConfigError, match="mode 0775 lets group or others change it"):
        ProxyConfig.load(ready)


# the real console script --------------------------------------------------------------------------------------


def test_the_console_script_inits_and_shows_without_importing_the_server(tmp_path):
    script = REPO / ".venv" / "bin" / "memory-proxy"
    env = {**os.environ, "MEMORY_PROXY_HOME": str(tmp_path / "proxy")}
    argv = [script, "init", "--server", "https://memory.lan", "--server-key", SERVER.line(), "--name", "ci-box"]
    created = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert "memory-server callers add ci-box --key 'memory-ed25519 " in created.stdout
    shown = subprocess.run([script, "show"], capture_output=True, text=True, timeout=60, env=env)
    assert shown.returncode == 0 and shown.stdout in created.stdout
    # A bare `memory-proxy` is the forwarder (what Claude Code launches); with no index it says so, and it ends
    # with its stdin.
    bare = subprocess.run([script], input="", capture_output=True, text=True, timeout=60, env=env)
    assert bare.returncode == 0 and "no memory index chosen" in bare.stderr and bare.stdout == ""
    probe = (
        "import sys; from client_proxy.cli import main; assert main(['show']) == 0; "
        "assert not [m for m in sys.modules if m.split('.')[0] in {'server', 'torch', 'apsw'}], 'server side imported'"
    )
    isolated = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert isolated.returncode == 0, isolated.stderr
