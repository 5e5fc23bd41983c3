"""Values after a credential-like name: `password = "x"`, `"api_key": "x"`, `DB_PASSWORD=x`, `--password x`.

A rule matches a name, a separator and a value (quoted, or one bare word); `assignment` reads them, with what the
surroundings say (see `values.Assignment`), and lets a test from `values.py` decide whether the value is a secret.
On a `.env` line an unquoted value is the rest of the line, whatever it holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from redaction.lines import ends_line, line_start, starts_line, word_start
from redaction.rule import Judge, Rule, Span
from redaction.values import Assignment

_UNQUOTED = r"[^\s\"'`\\,;&|<>(){}\[\]]"
# A value: double-, single- or back-quoted (quotes may be JSON-escaped, as in transcripts), or one bare word.
# The bare word takes its whole run, however long, and the judge refuses one over `_MAX_VALUE`: a bounded run
# that had to end there would fail at every name inside it (`key=key=key=…`), rescanning the run each time.
_MAX_VALUE = 4096
# Inside quotes a backslash escapes the next character (`"Tr0ub\\dor"`, `"Xq9\\"vT2"`), except that a JSON-escaped
# value (`\\"…\\"`, a transcript line) ends at its escaped closing quote.
VALUE = (
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


def compound_key(match: re.Match[str]) -> bool:
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


# A `.env` line: its first word is the name, after indentation, `export ` or a YAML list's `- `; its unquoted
# value runs to the end of the line or to a comment.
_ENV_LINE_START = line_start(r"(?:export[ \t]{1,4}+|-[ \t]{1,4}+)?+")
_ENV_VALUE = re.compile(r"[^\s\"'`\\]{1,4096}+")
_ENV_COMMENT = re.compile(r"[ \t]{1,200}+#")
# `getpass()`, `os.environ[KEY]`: code, whatever the brackets hold.
_CALL = re.compile(r"[A-Za-z_$][A-Za-z0-9_.$]*+[(\[].*[)\]]")
_OPENERS, _CLOSERS = "([{", ")]}"


def _is_code(value: str) -> bool:
    """A line of code, not a `.env` value: a call or an index (`getpass()`, `Spec(` going on on the next line), an
    argument (`password=pw,`, `token=t)`: it ends with a comma, a semicolon or a bracket it did not open) or several
    assignments (`a=1,b=2`)."""
    if _CALL.fullmatch(value) or value.endswith((",", ";", *_OPENERS)) or "=" in value.rstrip("="):
        return True
    depth = sum((c in _OPENERS) - (c in _CLOSERS) for c in value)
    return value[-1] in _CLOSERS and depth < 0


def _env_value_end(match: re.Match[str], text: str, start: int, end: int) -> int | None:
    """Where an unquoted value that stopped at `end` really ends, if the match is a `.env` line's assignment: there
    `DB_PASSWORD=ab(c,d{ef}gh` is one value to the end of the line, though `(`, `,` and `{` end a value elsewhere."""
    groups = match.groupdict()
    if groups.get("sep") != "=" or groups.get("sp1") or groups.get("sp2") or groups.get("kq"):
        return None
    if (line := starts_line(text, word_start(text, match.start("name")), _ENV_LINE_START)) is None:
        return None  # before reading the rest of the line: only one match a line gets this far
    if (run := _ENV_VALUE.match(text, end)) is None:
        return None  # the value ends with the line anyway
    run_end = run.end()
    if not (ends_line(text, run_end, line) or _ENV_COMMENT.match(text, run_end)):
        return None
    return None if _is_code(text[start:run_end]) else run_end


def assignment(test: Callable[[Assignment], bool], *, flag: bool = False, greedy: bool = False) -> Judge:
    """A judge that reads the matched name and value into an `Assignment` and lets `test` decide."""

    def judge(match: re.Match[str], text: str) -> Span | None:
        if not compound_key(match):
            return None
        if match.groupdict().get("sep") == "," and not _setter_argument(match, text):
            return None
        groups = match.groupdict()
        quote = next(g for g in ("dq", "sq", "bq", "uq") if groups[g] is not None)
        start, end = match.span(quote)
        if end - start > _MAX_VALUE:
            return None
        if quote == "uq":
            if greedy and match.group("name").lower() == "pwd" and _bare_pwd_is_not_a_password(match, text, start):
                return None
            if (env_end := _env_value_end(match, text, start, end)) is not None:
                end = env_end
            else:  # a sentence's full stop or colon is not part of the password
                while end > start and text[end - 1] in ".:":
                    end -= 1
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


def assigned(kind: str, name: str, test: Callable[[Assignment], bool], *, greedy: bool = False) -> Rule:
    """`<…name> = value`, `"…name": "value"`, `…NAME: value` and the like, for one name pattern."""
    pattern = re.compile(rf"(?P<name>{name}){_NAME_END}{_SEPARATOR}{VALUE}")
    return Rule(kind, pattern, assignment(test, greedy=greedy), folded=True)
