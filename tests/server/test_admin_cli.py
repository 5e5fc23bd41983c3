"""`memory-server keys ...` and `memory-server callers ...`: in process for the details, once as a real script."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from channel.keys import PrivateKey, PublicKey, read_private_key
from server.cli.main import main
from server.settings import Settings
from tests.conftest import REPO

ALICE = PrivateKey.generate("alice@laptop").public
ALICE2 = PrivateKey.generate("alice@desktop").public


@pytest.fixture(autouse=True)
def no_embedder(monkeypatch):
    """Key management must never select (let alone load) an embedding model."""

    def refuse(self, env):
        raise AssertionError("an admin command selected an embedder")

    monkeypatch.setattr(Settings, "select_embedder", refuse)


@pytest.fixture
def keys_dir(tmp_path):
    return tmp_path / "keys"


@pytest.fixture
def run(keys_dir, capsys):
    def run(*argv: str) -> tuple[int, str, str]:
        code = main(["--keys-dir", str(keys_dir), *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# keys -------------------------------------------------------------------------------------------------------


def test_keys_init_writes_a_0600_key_in_a_0700_dir_and_prints_only_the_public_half(run, keys_dir):
    code, out, _ = run("keys", "init")
    assert code == 0
    key = read_private_key(keys_dir / "server.key")
    assert mode(keys_dir) == 0o700 and mode(keys_dir / "server.key") == 0o600
    assert PublicKey.parse((keys_dir / "server.pub").read_text()) == key.public
    assert key.public.line() in out and key.public.fingerprint in out
    assert f"memory-proxy init --server https://YOUR-SERVER --server-key '{key.public.line()}'" in out
    assert key.file_text().split()[1] not in out


def test_keys_init_refuses_to_replace_a_key_without_force(run, keys_dir):
    assert run("keys", "init")[0] == 0
    before = (keys_dir / "server.key").read_bytes()
    code, _, err = run("keys", "init")
    assert code == 2 and "server.key already exists" in err and "--force" in err
    assert (keys_dir / "server.key").read_bytes() == before
    assert run("keys", "init", "--force")[0] == 0
    assert (keys_dir / "server.key").read_bytes() != before


def test_keys_init_refuses_a_keys_dir_others_may_write(run, keys_dir):
    keys_dir.mkdir()
    os.chmod(keys_dir, 0o757)
    code, _, err = run("keys", "init")
    assert code == 2 and "mode 0757 lets group or others replace files" in err
    assert not (keys_dir / "server.key").exists()


def test_keys_show_prints_the_same_line_and_fingerprint(run, keys_dir):
    _, init_out, _ = run("keys", "init", "--comment", "memory.lan")
    code, out, _ = run("keys", "show")
    assert code == 0 and out == init_out.split("\n", 1)[1]
    assert "memory.lan" in out


def test_keys_show_without_a_key_says_how_to_make_one(run):
    code, _, err = run("keys", "show")
    assert code == 2 and "memory-server keys init" in err


def test_keys_show_refuses_a_group_readable_or_symlinked_key(run, keys_dir, tmp_path):
    run("keys", "init")
    key = keys_dir / "server.key"
    os.chmod(key, 0o640)
    code, _, err = run("keys", "show")
    assert code == 2 and "mode 0640" in err and "chmod 600" in err
    os.chmod(key, 0o600)
    key.rename(tmp_path / "real.key")
    key.symlink_to(tmp_path / "real.key")
    code, _, err = run("keys", "show")
    assert code == 2 and "symlink" in err


def test_keys_init_with_a_non_ascii_comment_exits_2_and_writes_nothing(run, keys_dir):
    code, out, err = run("keys", "init", "--comment", "José-server")
    assert code == 2 and out == ""
    assert err.startswith("memory-server: error: ") and "comment must be ASCII" in err and "Traceback" not in err
    assert not (keys_dir / "server.key").exists() and not (keys_dir / "server.pub").exists()


def test_keys_init_force_that_cannot_write_server_pub_keeps_the_old_identity_and_names_the_file(run, keys_dir):
    run("keys", "init")
    old_key = (keys_dir / "server.key").read_bytes()
    (keys_dir / "server.pub").unlink()
    (keys_dir / "server.pub").mkdir()  # anything that makes the .pub's write fail
    code, _, err = run("keys", "init", "--force")
    assert code == 2 and f"cannot write {keys_dir / 'server.pub'}: Is a directory" in err and ".tmp" not in err
    assert (keys_dir / "server.key").read_bytes() == old_key


def test_keys_init_force_that_cannot_write_the_key_puts_the_old_server_pub_back(run, keys_dir):
    run("keys", "init")
    old_pub = (keys_dir / "server.pub").read_bytes()
    (keys_dir / "server.key").unlink()
    (keys_dir / "server.key").mkdir()  # the private key's write fails after the .pub's
    code, _, err = run("keys", "init", "--force")
    assert code == 2 and f"cannot write {keys_dir / 'server.key'}" in err
    assert (keys_dir / "server.pub").read_bytes() == old_pub and mode(keys_dir / "server.pub") == 0o644
    assert sorted(p.name for p in keys_dir.iterdir()) == ["server.key", "server.pub"]  # no temporary file left


def test_keys_show_refuses_a_keys_dir_others_may_write(run, keys_dir):
    run("keys", "init")
    os.chmod(keys_dir, 0o777)
    code, out, err = run("keys", "show")
    assert code == 2 and out == "" and "mode 0777 lets group or others replace files" in err


def test_keys_show_does_not_wait_on_a_fifo_named_server_pub(run, keys_dir):
    run("keys", "init")
    (keys_dir / "server.pub").unlink()
    os.mkfifo(keys_dir / "server.pub")
    command = "import sys; from server.cli.main import main; sys.exit(main(sys.argv[1:]))"
    shown = subprocess.run(  # a real process: a blocking open would hang it, and the bound ends the test
        [sys.executable, "-c", command, "--keys-dir", str(keys_dir), "keys", "show"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    key = read_private_key(keys_dir / "server.key")
    assert shown.returncode == 0 and key.public.line() in shown.stdout
    assert "server.pub does not match" in shown.stderr


# callers ----------------------------------------------------------------------------------------------------


def test_callers_add_then_list_shows_fingerprints_and_grants(run, keys_dir):
    code, out, _ = run("callers", "add", "alice-laptop", "--key", ALICE.line(), "--grant", "alice=rw", "--grant", "t=r")
    assert code == 0 and "added caller alice-laptop" in out and ALICE.fingerprint in out
    assert mode(keys_dir) == 0o700 and mode(keys_dir / "callers.toml") == 0o644
    code, out, _ = run("callers", "list")
    assert code == 0
    assert out.splitlines() == [
        "alice-laptop  grants: alice=rw, t=r  revoked keys: 0",
        f"  {ALICE.fingerprint}  alice@laptop",
    ]


def test_a_second_key_and_more_grants_extend_the_caller(run):
    run("callers", "add", "alice", "--key", ALICE.line(), "--grant", "alice=rw", "--grant", "team=rw")
    code, out, _ = run("callers", "add", "alice", "--key", ALICE2.line(), "--key", ALICE.line(), "--grant", "team=r")
    assert code == 0 and "updated caller alice" in out and "already listed" in out
    code, out, _ = run("callers", "list", "--json")
    assert json.loads(out) == [
        {
            "name": "alice",
            "keys": [
                {"fingerprint": ALICE.fingerprint, "comment": "alice@laptop"},
                {"fingerprint": ALICE2.fingerprint, "comment": "alice@desktop"},
            ],
            "grants": {"alice": "rw", "team": "r"},
            "revoked_keys": 0,
        }
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["../x", "--key", ALICE.line()], "invalid caller name '../x'"),
        (["bob", "--key", "memory-ed25519 not-base64!"], "--key: public key is corrupt"),
        (["bob", "--key", ALICE.line(), "--grant", "team=w"], 'grant on \'team\' must be "r" or "rw"'),
        (["bob", "--key", ALICE.line(), "--grant", "team"], "must look like INDEX=rw or INDEX=r"),
        (["bob", "--key", ALICE.line(), "--grant", "../etc=r"], "invalid index name '../etc'"),
        (["bob", "--key", ALICE.line(), "--grant", "a=r", "--grant", "a=rw"], "index 'a' is granted twice"),
        (["bob", "--key", ALICE2.line()], "listed twice: as a key of caller 'alice' and as a key of caller 'bob'"),
    ],
)
def test_a_bad_add_exits_2_and_leaves_the_file_untouched(run, keys_dir, argv, message):
    run("callers", "add", "alice", "--key", ALICE2.line(), "--grant", "alice=rw")
    path = keys_dir / "callers.toml"
    before = (path.read_bytes(), os.stat(path).st_mtime_ns, os.stat(path).st_ino)
    code, out, err = run("callers", "add", *argv)
    assert code == 2 and out == ""
    assert err.startswith("memory-server: error: ") and message in err
    assert (path.read_bytes(), os.stat(path).st_mtime_ns, os.stat(path).st_ino) == before


def test_a_private_key_given_as_key_is_refused_and_never_echoed(run):
    secret = PrivateKey.generate("oops").file_text().strip()
    code, out, err = run("callers", "add", "bob", "--key", secret)
    assert code == 2 and "this is a private key" in err
    assert secret.split()[1] not in out + err


def test_revoke_one_key_then_all_and_a_revoked_key_cannot_come_back(run):
    run("callers", "add", "alice", "--key", ALICE.line(), "--key", ALICE2.line(), "--grant", "alice=rw")
    code, out, _ = run("callers", "revoke", "alice", "--key", ALICE.fingerprint)
    assert code == 0 and f"revoked {ALICE.fingerprint} alice@laptop" in out
    code, out, _ = run("callers", "revoke", "alice")
    assert code == 0 and ALICE2.fingerprint in out and ALICE.fingerprint not in out
    assert json.loads(run("callers", "list", "--json")[1])[0]["revoked_keys"] == 2
    assert "nothing to revoke" in run("callers", "revoke", "alice")[1]
    code, _, err = run("callers", "add", "alice", "--key", ALICE.line())
    assert code == 2 and "must never work again" in err


def test_revoke_of_an_unknown_caller_or_key_exits_2(run):
    run("callers", "add", "alice", "--key", ALICE.line())
    assert "no caller named 'bob'" in run("callers", "revoke", "bob")[2]
    code, _, err = run("callers", "revoke", "alice", "--key", ALICE2.fingerprint)
    assert code == 2 and f"its active keys: {ALICE.fingerprint}" in err


def test_grant_sets_and_removes_indexes(run):
    run("callers", "add", "alice", "--key", ALICE.line(), "--grant", "a=r")
    code, out, _ = run("callers", "grant", "alice", "a=rw", "b=r")
    assert code == 0 and "alice grants: a=rw, b=r" in out
    assert "alice grants: b=r" in run("callers", "grant", "alice", "--remove", "a")[1]
    code, _, err = run("callers", "grant", "alice")
    assert code == 2 and "--remove INDEX" in err


def test_list_reports_a_missing_file_and_refuses_a_broken_one(run, keys_dir):
    code, out, _ = run("callers", "list")
    assert code == 0 and "no callers file at" in out
    keys_dir.mkdir(mode=0o700)
    (keys_dir / "callers.toml").write_text("[callers.x]\ngrants = { a = 'admin' }\n")
    code, _, err = run("callers", "list")
    assert code == 2 and "callers.toml: caller 'x': grant on 'a'" in err


# the real console script --------------------------------------------------------------------------------------


def test_the_console_script_inits_adds_and_lists_without_loading_torch(tmp_path):
    script = REPO / ".venv" / "bin" / "memory-server"
    keys = str(tmp_path / "keys")
    init = subprocess.run([script, "--keys-dir", keys, "keys", "init"], capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    add = [script, "--keys-dir", keys, "callers", "add", "alice", "--key", ALICE.line(), "--grant", "alice=rw"]
    assert subprocess.run(add, capture_output=True, timeout=60).returncode == 0
    listing = subprocess.run(
        [script, "--keys-dir", keys, "callers", "list", "--json"], capture_output=True, text=True, timeout=60
    )
    assert listing.returncode == 0 and json.loads(listing.stdout)[0]["grants"] == {"alice": "rw"}
    probe = (
        "import sys; from server.cli.main import main; "
        f"assert main(['--keys-dir', {keys!r}, 'keys', 'show']) == 0; "
        "assert not {'torch', 'sentence_transformers'} & set(sys.modules), 'a model library was imported'"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert shown.returncode == 0, shown.stderr
