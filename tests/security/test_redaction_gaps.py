"""The forms probes and reviews found unredacted (finding 7, then the November 2026 review). Each secret
disappears entirely; what is not a secret stays. Secrets of a known format are built at run time (see
tests/secret_corpus.py)."""

from __future__ import annotations

import base64
import json

import pytest

from redaction import redact
from tests.secret_corpus import B62, pem, rand

_AZURE = rand(B62 + "+/", 86) + "=="  # a storage account key: 64 bytes in base64
_PW = "Xq9vT2mLp4zR"
_TOKEN = "aB3dE5fG7hJ9kL0mN1pQ2rS3"
_KEY_B64 = base64.b64encode((pem("RSA PRIVATE KEY", 64, 1200) + "\n").encode()).decode()
_EC_KEY_B64 = base64.b64encode((pem("EC PRIVATE KEY", 64, 120) + "\n").encode()).decode()
_PEM = pem("PRIVATE KEY", 64, 600)
_DOCKER = "dckr" + "_pat_" + rand(B62 + "_-", 27)
_PEM_IN_JSON_IN_JSON = json.dumps({"GOOGLE_CREDENTIALS": json.dumps({"type": "service_account", "private_key": _PEM})})

LEAKS = [
    ("**password**: hunter2", "hunter2"),
    ("*password*: hunter2x", "hunter2x"),
    ("password: correct horse battery staple", "correct horse battery staple"),
    ("password=Tr0ub4dor&3xyz!", "Tr0ub4dor&3xyz!"),
    ("pwd=Tr0ub4dor#3xyz", "Tr0ub4dor#3xyz"),
    ("admin:s3cretPassw0rd@db.example.com", "s3cretPassw0rd"),
    ("connect with `admin:s3cretPassw0rd@db.example.com`", "s3cretPassw0rd"),
    # Azure storage and service bus keys (the November 2026 review).
    (f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={_AZURE};EndpointSuffix=core.windows.net", _AZURE),
    (f'AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=https;AccountKey={_AZURE}"', _AZURE),
    (f"Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={_AZURE}", _AZURE),
    (f"az storage blob upload --account-name acme --account-key {_AZURE} -f build.zip", _AZURE),
    (f"export AZURE_STORAGE_KEY={_AZURE}", _AZURE),
    # Assigned through a subscript or given to a setter (finding 4).
    (f'os.environ["DB_PASSWORD"] = "{_PW}"', _PW),
    (f"app.config['SECRET_KEY'] = '{_TOKEN}'", _TOKEN),
    (f"headers['X-Api-Key'] = '{_TOKEN}'", _TOKEN),
    (f'os.environ.setdefault("DB_PASSWORD", "{_PW}")', _PW),
    (f'password = os.getenv("DB_PASSWORD", "{_PW}")', _PW),
    # A private key in base64, as Kubernetes and kubeconfig hold it (finding 5).
    (f"data:\n  tls.crt: LS0tLS1CRUdJTiBDRVJU\n  tls.key: {_KEY_B64}\n", _KEY_B64),
    (f"users:\n- user:\n    client-key-data: {_KEY_B64[:400]}\n", _KEY_B64[:400]),
    (f"client-key-data: {_EC_KEY_B64}", _EC_KEY_B64),
    # Quoted values holding a backslash or an escaped quote (finding 6).
    ('DB_PASSWORD="Tr0ub\\dor&3xK9"', "Tr0ub\\dor&3xK9"),
    (json.dumps({"user": "app", "password": "Tr0ub\\dor&3xK9"}), "dor&3xK9"),
    (json.dumps({"password": 'Xq9"vT2mLp4zR'}), "vT2mLp4zR"),
    (json.dumps({"api_token": "aB3dE5fG7h\\J9kL0mN1pQ2rS3"}), "J9kL0mN1pQ2rS3"),
    # A key block escaped twice: JSON in a JSON string (finding 7).
    (_PEM_IN_JSON_IN_JSON, _PEM.splitlines()[5]),
    # Passwords on command lines and in credential files (finding 9).
    (f"mysql -u root -p'{_PW}' shop", _PW),
    (f"mysql -uroot -p{_PW} shop", _PW),
    (f"sshpass -p '{_PW}' ssh deploy@web1", _PW),
    (f"docker login -u me -p {_PW}", _PW),
    (f"echo {_DOCKER} | docker login -u me --password-stdin", _DOCKER),
    (f"machine example.com login me password {_PW}", _PW),
    (f"<server><id>nexus</id><username>me</username><password>{_PW}</password></server>", _PW),
]
KEPT = [
    "PWD=/home/me/project",
    "run `pwd`: it prints the folder",
    "Password: your password here",
    "the password: see the vault, row 3",
    "image: registry.example.com/app:1.2@sha256:0123abcd",
    "meet at 10:30@example.com",
    "First pass: build everything",
    # The November 2026 review: what looks like the new rules' secrets but is not one.
    "az storage account keys list --account-name acme --sort-key name",
    "--ssh-key ~/.ssh/id_rsa --key file.pem",
    'fields = ("password", "username")',
    'd["password"] = password',
    'x = os.environ.get("PASSWORD", "")',
    "tls.crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENCK3dJSkFKSw==",
    '<a href="mailto:support@example.com">Contact us</a> and [email us](mailto:hello@acme.io)',
    'resolved "https://registry.yarnpkg.com/@azure/core-auth/-/core-auth-1.5.0.tgz'
    '#82c5a7d3c2a6d4e3f1b0c9d8e7f6a5b4c3d2e1f0"',
    "Merge branch 'auth-fix' 9f8e7d6c5b4a39281706f5e4d3c2b1a098765432",
    "Party planning channel: xoxo-party-2024",
    "mysql -u root -p shop && mkdir -p build",
    "docker run -p 8080:80 nginx; docker login -u me -p $TOKEN",
    "sshpass -p $PASS ssh deploy@web1",
    "machine example.com login me password $PW",
    "<password>${env.NEXUS_PASSWORD}</password>",
]


@pytest.mark.parametrize(("text", "secret"), LEAKS)
def test_no_character_of_the_secret_survives(text, secret):
    redacted = redact(text).text
    assert "[redacted:" in redacted
    for piece in {secret, *secret.split(), secret[-6:]}:
        assert piece not in redacted, (text, redacted)


@pytest.mark.parametrize("text", KEPT)
def test_what_only_looks_like_a_secret_is_kept(text):
    assert redact(text).text == text
