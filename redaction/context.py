"""Secrets known only by their surroundings: URLs (or a bare `user:password@host`) with a password, HTTP
authorization, assignments to credential-like names (a passphrase of several words on its own line too), and
high-entropy strings just after a credential word.

Only the secret is replaced; the name, the separator, the quotes and the rest of the line stay, so
`password = "x"` becomes `password = "[redacted:password]"`. No context window crosses a line break or a
marker (`[redacted:`), so shortening one secret never brings another into reach on a second pass.
"""

from __future__ import annotations

import re

from redaction.assignments import VALUE, assigned, assignment, compound_key
from redaction.entropy import char_classes, looks_random
from redaction.kinds import has_marker
from redaction.lines import ends_line, line_start, starts_line, word_start
from redaction.rule import Rule, Span, after_edge, when
from redaction.values import Assignment, is_password, is_placeholder, is_reference, is_secret


def _opaque(text: str) -> bool:
    """A value written out in full: not a stand-in, not a reference, not something already redacted."""
    return bool(text) and not (has_marker(text) or is_placeholder(text) or is_reference(text))


# In a URL only a template or an environment variable stands for a password; `*` and `&` are its characters (in
# YAML they would be an alias or an anchor, which a URL's password cannot be).
_URL_REFERENCE = re.compile(r"^[$%{<]|\$\{|\{\{")


def _url_password(text: str) -> bool:
    """A password written out in a URL: not a stand-in, a `${VAR}`-like reference or something already redacted."""
    return bool(text) and not (has_marker(text) or is_placeholder(text) or _URL_REFERENCE.search(text))


def _generated(text: str) -> bool:
    """Opaque and mixing two of lower case, upper case and digits, as generated credentials do."""
    return char_classes(text) >= 2 and _opaque(text)


def _token_like(text: str) -> bool:
    return len(text) >= 12 and _generated(text)


def _glue(limit: int, stop: str = "") -> str:
    """Up to `limit` characters of one line, lazily, never entering a marker (nor `stop`, a pattern)."""
    stop = f"|{stop}" if stop else ""
    return rf"(?:(?!\[redacted:{stop})[^\r\n]){{0,{limit}}}?"


_USER = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_ADDRESS_SCHEMES = frozenset({"mailto", "sip", "sips", "xmpp", "im", "pres", "tel", "acct"})


def _bare_user_password(match: re.Match[str], text: str) -> Span | None:
    """The password of `user:password@host` when a plain user name (after a space, a quote or the line start)
    comes before the colon, so `scheme://…`, `a:b:c@…` and `sha256:…@` are left to other rules."""
    colon = match.start()
    low = colon
    while low > max(0, colon - 64) and _USER.fullmatch(text[low - 1]):
        low -= 1
    if low == colon or (low > 0 and text[low - 1] not in " \t\r\n\"'`(<=,;"):
        return None
    if text[low:colon].lower() in _ADDRESS_SCHEMES:  # `mailto:support@example.com`: an address, no password
        return None
    start, end = match.span("secret")
    value = text[start:end]
    return (start, end) if _url_password(value) and not value.isdigit() else None


# --- a passphrase of several words ------------------------------------------------------------------------------

# `password: correct horse battery staple` on a line of its own: two to eight words and nothing else. A sentence
# has punctuation or more words; a placeholder (`password: your password here`) names itself.
_PASSPHRASE = re.compile(
    r"(?P<name>pass(?:word|phrase)|passwd)(?![a-z0-9_.-])\*{0,2}+[ \t]{0,8}+[:=][ \t]{1,8}+"
    r"(?P<secret>[^\s\"'`,;()\[\]{}<>]{1,64}+(?:[ \t][^\s\"'`,;()\[\]{}<>]{1,64}+){1,7}+)[ \t]{0,8}+(?=\r?$)",
    re.MULTILINE,
)


def _passphrase(match: re.Match[str], text: str) -> Span | None:
    start, end = match.span("secret")
    words = text[start:end].split()
    if any(has_marker(w) or is_placeholder(w.strip(".")) or is_reference(w) for w in words):
        return None
    return start, end


