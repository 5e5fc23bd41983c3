"""Is the value assigned to a credential-looking name a secret, or code, a reference, a placeholder or prose?

`password = getpass.getpass()`, `api_key = settings.api_key`, `token = None`, `password: ${DB_PASSWORD}` and
`api_key: "YOUR_API_KEY"` all name a credential without holding one; redacting them would only hide how the
code works. The judgement is made on the value and on a little of its surroundings: was it quoted, which
separator and spacing, is it a keyword argument, does the line end after it.

Deliberate choices on ambiguous values:
- well-known defaults and placeholders (`changeme`, `changeit`, `password`, `secret`, `example`, `xxxx`, `***`,
  anything with `your`) are left: they tell a reader what to change and protect nothing;
- a bare identifier in code (`password=pw`, `token = access`) is a variable, unless it mixes letters and digits
  like `hunter2` (a token must look random); in an environment file, a shell line (`PASSWORD=hunter`), YAML
  (`password: hunter` ending its line) or after `--password=` it is the literal secret, while after
  `password:` in a sentence more words follow and nothing is taken;
- a value with spaces is a label or a sentence (`"Enter your password"`), not a password.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from redaction.entropy import char_classes, looks_random
from redaction.kinds import has_marker

MIN_SECRET_LENGTH = 8

# Values that are names of types or constants, in the languages a coding agent meets.
_KEYWORDS = frozenset(
    "none null nil undefined true false str string bytes bytearray int integer float double bool boolean number "
    "any object list dict tuple path secretstr secretbytes optional required self this cls new".split()
)
_PLACEHOLDERS = frozenset(
    "changeme change_me change-me changeit password passwd pass pwd secret token apikey api_key api-key key "
    "credentials example sample placeholder dummy fake test testing todo tbd fixme redacted hidden masked "
    "empty default value text".split()
)
_PLACEHOLDER_PARTS = re.compile(r"(?i)your|example|placeholder|replace[_-]?me|insert[_-]|change[_-]?me")
# Masking (`sk-****`, `xxxx`, `abc…`) makes a stand-in only when little else is left: `0001A***` is a password.
_MASKS = re.compile(r"(?i)x{4,}|\*{3,}|…+|\.{3,}")
_MASKED_REST = 4  # fewer characters than this besides the masks: a stand-in
# Forms that point at a secret kept elsewhere: $VAR, ${VAR}, %VAR%, %(name)s, {name}, <name>, YAML *alias and
# &anchor, and the tags of Ansible Vault, Home Assistant and CloudFormation.
_REFERENCE = re.compile(r"^(?:[$%*&{<]|!(?:vault|secret|env|Ref|Sub|GetAtt|ImportValue)\b)|\$\{|\{\{")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_LIKE = re.compile(r"[A-Za-z_.-]+")
# A capitalised word after `name:` in code is a type annotation (`token: Hashable`), not a value.
_TYPE_NAME = re.compile(r"(?:[A-Z][a-z]+)+")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_CREDENTIAL_WORD = re.compile(r"(?i)pass|pwd|secret|token|key|auth|cred")
_SPACE = re.compile(r"\s")


@dataclass(frozen=True)
class Assignment:
    """A value found after a credential-looking name, with what its surroundings say about it."""

    name: str  # the credential word as written (`PASSWORD`, `api_key`, `Token`)
    value: str
    quoted: bool
    separator: str  # `=`, `:`, `:=`, `=>`, or ` ` after a command-line flag
    spaced: bool  # whitespace around the separator (`x = y`, not `x=y`)
    quoted_name: bool  # `"password": ...`: a dictionary or JSON key
    in_call: bool  # a keyword argument: after `(` or `,`, or followed by `,`
    flag: bool  # `--password value`
    next_char: str  # the character right after an unquoted value ("" at the end)
    ends_line: bool  # nothing but a comment or a closing quote or bracket follows the value on its line


def is_placeholder(value: str) -> bool:
    """Whether `value` is an obvious stand-in (`changeme`, `<your token>`, `xxxx`, `****`) rather than a secret.

    A digit-less name made of words that include a credential word (`mypassword`, `X-Xet-Access-Token`,
    `challengePassword`) is one too: it names the secret instead of being it.
    """
    lowered = value.lower()
    return (
        lowered in _PLACEHOLDERS
        or lowered in _KEYWORDS
        or bool(_PLACEHOLDER_PARTS.search(value))
        or bool(_MASKS.search(value) and len(_MASKS.sub("", value)) < _MASKED_REST)
        or len(set(value)) <= 2
        or bool(_NAME_LIKE.fullmatch(value) and _CREDENTIAL_WORD.search(value))
    )


def is_reference(value: str) -> bool:
    """Whether `value` names a secret kept elsewhere: an environment variable, a template field, a vault tag."""
    return bool(_REFERENCE.search(value))


def _attribute_path(value: str) -> bool:
    """`settings.database.password`, not a dotted token (`dp.st.prd.<random>`, Vault's `s.<random>`, Mapbox's
    `sk.eyJ…`): no part of an attribute path looks generated."""
    return bool(_DOTTED.fullmatch(value)) and not any(looks_random(part) for part in value.split("."))


def _is_code(item: Assignment) -> bool:
    """A call, an index, an attribute path or a keyword: `getpass.getpass()`, `os.environ[...]`, `settings.key`."""
    value = item.value
    return (
        item.next_char in ("(", "[")
        or value.lower() in _KEYWORDS
        or (item.separator == ":" and bool(_TYPE_NAME.fullmatch(value)))
        or _attribute_path(value)
    )


def _unquoted_is_literal(item: Assignment, in_code: Callable[[str], bool]) -> bool:
    """Whether an unquoted value is the secret itself or code that holds it (see the module's choices).

    Where the surroundings say "code" (`x = y`, a keyword argument, a dictionary key), a bare identifier is a
    variable (`password=db_password2`) unless `in_code` says it looks like a literal.
    """
    value = item.value
    if item.flag:
        return item.separator == "=" or char_classes(value) >= 2
    if item.separator == ":" and not item.quoted_name and not item.in_call:
        return item.ends_line  # YAML or an HTTP header; in a sentence ("First pass: build…") more words follow
    if item.separator == "=" and not item.spaced and not item.in_call:
        return True  # an environment file, a shell line, a .properties file
    if not _IDENTIFIER.fullmatch(value):
        return True
    return not _CREDENTIAL_WORD.search(value) and in_code(value)


def _mixes_letters_and_digits(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _plausible(item: Assignment) -> bool:
    """The checks shared by passwords and other secrets: non-empty, one word, not a marker, stand-in or reference."""
    value = item.value
    if not value or has_marker(value) or _SPACE.search(value):
        return False
    if is_placeholder(value) or is_reference(value):
        return False
    return item.quoted or not _is_code(item)


def is_password(item: Assignment) -> bool:
    """Whether the value given to a password-like name is a real password."""
    return _plausible(item) and (item.quoted or _unquoted_is_literal(item, _mixes_letters_and_digits))


def is_secret(item: Assignment) -> bool:
    """Whether the value given to a token-, key- or secret-like name is a real secret.

    Stricter than a password: at least 8 characters mixing two of lower case, upper case and digits, so that
    `credentials: "include"` or `token = "string"` stay; a bare identifier in code must look random outright.
    """
    if not _plausible(item) or len(item.value) < MIN_SECRET_LENGTH or char_classes(item.value) < 2:
        return False
    return item.quoted or _unquoted_is_literal(item, looks_random)
