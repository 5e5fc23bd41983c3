"""The memory browser's request checks, as pure functions: Host, Origin, Sec-Fetch-Site, token and cookie."""

from __future__ import annotations

import pytest

from client_proxy.ui.api import _exact_text
from client_proxy.ui.guard import Guard, Refused

PORT = 54321
HOST = {"host": f"127.0.0.1:{PORT}"}


def test_each_run_has_its_own_token_and_cookie_and_the_url_names_only_loopback():
    one, two = Guard(PORT), Guard(PORT)
    assert one.token != two.token and one.session != two.session and one.token != one.session
    assert one.url == f"http://127.0.0.1:{PORT}/?token={one.token}"
    assert len(one.token) >= 40


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"host": f"evil.example:{PORT}"},
        {"host": "127.0.0.1"},
        {"host": f"127.0.0.1:{PORT + 1}"},
        {**HOST, "origin": "http://evil.example"},
        {**HOST, "origin": f"https://127.0.0.1:{PORT}"},
        {**HOST, "origin": "null"},
        {**HOST, "sec-fetch-site": "cross-site"},
        {**HOST, "sec-fetch-site": "same-site"},
    ],
)
def test_a_request_from_elsewhere_is_refused(headers):
    with pytest.raises(Refused):
        Guard(PORT).check_origin(headers, unsafe=False)


def test_the_page_itself_passes_and_a_change_must_name_its_origin():
    guard = Guard(PORT)
    guard.check_origin({**HOST, "sec-fetch-site": "none"}, unsafe=False)  # typed in the address bar
    guard.check_origin({"host": f"localhost:{PORT}", "origin": f"http://localhost:{PORT}"}, unsafe=True)
    with pytest.raises(Refused):
        guard.check_origin(HOST, unsafe=True)


def test_the_printed_url_may_arrive_from_no_site_but_never_from_another_host_or_origin():
    guard = Guard(PORT)
    guard.check_origin({**HOST, "sec-fetch-site": "cross-site"}, unsafe=False, signing_in=True)  # from a file://
    for headers in ({"host": f"evil.example:{PORT}"}, {**HOST, "origin": "http://evil.example"}):
        with pytest.raises(Refused):
            guard.check_origin({**headers, "sec-fetch-site": "cross-site"}, unsafe=False, signing_in=True)


def test_only_this_runs_cookie_signs_in():
    guard = Guard(PORT)
    guard.check_cookie(f"other=1; {guard.set_cookie().split(';')[0]}")
    for header in (None, "", f"{guard.cookie_name}=nope", f"memory_ui_1={guard.session}", '"broken'):
        with pytest.raises(Refused):
            guard.check_cookie(header)
    assert guard.token_ok(guard.token) and not guard.token_ok(guard.token[:-1]) and not guard.token_ok("")


@pytest.mark.parametrize(
    "odd",
    [
        "flash=Saved your settings",  # a space in a value, as another local app's script may set
        'prefs={"theme": "dark", "size": 2}',  # a JSON object
        "=nameless",
        "nameless",
        "path=/",  # a name SimpleCookie takes for an attribute
        '"broken',
        "a=1;;b",
    ],
)
def test_another_local_apps_odd_cookie_does_not_lock_the_user_out(odd):
    guard = Guard(PORT)
    ours = guard.set_cookie().split(";")[0]
    guard.check_cookie(f"{odd}; {ours}")
    guard.check_cookie(f"{ours}; {odd}")
    guard.check_cookie(f"{guard.cookie_name}=stale; {odd};{ours} ")  # one of two under our name is right
    for wrong in (odd, f"{odd}; {guard.cookie_name}=nope", f"{odd}; {guard.cookie_name}"):
        with pytest.raises(Refused):
            guard.check_cookie(wrong)


def test_a_file_is_editable_only_when_its_lines_rebuild_exactly_the_hashed_text():
    import hashlib

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    assert _exact_text("a\nb", sha("a\nb\n")) == "a\nb\n"
    assert _exact_text("a\nb", sha("a\nb")) == "a\nb"
    assert _exact_text("a\nb", sha("a\r\nb\r\n")) is None
    assert _exact_text("", None) is None