# --- high-entropy strings after a credential word -------------------------------------------------------------

# The window stays within one clause: no line break, comma, semicolon, bracket or brace (markers start with one).
_WINDOW = r"(?![a-z])(?P<glue>[^\r\n,;(){}\[\]]{0,40}?)"
# Not after a dot: `x.crypto_pwhash_MIN` is an attribute, `ya29.…` a token that names its issuer.
_CANDIDATE = r"(?<![A-Za-z0-9_+/=.-])(?P<secret>[A-Za-z0-9_+/-]{20,512}+={0,2}+)(?![A-Za-z0-9_+/=-])"
# Words that make the string a hash or an identifier even after a credential word ("token refresh: commit …").
_HASH_CONTEXT = re.compile(
    r"(?<![a-z])(?:commit|sha\d*|md5|hash|digest|checksum|integrity|revision|rev|etag|uuid|id|nonce|salt)(?![a-z])"
)
_HASH_PREFIX = re.compile(r"(?i)(?:sha(?:1|224|256|384|512)|md5)-")
_HEX_DIGEST = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Before the credential word on its line: the hash that follows it names a revision.
_REVISION_LINE = re.compile(r"(?i)\b(?:merge|branch|commit|revert|cherry-pick|tag)\b")


def _names_a_revision(text: str, word: int) -> bool:
    line_start = max(text.rfind("\n", 0, word) + 1, word - 80)
    return _REVISION_LINE.search(text, line_start, word) is not None


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _high_entropy(match: re.Match[str], text: str) -> Span | None:
    if not compound_key(match):
        return None
    start, end = match.span("secret")
    value = text[start:end]
    if not looks_random(value) or is_placeholder(value) or value.startswith(("/", "~")) or text[end : end + 1] == "(":
        return None
    if _UUID.fullmatch(value) or _HASH_PREFIX.match(value) or _HASH_CONTEXT.search(match.group("glue")):
        return None
    if _HEX_DIGEST.fullmatch(value) and (text[start - 1 : start] == "#" or _names_a_revision(text, match.start())):
        return None  # `….tgz#<sha1>` (a tarball's checksum), `Merge branch 'auth-fix' <sha1>`
    return start, end


def _after_word(word: str) -> Rule:
    """A random-looking string within 40 characters after `word`."""
    return Rule("secret", re.compile(word + _WINDOW + _CANDIDATE), _high_entropy, folded=True)


def _short_password_flag(command: str, flag: str = "-p", *, attached: bool, folded: bool = True) -> Rule:
    """`flag` and a password within a line after `command`: `mysql -pSECRET` (after mysql a spaced word is the
    database), `sshpass -p SECRET`. Elsewhere `-p` is a port, a path or a parent flag. The gap stops at another
    `command`, which starts its own match, so a run of them is scanned once. A spaced flag's value does not start
    with `-`: `mongosh -u admin -p --authenticationDatabase admin` asks for the password. A rule that is not
    `folded` tells `-P` from `-p` (sqlcmd's `-p` prints statistics)."""
    word_end = r"(?![a-z0-9_-])" if folded else r"(?![A-Za-z0-9_-])"
    pattern = (
        command
        + word_end
        + _glue(200, stop=command + word_end)
        + rf"[ \t](?P<name>{flag})"
        + ("" if attached else r"[ \t]{1,4}+(?!-)")
        + VALUE
    )
    return Rule("password", re.compile(pattern), assignment(is_password, flag=True), folded=folded)


_TOKEN_WORD = re.compile(r"[A-Za-z0-9_-]{20,255}")


def _access_token(item: Assignment) -> bool:
    """A secret that is one word of a token's alphabet, 20 characters or more."""
    return is_secret(item) and _TOKEN_WORD.fullmatch(item.value) is not None


