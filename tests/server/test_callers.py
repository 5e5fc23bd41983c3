"""`callers.toml`: its format and validation, safe reads and writes, and the directory that reloads it."""

from __future__ import annotations

import logging
import os
import re
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channel.authz import NAME_PATTERN
from channel.keys import PrivateKey, PublicKey
from server.callers.config import (
    HEADER,
    MAX_FILE_BYTES,
    CallerEntry,
    CallersConfig,
    CallersFileError,
    parse_callers,
    render_callers,
)
from server.callers.file import CallersFile, read_callers, update_callers, write_callers


def new_key(comment: str = "") -> PublicKey:
    return PrivateKey.generate(comment).public


ALICE, ALICE2, BOB = new_key("alice@laptop"), new_key("alice@desktop"), new_key("bob")


def entry_text(name: str, body: str) -> str:
    return f"[callers.{name}]\n{body}\n"


def keys_field(*keys: PublicKey, field: str = "keys") -> str:
    return f"{field} = [" + ", ".join(f'"{key.line()}"' for key in keys) + "]"


@pytest.fixture
def keys_dir(tmp_path):
    path = tmp_path / "keys"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def callers_path(keys_dir):
    return keys_dir / "callers.toml"


# format -----------------------------------------------------------------------------------------------------


def test_the_documented_example_parses_to_callers_with_keys_and_grants():
    text = entry_text(
        "alice-laptop", f'{keys_field(ALICE)}\nrevoked_keys = []\ngrants = {{ alice = "rw", team = "r" }}'
    )
    config = parse_callers(text)
    assert config == CallersConfig((CallerEntry("alice-laptop", (ALICE,), (), {"alice": "rw", "team": "r"}),))
    assert config.callers[0].keys[0].comment == "alice@laptop"


def test_fields_are_optional_and_an_empty_file_has_no_callers():
    assert parse_callers("") == CallersConfig()
    assert parse_callers("[callers.bob]\n") == CallersConfig((CallerEntry("bob"),))


def test_rendering_sorts_callers_and_grants_and_starts_with_the_header():
    config = CallersConfig(
        (
            CallerEntry("zed", (BOB,), (), {"b": "r", "a": "rw"}),
            CallerEntry("alice", (ALICE, ALICE2)),
        )
    )
    text = render_callers(config)
    assert text.startswith(HEADER)
    assert text.index("[callers.alice]") < text.index("[callers.zed]")
    assert 'grants = { a = "rw", b = "r" }' in text
    assert "grants = {}" in text and "revoked_keys = []" in text
    assert text.index(ALICE.line()) < text.index(ALICE2.line())  # keys stay in the order they were added


def test_a_name_with_a_dot_is_quoted_so_toml_does_not_nest_it():
    config = CallersConfig((CallerEntry("alice.laptop", (ALICE,), (), {"team.x": "r"}),))
    text = render_callers(config)
    assert '[callers."alice.laptop"]' in text and '"team.x" = "r"' in text
    assert parse_callers(text) == config


def test_an_unquoted_dotted_name_is_explained():
    with pytest.raises(CallersFileError, match=r'quote a name with a dot: \[callers."alice.laptop"\]'):
        parse_callers(entry_text("alice.laptop", keys_field(ALICE)))


names = st.from_regex(NAME_PATTERN, fullmatch=True).filter(lambda name: ".." not in name)
comments = st.text(st.characters(exclude_categories=("Cs", "Cc", "Cf")), max_size=30).map(str.strip)
# A public line's comment may be any printable text; a private key's is ASCII (its key file is), so none is made here.
keys = st.builds(
    lambda seed, comment: PublicKey(PrivateKey(seed).public.raw, comment), st.binary(min_size=32, max_size=32), comments
)
entries = st.builds(
    CallerEntry,
    names,
    st.lists(keys, max_size=3, unique_by=lambda k: k.raw).map(tuple),
    st.lists(keys, max_size=2, unique_by=lambda k: k.raw).map(tuple),
    st.dictionaries(names, st.sampled_from(["r", "rw"]), max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, max_size=4, unique_by=lambda entry: entry.name))
