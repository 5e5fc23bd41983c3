"""Secrets known only by their surroundings: URLs (or a bare `user:password@host`) with a password, HTTP
authorization, assignments to credential-like names (a passphrase of several words on its own line too), and
high-entropy strings just after a credential word.

Only the secret is replaced; the name, the separator, the quotes and the rest of the line stay, so
`password = "x"` becomes `password = "[redacted:password]"`. No context window crosses a line break or a
marker (`[redacted:`), so shortening one secret never brings another into reach on a second pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from redaction.entropy import char_classes, looks_random
from redaction.kinds import has_marker
from redaction.rule import Judge, Rule, Span, after_edge, when
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


# --- values after a name -------------------------------------------------------------------------------------

_UNQUOTED = r"[^\s\"'`\\,;&|<>(){}\[\]]"
# A value: double-, single- or back-quoted (quotes may be JSON-escaped, as in transcripts), or one bare word.
# The bare word takes its whole run, however long, and the judge refuses one over `_MAX_VALUE`: a bounded run
# that had to end there would fail at every name inside it (`key=key=key=…`), rescanning the run each time.
_MAX_VALUE = 4096
# Inside quotes a backslash escapes the next character (`"Tr0ub\\dor"`, `"Xq9\\"vT2"`), except that a JSON-escaped
# value (`\\"…\\"`, a transcript line) ends at its escaped closing quote.
_VALUE = (
    r"(?:(?P<dqe>\\)?+\"(?P<dq>(?:[^\"\\\r\n]|\\(?(dqe)[^\"\r\n]|[^\r\n])){0,4096}+)(?(dqe)\\)\""
    r"|(?P<sqe>\\)?+'(?P<sq>(?:[^'\\\r\n]|\\(?(sqe)[^'\r\n]|[^\r\n])){0,4096}+)(?(sqe)\\)'"
    r"|`(?P<bq>[^`\\\r\n]{0,4096}+)`"
    rf"|(?P<uq>{_UNQUOTED}++))"
)
# A name may be quoted (a JSON key, `environ["DB_PASSWORD"] = …`, `setdefault("DB_PASSWORD", …)`) or set in
# markdown bold or italics (`**password**: …`, common in notes).
_SEPARATOR = (
    r"(?:(?P<kq>\\?[\"'])\]?+)?+\*{0,2}+(?P<sp1>[ \t]{0,8}+)"
    r"(?P<sep>:=|=>|=(?!=)|:(?=[ \t\"'`\\])|(?<=[\"']),)(?P<sp2>[ \t]{0,8}+)"
)
_NAME_END = r"(?![a-z0-9_.-])"
# After a value at the end of a line (or before a comment, a closing quote or bracket). A comma is not an end:
# `private_key: PKCS7PrivateKeyTypes,` is a parameter list, `password: see above, …` a sentence.
_ENDS_LINE = re.compile(r"[ \t]{0,200}+(?:$|[\r\n#\"'`}\]]|\\[nr])", re.MULTILINE)
# `key` alone names a dictionary key far more often than a secret: only these compounds count (`APP_KEY` is
# Laravel's and Datadog's, `Ocp-Apim-Subscription-Key` Azure API Management's, `x-functions-key` Azure Functions',
# `SUPABASE_SERVICE_KEY` Supabase's).
_KEY_COMPOUND = re.compile(
    r"(?:api|access|private|secret|signing|encryption|master|auth|session|license|client|account|storage"
    r"|app|application|subscription|functions?|service)[ _-]?$"
)


def _before_identifier(text: str, start: int) -> str:
    """The first character before the identifier (and any quotes or spaces) that ends at `start`."""
    low = max(0, start - 128)
    i = start
    while i > low and (text[i - 1].isalnum() or text[i - 1] in "_.-"):
        i -= 1
    while i > low and text[i - 1] in " \t\"'":
        i -= 1
    return text[i - 1] if i > low else ""


# A quoted name followed by a comma is a secret only as the first argument of a setter: `os.environ.setdefault(
# "DB_PASSWORD", "…")`, `os.getenv("API_KEY", "…")`, Java's `props.setProperty("password", "…")`; in a list or a
# tuple (`("password", "username")`) it is a word.
_SETTER = re.compile(
    r"(?:setdefault|setenv|putenv|getenv|get|set|setProperty|getProperty|getOrDefault|put)\([ \t]{0,4}+\\?[\"']$"
)


def _setter_argument(match: re.Match[str], text: str) -> bool:
    start = match.start("name")
    low = max(0, start - 128)
    while start > low and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
        start -= 1
    return _SETTER.search(text, max(0, start - 16), start) is not None


def _compound_key(match: re.Match[str]) -> bool:
    """False for a `key` that is not an API, access, private… key; True for every other name."""
    if match.re.groupindex.get("name") is None or match.group("name") != "key":
        return True
    start = match.start("name")
    return bool(_KEY_COMPOUND.search(match.string, max(0, start - 13), start))


# After an unquoted password stopped at `&`, `|`, `;`, `<` or `>`: the rest of the word is the password too
# (`password=Tr0ub4dor&3xyz!`). Taking a little too much (`pass=x&user=y`) hides no code worth reading.
_PASSWORD_TAIL = re.compile(r"[&|;<>][^\s\"'`\\,(){}\[\]]{0,256}+")
# The shell's working directory, not a password: `PWD=/home/me`, `pwd: ~/src`.
_PATH_LIKE = re.compile(r"[/~.]|[A-Za-z]:[\\/]")


def _bare_pwd_is_not_a_password(match: re.Match[str], text: str, start: int) -> bool:
    """`pwd` alone names a password only in `pwd=value` form with a value that is not a path."""
    if match.start("name") > 0 and text[match.start("name") - 1] in "_.-":
        return False  # DB_PWD, mysql.pwd: a compound, judged like any password
    return match.group("sep") != "=" or _PATH_LIKE.match(text, start) is not None


def _assignment(test: Callable[[Assignment], bool], *, flag: bool = False, greedy: bool = False) -> Judge:
    """A judge that reads the matched name and value into an `Assignment` and lets `test` decide."""

    def judge(match: re.Match[str], text: str) -> Span | None:
        if not _compound_key(match):
            return None
        if match.groupdict().get("sep") == "," and not _setter_argument(match, text):
            return None
        groups = match.groupdict()
        quote = next(g for g in ("dq", "sq", "bq", "uq") if groups[g] is not None)
        start, end = match.span(quote)
        if end - start > _MAX_VALUE:
            return None
        if quote == "uq":  # a sentence's full stop or colon is not part of the password
            while end > start and text[end - 1] in ".:":
                end -= 1
            if greedy and match.group("name").lower() == "pwd" and _bare_pwd_is_not_a_password(match, text, start):
                return None
            if greedy and (tail := _PASSWORD_TAIL.match(text, end)) is not None:
                end = tail.end()
        item = Assignment(
            name=text[match.start("name") : match.end("name")],
            value=text[start:end],
            quoted=quote != "uq",
            separator=groups.get("sep") or " ",
            spaced=bool(groups.get("sp1") or groups.get("sp2")),
            quoted_name=bool(groups.get("kq")),
            # After `(` or `,`, or followed by `,` (an argument on a line of its own): a keyword argument.
            in_call=_before_identifier(text, match.start("name")) in ("(", ",") or text[end : end + 1] == ",",
            flag=flag,
            next_char=text[end : end + 1],
            ends_line=_ENDS_LINE.match(text, end) is not None,
        )
        return (start, end) if test(item) else None

    return judge


def _assigned(kind: str, name: str, test: Callable[[Assignment], bool], *, greedy: bool = False) -> Rule:
    """`<…name> = value`, `"…name": "value"`, `…NAME: value` and the like, for one name pattern."""
    pattern = re.compile(rf"(?P<name>{name}){_NAME_END}{_SEPARATOR}{_VALUE}")
    return Rule(kind, pattern, _assignment(test, greedy=greedy), folded=True)


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
    if not _compound_key(match):
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
        + _VALUE
    )
    return Rule("password", re.compile(pattern), _assignment(is_password, flag=True), folded=folded)


# Before `password(` in a folded text: a setter's name (`ds.setpassword(`, `setkeystorepassword(`, not `reset…`).
_SETTER_NAME = re.compile(r"(?<![a-z0-9_])set[a-z]{0,20}+$")


def _setter_call(match: re.Match[str], text: str) -> Span | None:
    """`setPassword("…")`, `setKeyStorePassword("…")`: the password is a setter's only argument."""
    start = match.start("name")
    if _SETTER_NAME.search(match.string, max(0, start - 24), start) is None:
        return None
    return _assignment(is_password)(match, text)


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
    _assigned("basic-auth", after_edge("_auth", "a-z0-9"), is_secret),
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
    # A bare `pwd` counts too, unless its value is a path (the shell's `PWD=/home/…`).
    _assigned("password", r"pass(?:word|wd|phrase|(?<=[_.-]pass))|pwd", is_password, greedy=True),
    Rule(
        "password",
        re.compile(
            after_edge("--", "a-z0-9_-")
            + r"(?:[a-z0-9]{1,20}+-){0,3}+(?P<name>pass(?:word|wd|phrase)?)[ \t]{1,4}+"
            + _VALUE
        ),
        _assignment(is_password, flag=True),
        folded=True,
    ),
    # `--account-key …`, `--api-key=…`: a key flag (a compound, see `_KEY_COMPOUND`) and its value.
    Rule(
        "secret",
        re.compile(
            after_edge("--", "a-z0-9_-") + r"(?:[a-z0-9]{1,20}+-){0,3}+(?P<name>key)(?:[ \t]{1,4}+|(?P<sep>=))" + _VALUE
        ),
        _assignment(is_secret, flag=True),
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
    _assigned("password", r"rediscli_auth", is_password),
    # Java: `ds.setPassword("…")`; Gradle's signing config: `storePassword "…"`, `keyPassword '…'`.
    Rule(
        "password",
        re.compile(r"(?P<name>pass(?:word|wd|phrase))\((?=\\?[\"'`])" + _VALUE),
        _setter_call,
        folded=True,
    ),
    Rule(
        "password",
        re.compile(r"(?P<name>password)(?:(?<=storepassword)|(?<=keypassword))[ \t]{1,8}+(?=\\?[\"'])" + _VALUE),
        _assignment(is_password),
        folded=True,
    ),
    # keytool and jarsigner: `-storepass SECRET`, `-keypass SECRET` (`-storepass:env NAME` names a variable).
    Rule(
        "password",
        re.compile(
            r"(?P<name>pass)(?:(?<=-storepass)|(?<=-keypass)|(?<=-srcstorepass)|(?<=-deststorepass)"
            r"|(?<=-srckeypass)|(?<=-destkeypass))[ \t]{1,4}+(?!-)" + _VALUE
        ),
        _assignment(is_password, flag=True),
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
    # One rule per name, so each starts with its literal (see rule.py).
    _assigned("secret", "secret(?:_key_base)?+", is_secret),  # and Rails' `SECRET_KEY_BASE`
    _assigned("secret", "token", is_secret),
    _assigned("secret", "credentials?", is_secret),
    _assigned("secret", "key", is_secret),
    _after_word(after_edge("secret", "a-z")),
    _after_word(after_edge("token", "a-z")),
    _after_word(after_edge("credential", "a-z") + "s?"),
    _after_word(after_edge("pass", "a-z") + "(?:word|wd|phrase)"),
    _after_word(after_edge("auth", "a-z") + "(?:orization|entication)?"),
    _after_word("(?P<name>key)"),
)