# A line of PostgreSQL's password file, `hostname:port:database:username:password`, found from its port field
# (digits or `*`); the judge reads the host name back to the line's start. Only the password goes.
_PGPASS = re.compile(r":(?:[0-9]{1,5}+|\*):[^\s:\\]{1,128}+:[^\s:\\]{1,128}+:(?P<secret>[^\s:\\\"]{1,256}+)")
_PGPASS_LINE_START = line_start()
_IPV4 = re.compile(r"[0-9]{1,3}+(?:\.[0-9]{1,3}+){3}")


def _pgpass_password(match: re.Match[str], text: str) -> Span | None:
    """The password of a `.pgpass` line: the host (`*`, a name with a letter or an IPv4 address) starts the line
    and the password ends it; a digits-only last field is a number in some other colon-separated record."""
    colon = match.start()
    host_start = colon - 1 if text[colon - 1 : colon] == "*" else word_start(text, colon)
    host = text[host_start:colon]
    if not (host == "*" or _IPV4.fullmatch(host) or any(c.isalpha() for c in host)):
        return None
    start, end = match.span("secret")
    line = starts_line(text, host_start, _PGPASS_LINE_START)
    if line is None or not ends_line(text, end, line):
        return None
    value = text[start:end]
    return (start, end) if _opaque(value) and not value.isdigit() else None


# Before `password(` in a folded text: a setter's name (`ds.setpassword(`, `setkeystorepassword(`, not `reset…`).
_SETTER_NAME = re.compile(r"(?<![a-z0-9_])set[a-z]{0,20}+$")


def _setter_call(match: re.Match[str], text: str) -> Span | None:
    """`setPassword("…")`, `setKeyStorePassword("…")`: the password is a setter's only argument."""
    start = match.start("name")
    if _SETTER_NAME.search(match.string, max(0, start - 24), start) is None:
        return None
    return assignment(is_password)(match, text)