def test_load_render_load_is_identical(generated):
    try:
        config = CallersConfig(tuple(generated))
    except CallersFileError:  # the same random key twice: astronomically rare, and rightly refused
        return
    text = render_callers(config)
    again = parse_callers(text)
    assert again == config
    assert [k.comment for e in again.callers for k in e.keys] == [k.comment for e in config.callers for k in e.keys]
    assert render_callers(again) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[callers\n", "not valid TOML"),
        ("owner = 'me'\n", "unknown top-level field 'owner'"),
        ("callers = 3\n", "`callers` must be a table"),
        ("[callers]\nbob = 3\n", "caller 'bob' must be a table"),
        ('[callers."../x"]\n', "caller '../x': invalid caller name '../x'"),
        ("[callers.Bob]\n", "invalid caller name 'Bob'"),
        ("[callers.bob]\nkey = []\n", "caller 'bob': unknown field 'key'; fields are keys, revoked_keys, grants"),
        ("[callers.bob]\nkeys = 'memory-ed25519 x'\n", "caller 'bob': keys must be a list of public key lines"),
        ("[callers.bob]\nkeys = [1]\n", "caller 'bob': keys must be a list"),
        ("[callers.bob]\nkeys = ['memory-ed25519 !!!']\n", "caller 'bob': keys\\[1\\]: public key is corrupt"),
        ("[callers.bob]\nkeys = ['ssh-ed25519 AAAA']\n", "caller 'bob': keys\\[1\\]: a public key line starts with"),
        ("[callers.bob]\nrevoked_keys = ['x']\n", "caller 'bob': revoked_keys\\[1\\]"),
        ("[callers.bob]\ngrants = 'rw'\n", "caller 'bob': grants must be a table"),
        (
            f'[callers.bob]\nkeys = ["{ALICE.line()}\\u001b[2J"]\n',
            "caller 'bob': keys\\[1\\]: a key comment is one short line of printable text",
        ),
        ("[callers.bob]\ngrants = { team = 'w' }\n", "caller 'bob': grant on 'team' must be \"r\" or \"rw\", not 'w'"),
        ("[callers.bob]\ngrants = { team = 1 }\n", "grant on 'team' must be"),
        ("[callers.bob]\ngrants = { '../etc' = 'r' }\n", "caller 'bob': invalid index name '../etc'"),
    ],
)
def test_an_invalid_file_is_refused_with_the_caller_and_field_at_fault(text, message):
    with pytest.raises(CallersFileError, match=message):
        parse_callers(text)


def test_a_key_listed_twice_for_one_caller_is_refused():
    with pytest.raises(CallersFileError, match=r"caller 'bob': keys\[2\]: key SHA256:\S+ is listed twice"):
        parse_callers(entry_text("bob", keys_field(BOB, BOB)))


def test_a_key_under_two_callers_is_refused():
    text = entry_text("alice", keys_field(ALICE)) + entry_text("mallory", keys_field(ALICE))
    with pytest.raises(CallersFileError, match="as a key of caller 'alice' and as a key of caller 'mallory'"):
        parse_callers(text)


def test_a_revoked_key_that_is_also_active_is_refused():
    text = entry_text("alice", keys_field(ALICE)) + entry_text("bob", keys_field(ALICE, field="revoked_keys"))
    with pytest.raises(CallersFileError, match=r"a revoked key of caller 'bob'.*a revoked key is never active again"):
        parse_callers(text)


# edits ------------------------------------------------------------------------------------------------------


def test_adding_to_an_existing_caller_appends_keys_and_merges_grants():
    config = CallersConfig().add("alice", [ALICE], {"alice": "rw", "team": "rw"})
    config = config.add("alice", [ALICE2, ALICE], {"team": "r"})
    assert config.get("alice") == CallerEntry("alice", (ALICE, ALICE2), (), {"alice": "rw", "team": "r"})


def test_a_revoked_key_can_never_be_added_again():
    config = CallersConfig().add("alice", [ALICE], {}).revoke("alice")
    with pytest.raises(CallersFileError, match=r"was revoked from caller 'alice'.*memory-proxy init --force"):
        config.add("alice-new", [ALICE], {})


def test_revoking_one_key_by_fingerprint_or_line_keeps_the_others():
    config = CallersConfig().add("alice", [ALICE, ALICE2], {"alice": "rw"})
    by_fingerprint = config.revoke("alice", ALICE.fingerprint).get("alice")
    by_line = config.revoke("alice", ALICE.line()).get("alice")
    assert by_fingerprint == by_line == CallerEntry("alice", (ALICE2,), (ALICE,), {"alice": "rw"})


def test_revoking_a_key_the_caller_does_not_hold_names_its_active_keys():
    config = CallersConfig().add("alice", [ALICE, ALICE2], {}).revoke("alice", ALICE.fingerprint)
    message = f"no active key {BOB.fingerprint}; its active keys: {ALICE2.fingerprint}"
    with pytest.raises(CallersFileError, match=re.escape(message)):
        config.revoke("alice", BOB.fingerprint)
    with pytest.raises(CallersFileError, match="it is already revoked"):
        config.revoke("alice", ALICE.line())


def test_a_revoke_naming_a_key_badly_never_echoes_it():
    config = CallersConfig().add("alice", [ALICE], {})
    secret = PrivateKey.generate().file_text().strip()
    with pytest.raises(CallersFileError, match=re.escape("public key line or its SHA256:... fingerprint")) as caught:
        config.revoke("alice", secret)
    assert secret.split()[1] not in str(caught.value)


def test_granting_sets_and_removes_access():
    config = CallersConfig().add("bob", [BOB], {"a": "r"}).grant("bob", {"a": "rw", "b": "r"})
    assert dict(config.grant("bob", {}, ["a"]).callers[0].grants) == {"b": "r"}
    with pytest.raises(CallersFileError, match="caller 'bob' has no grant on 'c' to remove"):
        config.grant("bob", {}, ["c"])
    with pytest.raises(CallersFileError, match=r"no caller named 'carol' \(callers: bob\)"):
        config.grant("carol", {"a": "r"})


def test_the_table_answers_active_keys_only():
    config = CallersConfig().add("alice", [ALICE, ALICE2], {"alice": "rw"}).revoke("alice", ALICE.fingerprint)
    table = config.table()
    identity = table.lookup(ALICE2.x25519)
    assert identity is not None and identity.name == "alice" and dict(identity.caller.grants) == {"alice": "rw"}
    assert table.lookup(ALICE.x25519) is None


# files ------------------------------------------------------------------------------------------------------


def test_a_missing_file_or_keys_dir_means_no_callers(tmp_path):
    assert read_callers(tmp_path / "nowhere" / "callers.toml") == (CallersConfig(), None)
    assert read_callers(tmp_path / "callers.toml") == (CallersConfig(), None)


def test_written_file_is_0644_in_a_0700_keys_dir_created_on_demand(tmp_path):
    path = tmp_path / "new-keys" / "callers.toml"
    config = CallersConfig().add("bob", [BOB], {"team": "r"})
    write_callers(path, config)
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert read_callers(path)[0] == config
    assert [p.name for p in path.parent.iterdir()] == ["callers.toml"]  # no temp file left behind


def test_an_invalid_file_error_names_the_file(callers_path):
    callers_path.write_text("[callers.bob]\ngrants = { team = 'x' }\n")
    with pytest.raises(CallersFileError, match=f"^{re.escape(str(callers_path))}: caller 'bob': grant on 'team'"):
        read_callers(callers_path)


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_a_callers_file_others_may_write_is_refused(callers_path, mode):
    callers_path.write_text("")
    os.chmod(callers_path, mode)
    with pytest.raises(CallersFileError, match=f"refusing {re.escape(str(callers_path))}: mode 0{mode:o}.*chmod go-w"):
        read_callers(callers_path)