CONTEXT_RULES: tuple[Rule, ...] = (
    Rule(
        "aws-secret",
        re.compile(
            # `aws_secret…` or `…secret_access_key`, in any case and spelling (`SecretAccessKey`).
            r"secret(?:(?<=aws[ _.-]secret)|(?<=awssecret)|(?=[ _-]?access))(?:[ _-]?access)?(?:[ _-]?key)?"
            + _glue(24)
            + r"(?<![A-Za-z0-9/+])(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        when(_generated),
        folded=True,
    ),
    # scheme://user:password@host; the password may itself hold an unescaped @, so the last one ends it.
    Rule(
        "url-password",
        re.compile(r"://[^\s:/?#@\[\]\"'`<>\\]{0,128}+:(?P<secret>[^\s/?#\"'`<>\\]{1,256})@(?=[A-Za-z0-9\[._-])"),
        when(_url_password),
    ),
    # A password holding an unescaped `/`, `?` or `#` (invalid in a URL, but pasted all the same): the first @ ends
    # it, and it may not start with a port and a path (`host:8080/a@b`) or with `/` (`file://C:/Users/me@home`).
    Rule(
        "url-password",
        re.compile(
            r"://[^\s:/?#@\[\]\"'`<>\\]{0,128}+:(?!\d{1,5}+[/?#]|/)"
            r"(?P<secret>[^\s/?#@\"'`<>\\]{0,255}+[/?#][^\s@\"'`<>\\]{0,255}+)@(?=[A-Za-z0-9\[._-])"
        ),
        when(_url_password),
    ),
    # user:password@host.name without a scheme (`admin:s3cret@db.example.com`, a DSN pasted bare). The host
    # must have a dot, so `image:tag@sha256:…` and `a:b@c` in prose stay.
    Rule(
        "url-password",
        re.compile(
            r":(?P<secret>[^\s:/?#@\"'`<>\\\[\]]{1,256}+)@"
            r"(?=[A-Za-z0-9-]{1,63}+(?:\.[A-Za-z0-9-]{1,63}+){1,8}+(?![A-Za-z0-9-]))"
        ),
        _bare_user_password,
    ),
    Rule(
        "basic-auth",
        re.compile(
            r"authorization[\"'\\]{0,2}+[ \t]{0,4}+[:=][ \t]{0,4}+[\"'\\]{0,2}+basic[ \t]{1,4}+"
            r"(?P<secret>[a-z0-9+/]{8,4096}+={0,2}+)(?![a-z0-9+/=])"
        ),
        when(_generated),
        folded=True,
    ),
    # .npmrc: `//registry.example.com/:_auth=<base64 of user:password>`, or `NPM_CONFIG__AUTH=…`.
    assigned("basic-auth", after_edge("_auth", "a-z0-9"), is_secret),
    # An Azure shared access signature: `…?sv=…&sig=<base64>` in a blob URL, `SharedAccessSignature sr=…&sig=…`.
    Rule(
        "secret",
        re.compile(r"sig=(?<=[?&; \t]sig=)(?P<secret>[A-Za-z0-9%+/=]{40,200}+)(?![A-Za-z0-9%+/=])"),
        when(_generated),
    ),
    Rule(
        "bearer-token",
        re.compile(
            after_edge("bearer", "a-z")
            + r"[ \t]{1,4}+(?P<secret>[a-z0-9_~+/-]{8,4096}+(?:\.[a-z0-9_~+/-]{1,4096}+){0,4}+={0,2}+)"
            r"(?![a-z0-9_~+/=-])"
        ),
        when(_token_like),
        folded=True,
    ),
    # A bare `pass` or `pwd` is a word ("First pass: …") or the shell's working directory (`PWD=/home/…`): only
    # compounds (`DB_PASS`, `MYSQL_PWD`, `smtp.pass`) count.
    Rule("password", _PASSPHRASE, _passphrase, folded=True),
    # A bare `pwd` counts too, unless its value is a path (the shell's `PWD=/home/…`); `pw` only in a compound.
    assigned("password", r"pass(?:word|wd|phrase|(?<=[_.-]pass))|pwd|pw(?<=[_.-]pw)", is_password, greedy=True),
    Rule(
        "password",
        re.compile(
            after_edge("--", "a-z0-9_-")
            + r"(?:[a-z0-9]{1,20}+-){0,3}+(?P<name>pass(?:word|wd|phrase)?)[ \t]{1,4}+"
            + VALUE
        ),
        assignment(is_password, flag=True),
        folded=True,
    ),
    # `--account-key …`, `--api-key=…`: a key flag (a compound, see `assignments.py`) and its value.
    Rule(
        "secret",
        re.compile(
            after_edge("--", "a-z0-9_-") + r"(?:[a-z0-9]{1,20}+-){0,3}+(?P<name>key)(?:[ \t]{1,4}+|(?P<sep>=))" + VALUE
        ),
        assignment(is_secret, flag=True),
        folded=True,
    ),
    # `mysql -pSECRET`, `mysql -p'SECRET'`, `sshpass -p SECRET`, `docker login -p SECRET`, `mongosh -p SECRET`,
    # `sqlcmd -P SECRET`, `redis-cli -a SECRET`: a short flag means a password only after these commands (elsewhere
    # `-p` is a port, a path, a parent flag…).
    _short_password_flag(r"(?:mysql|mysqldump|mariadb)", attached=True),
    _short_password_flag(r"(?:sshpass|docker login|podman login|az login)", attached=False),
    _short_password_flag(r"mongo(?:sh|dump|restore|export|import|files|stat|top)?+", attached=False),
    _short_password_flag(r"(?:sqlcmd|SQLCMD|bcp|BCP)", "-P", attached=False, folded=False),
    _short_password_flag(r"redis-cli", "-a", attached=False),
    assigned("password", r"rediscli_auth", is_password),
    # Java: `ds.setPassword("…")`; Gradle's signing config: `storePassword "…"`, `keyPassword '…'`.
    Rule(
        "password",
        re.compile(r"(?P<name>pass(?:word|wd|phrase))\((?=\\?[\"'`])" + VALUE),
        _setter_call,
        folded=True,
    ),
    Rule(
        "password",
        re.compile(r"(?P<name>password)(?:(?<=storepassword)|(?<=keypassword))[ \t]{1,8}+(?=\\?[\"'])" + VALUE),
        assignment(is_password),
        folded=True,
    ),
    # keytool and jarsigner: `-storepass SECRET`, `-keypass SECRET` (`-storepass:env NAME` names a variable).
    Rule(
        "password",
        re.compile(
            r"(?P<name>pass)(?:(?<=-storepass)|(?<=-keypass)|(?<=-srcstorepass)|(?<=-deststorepass)"
            r"|(?<=-srckeypass)|(?<=-destkeypass))[ \t]{1,4}+(?!-)" + VALUE
        ),
        assignment(is_password, flag=True),
        folded=True,
    ),
    # openssl: `-passin pass:SECRET`, `-passout pass:SECRET`, `-pass pass:SECRET` (`env:`, `file:`, `fd:` name it).
    # As after other flags, a plain word is an example (`pass:hello`, `pass:sample</code>`).
    Rule(
        "password",
        re.compile(r"-pass(?:in|out)?+[ \t]{1,4}+[\"']?+pass:(?P<secret>[^\s\"'`<>]{1,256}+)"),
        when(_generated),
        folded=True,
    ),
    # .netrc: `machine host login me password SECRET`.
    Rule(
        "password",
        re.compile(
            after_edge("machine", "a-z0-9_-")
            + r"[ \t]{1,8}+[^\s]{1,253}+(?:[ \t]{1,8}+login[ \t]{1,8}+[^\s]{1,128}+)?+[ \t]{1,8}+password[ \t]{1,8}+"
            r"(?P<secret>[^\s]{1,256}+)"
        ),
        when(_opaque),
        folded=True,
    ),
    # Maven's settings.xml and the like: `<password>SECRET</password>`.
    Rule(
        "password",
        re.compile(r"<password>(?P<secret>[^<>\r\n]{1,256}+)</password>"),
        when(_opaque),
        folded=True,
    ),
    # curl -u user:password (the user stays, as in a URL).
    Rule(
        "password",
        re.compile(
            after_edge("curl", "a-z0-9_-")
            + r"(?![a-z0-9_-])"
            # Not past another `curl`: that one starts its own match, and every `curl` rescanning 400 characters
            # made `curl curl curl …` quadratic.
            + _glue(400, stop=r"(?<![a-z0-9_-])curl(?![a-z0-9_-])")
            + r"[ \t](?:-u|--user)(?:[ \t]{1,4}+|=)[\"']?+[^\s:\"'\[\]\\]{1,128}+:(?P<secret>[^\s\"'\\]{1,256}+)"
        ),
        when(_opaque),
        folded=True,
    ),
    # `AZURE_DEVOPS_EXT_PAT`, `GH_PAT`: a personal access token, not a `URL_PAT` pattern.
    assigned("secret", r"pat(?<=[_.-]pat)", _access_token),
    # Mailgun's examples: `requests.post(url, auth=("api", "key-…"))`, the password of an `("api", …)` auth tuple.
    Rule(
        "secret",
        re.compile(
            r"auth\\?[\"']?+[ \t]{0,4}+[=:][ \t]{0,4}+\([ \t]{0,4}+\\?[\"'](?P<name>api)\\?[\"'][ \t]{0,4}+,[ \t]{0,4}+"
            r"(?=\\?[\"'])" + VALUE
        ),
        assignment(is_secret),
        folded=True,
    ),
    Rule("password", _PGPASS, _pgpass_password),
    # One rule per name, so each starts with its literal (see rule.py).
    assigned("secret", "secret(?:_key_base)?+", is_secret),  # and Rails' `SECRET_KEY_BASE`
    assigned("secret", "token", is_secret),
    assigned("secret", "credentials?", is_secret),
    assigned("secret", "key", is_secret),
    _after_word(after_edge("secret", "a-z")),
    _after_word(after_edge("token", "a-z")),
    _after_word(after_edge("credential", "a-z") + "s?"),
    _after_word(after_edge("pass", "a-z") + "(?:word|wd|phrase)"),
    _after_word(after_edge("auth", "a-z") + "(?:orization|entication)?"),
    _after_word("(?P<name>key)"),
)