def test_a_keys_dir_others_may_write_is_refused(keys_dir, callers_path):
    os.chmod(keys_dir, 0o777)
    with pytest.raises(CallersFileError, match=f"refusing keys directory {re.escape(str(keys_dir))}: mode 0777"):
        read_callers(callers_path)
    with pytest.raises(CallersFileError, match="refusing keys directory"):
        write_callers(callers_path, CallersConfig())


def test_a_callers_path_that_is_not_a_regular_file_is_an_error_not_a_hang(callers_path):
    os.mkfifo(callers_path)
    with pytest.raises(CallersFileError, match="not a regular file"):
        read_callers(callers_path)
    callers_path.unlink()
    callers_path.mkdir()
    with pytest.raises(CallersFileError, match=r"cannot read .*: Is a directory"):
        read_callers(callers_path)


def test_an_oversized_or_binary_file_is_refused(callers_path):
    callers_path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(CallersFileError, match="larger than"):
        read_callers(callers_path)
    callers_path.write_bytes(b"\xff\xfe")
    with pytest.raises(CallersFileError, match="not UTF-8 text"):
        read_callers(callers_path)


def test_a_symlinked_callers_file_is_read_but_never_replaced(keys_dir, callers_path, tmp_path):
    target = tmp_path / "elsewhere.toml"
    target.write_text(render_callers(CallersConfig().add("bob", [BOB], {})))
    callers_path.symlink_to(target)
    assert read_callers(callers_path)[0].get("bob") is not None
    with pytest.raises(CallersFileError, match="it is a symlink; edit the file it points to"):
        write_callers(callers_path, CallersConfig())


@pytest.mark.parametrize("through_a_link_there", [False, True])
def test_a_callers_file_reached_through_a_folder_others_may_write_is_refused(
    keys_dir, callers_path, tmp_path, through_a_link_there
):
    """Another local user could rename a file (or a link to a folder of theirs) over what the keys folder points at."""
    safe, shared = tmp_path / "safe", tmp_path / "shared"
    safe.mkdir(mode=0o755)
    shared.mkdir()
    os.chmod(shared, 0o777)
    text = render_callers(CallersConfig().add("bob", [BOB], {"team": "rw"}))
    if through_a_link_there:  # keys/callers.toml -> shared/link -> safe/callers.toml: the real file is safe
        (safe / "callers.toml").write_text(text)
        (shared / "link").symlink_to(safe / "callers.toml")
        callers_path.symlink_to(shared / "link")
    else:
        (shared / "callers.toml").write_text(text)
        callers_path.symlink_to(shared / "callers.toml")
    with pytest.raises(CallersFileError, match=f"refusing folder on the way to callers.toml {shared}: mode 0777"):
        read_callers(callers_path)
    directory = CallersFile(callers_path)
    assert directory.lookup(BOB.x25519) is None and "chmod go-w" in (directory.error or "")


def test_a_kubernetes_style_data_link_in_the_keys_folder_is_read(keys_dir, callers_path):
    version = keys_dir / "..2024_05_01_09_30_00.1"
    version.mkdir(mode=0o755)
    (version / "callers.toml").write_text(render_callers(CallersConfig().add("bob", [BOB], {"team": "rw"})))
    (keys_dir / "..data").symlink_to(version.name)
    callers_path.symlink_to("..data/callers.toml")
    assert read_callers(callers_path)[0].get("bob") is not None


def test_a_failed_edit_leaves_the_file_untouched(callers_path):
    write_callers(callers_path, CallersConfig().add("bob", [BOB], {}))
    before = (callers_path.read_bytes(), os.stat(callers_path).st_ino)
    with pytest.raises(CallersFileError):
        update_callers(callers_path, lambda config: config.add("../x", [ALICE], {}))
    assert (callers_path.read_bytes(), os.stat(callers_path).st_ino) == before


# the reloading directory -------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reload_picks_up_an_added_key_and_a_revoke_ends_it(callers_path):
    write_callers(callers_path, CallersConfig().add("alice", [ALICE], {"alice": "rw"}))
    directory = CallersFile(callers_path)
    assert directory.lookup(BOB.x25519) is None
    update_callers(callers_path, lambda config: config.add("bob", [BOB], {"team": "r"}))
    assert directory.reload() is True
    bob = directory.lookup(BOB.x25519)
    assert bob is not None and bob.name == "bob" and bob.fingerprint == BOB.fingerprint
    update_callers(callers_path, lambda config: config.revoke("bob"))
    assert directory.reload() is True
    assert directory.lookup(BOB.x25519) is None
    assert directory.lookup(ALICE.x25519) is not None


def test_a_change_is_noticed_by_lookup_after_the_check_interval(callers_path):
    clock = Clock()
    directory = CallersFile(callers_path, check_every=0.5, clock=clock)
    update_callers(callers_path, lambda config: config.add("bob", [BOB], {}))
    clock.now += 0.1
    assert directory.lookup(BOB.x25519) is None  # not checked yet: at most one stat per interval
    clock.now += 0.5
    assert directory.lookup(BOB.x25519) is not None


def test_a_hand_edit_in_place_is_noticed(callers_path):
    clock = Clock()
    write_callers(callers_path, CallersConfig().add("bob", [BOB], {}))
    directory = CallersFile(callers_path, clock=clock)
    text = callers_path.read_text().replace("[callers.bob]", "[callers.bobby]")
    with open(callers_path, "w") as handle:  # same inode, as an editor that writes in place
        handle.write(text)
    info = os.stat(callers_path)
    os.utime(callers_path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))
    clock.now += 1
    identity = directory.lookup(BOB.x25519)
    assert identity is not None and identity.name == "bobby"


def test_a_broken_edit_keeps_the_last_good_table_and_reports_why(callers_path, caplog):
    clock = Clock()
    write_callers(callers_path, CallersConfig().add("bob", [BOB], {"team": "rw"}))
    directory = CallersFile(callers_path, clock=clock)
    good = render_callers(CallersConfig().add("bob", [BOB], {"team": "rw"}).add("alice", [ALICE], {}))
    callers_path.write_text(good.replace('"rw"', '"admin"'))
    clock.now += 1
    with caplog.at_level(logging.ERROR, logger="server.callers.config"):
        assert directory.lookup(BOB.x25519) is not None  # nobody is locked out...
        assert directory.lookup(ALICE.x25519) is None  # ...and nothing new is granted
        clock.now += 1
        directory.lookup(BOB.x25519)
    assert directory.error is not None and "grant on 'team' must be" in directory.error
    assert str(callers_path) in directory.error
    assert [r.getMessage().count("Still using the last good version (1 callers)") for r in caplog.records] == [1]
    assert directory.reload() is False
    callers_path.write_text(good)
    assert directory.reload() is True
    assert directory.error is None and directory.lookup(ALICE.x25519) is not None


def test_making_the_file_group_writable_keeps_the_last_good_table(callers_path):
    write_callers(callers_path, CallersConfig().add("bob", [BOB], {}))
    directory = CallersFile(callers_path)
    os.chmod(callers_path, 0o664)
    assert directory.reload() is False
    assert directory.lookup(BOB.x25519) is not None and "chmod go-w" in (directory.error or "")


def test_a_broken_file_at_start_lets_nobody_in(callers_path):
    callers_path.write_text(f'[callers.bob]\nkeys = ["{BOB.line()}"]\nextra = 1\n')
    directory = CallersFile(callers_path)
    assert directory.lookup(BOB.x25519) is None
    assert "unknown field 'extra'" in (directory.error or "")


def test_a_missing_file_means_no_callers_with_a_hint(callers_path, caplog):
    with caplog.at_level(logging.WARNING, logger="server.callers.config"):
        directory = CallersFile(callers_path)
    assert directory.lookup(BOB.x25519) is None and directory.error is None
    assert "nobody can connect" in caplog.text and "memory-server callers add" in caplog.text


def test_deleting_the_file_removes_every_caller(callers_path):
    write_callers(callers_path, CallersConfig().add("bob", [BOB], {}))
    directory = CallersFile(callers_path)
    callers_path.unlink()
    assert directory.reload() is True
    assert directory.lookup(BOB.x25519) is None and directory.config == CallersConfig()
