"""The forms probes and reviews found unredacted (finding 7, then the November 2026 reviews). Each secret
disappears entirely; what is not a secret stays. Secrets of a known format are built at run time (see
tests/secret_corpus.py)."""

from __future__ import annotations

import base64
import json

import pytest

from redaction import Redaction, redact
from tests.secret_corpus import B62, URL_SAFE, pem, rand

_AZURE = rand(B62 + "+/", 86) + "=="  # a storage account key: 64 bytes in base64
_PW = "Xq9vT2mLp4zR"
_TOKEN = "aB3dE5fG7hJ9kL0mN1pQ2rS3"
_KEY_B64 = base64.b64encode((pem("RSA PRIVATE KEY", 64, 1200) + "\n").encode()).decode()
_EC_KEY_B64 = base64.b64encode((pem("EC PRIVATE KEY", 64, 120) + "\n").encode()).decode()
_PEM = pem("PRIVATE KEY", 64, 600)
_DOCKER = "dckr" + "_pat_" + rand(B62 + "_-", 27)
_PEM_IN_JSON_IN_JSON = json.dumps({"GOOGLE_CREDENTIALS": json.dumps({"type": "service_account", "private_key": _PEM})})
_HEX = "0123456789abcdef"
_DD_KEY = rand(_HEX, 40)
_SAS = rand(B62, 38) + "%2B" + rand(B62, 4) + "%3D"  # an HMAC-SHA256 in base64, URL-encoded
_TELEGRAM = rand("0123456789", 10) + ":" + "AA" + rand(URL_SAFE, 33)
_DISCORD_ID = base64.urlsafe_b64encode(("1" + rand("0123456789", 18)).encode()).decode().rstrip("=")
_DISCORD = _DISCORD_ID + ".G" + rand(B62, 5) + ".k" + rand(B62, 37)  # its parts may start with a letter
_TERRAFORM = rand(B62, 14) + ".atlas" + "v1." + rand(URL_SAFE, 67)
_DOPPLER = "dp" + ".st.prd." + rand(B62, 43)
_MAPBOX = "sk" + ".eyJ1IjoiYWNtZSIsImEiOiJ" + rand(B62, 20) + "." + rand(B62, 22)
_VAULT_LEGACY = "s.X" + rand(B62, 23)
_TWILIO_SID = "S" + "K" + rand(_HEX, 32)
_TWILIO_AUTH = rand(_HEX, 32)
_MAILGUN = "key" + "-" + rand("abcdefghijklmnopqrstuvwxyz0123456789", 32)
_MAILGUN_PRIVATE = rand(_HEX, 32) + "-" + rand(_HEX, 8) + "-" + rand(_HEX, 8)
_ADO_PAT = rand("abcdefghijklmnopqrstuvwxyz234567", 52)
_NOTION = "ntn" + "_" + rand("0123456789", 11) + rand(B62, 35)
_NOTION_LEGACY = "secret" + "_" + rand(B62, 43)
_GOOGLE_ACCESS = "ya" + "29." + rand(URL_SAFE, 160)
_DOTENV_PW = "ab(c,d{ef}gh"

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
    # The second November 2026 review. 1: more `key` compounds, and Rails' `SECRET_KEY_BASE`.
    (f"DD_APP_KEY={_DD_KEY}", _DD_KEY),
    (f'curl -H "DD-APPLICATION-KEY: {_DD_KEY}" https://api.datadoghq.com/api/v1/validate', _DD_KEY),
    (f"APP_KEY=base64:{_AZURE[:43]}=", _AZURE[:43]),
    (f'curl -H "Ocp-Apim-Subscription-Key: {_DD_KEY[:32]}" https://westus.api.cognitive.microsoft.com/', _DD_KEY[:32]),
    (f'curl -H "x-functions-key: {_AZURE[:54]}==" https://acme.azurewebsites.net/api/ingest', _AZURE[:54]),
    (f"SUPABASE_SERVICE_KEY={_TOKEN}", _TOKEN),
    (f"SECRET_KEY_BASE={_DD_KEY * 3}", _DD_KEY),
    # 2: a dotted token after a credential name is not an attribute path; Doppler's `dp.st.<config>.`.
    (f"DOPPLER_TOKEN={_DOPPLER}", _DOPPLER),
    (f"doppler:\n  token: {_DOPPLER}\n", _DOPPLER),
    (f"MAPBOX_DOWNLOADS_TOKEN={_MAPBOX}", _MAPBOX),
    (f"export VAULT_TOKEN={_VAULT_LEGACY}", _VAULT_LEGACY),
    # 3: redis-cli.
    (f"redis-cli -h cache.internal -p 6379 -a {_PW} ping", _PW),
    (f"REDISCLI_AUTH={_PW} redis-cli -h cache.internal", _PW),
    # 4: Telegram bot tokens, bare and in the Bot API's URL.
    (f"curl https://api.telegram.org/bot{_TELEGRAM}/getUpdates", _TELEGRAM),
    (f'app = ApplicationBuilder().token("{_TELEGRAM}").build()', _TELEGRAM),
    # 5: Discord bot tokens, whole.
    (f'curl -H "Authorization: Bot {_DISCORD}" https://discord.com/api/v10/users/@me', _DISCORD),
    (f"DISCORD_TOKEN={_DISCORD}", _DISCORD),
    (f'client.run("{_DISCORD}")', _DISCORD),
    # 6: .npmrc `_auth`.
    (f"//npm.acme.io/:_auth={base64.b64encode(f'deploy:{_PW}'.encode()).decode()}\nalways-auth=true", "ZGVwbG95"),
    # 7: Java, Android and their tools.
    (f'props.setProperty("password", "{_PW}");', _PW),
    (f'dataSource.setPassword("{_PW}");', _PW),
    (f'release {{\n    storeFile file("release.jks")\n    storePassword "{_PW}"\n    keyPassword \'{_PW}\'\n}}', _PW),
    (f"keytool -genkeypair -keystore release.jks -alias upload -storepass {_PW} -keypass {_PW}", _PW),
    (f"openssl pkcs12 -export -in cert.pem -inkey key.pem -out bundle.p12 -passout pass:{_PW}", _PW),
    # 8: Azure shared access signatures.
    (f"https://acme.blob.core.windows.net/backups/db.bak?sv=2022-11-02&sp=r&se=2026-12-01T00:00:00Z&sig={_SAS}", _SAS),
    (f"SharedAccessSignature sr=acme.servicebus.windows.net&sig={_SAS}&se=1767225600&skn=send", _SAS),
    # 9: short password flags of database and cloud CLIs.
    (f"mongosh --host db.internal -u admin -p {_PW} --authenticationDatabase admin", _PW),
    (f"sqlcmd -S tcp:acme.database.windows.net,1433 -d app -U sa -P '{_PW}' -Q 'select 1'", _PW),
    (f"az login -u ops@acme.io -p '{_PW}'", _PW),
    # 10: Terraform Cloud tokens.
    (f"export TF_TOKEN_app_terraform_io={_TERRAFORM}", _TERRAFORM),
    (f"terraform cloud token saved: {_TERRAFORM}", _TERRAFORM),
    # The third review. 1: Twilio API key SIDs after `twilio` or an API key's name, and auth tokens.
    (f"TWILIO_API_KEY_SID={_TWILIO_SID}", _TWILIO_SID),
    (f"twilio_client = Client('{_TWILIO_SID}', api_key_secret, account_sid)", _TWILIO_SID),
    (f"TWILIO_AUTH_TOKEN={_TWILIO_AUTH}", _TWILIO_AUTH),
    # 2: the password of Mailgun's `("api", …)` auth tuple.
    (f'requests.post(url, auth=("api", "{_MAILGUN}"), data=form)', _MAILGUN),
    (f"requests.get(url, auth=('api', '{_MAILGUN_PRIVATE}'))", _MAILGUN_PRIVATE),
    # 3: .pgpass lines, bare and in a transcript line.
    ("db.example.com:5432:app:app_user:S3cr3tP4ss", "S3cr3tP4ss"),
    (f"*:*:*:postgres:{_PW}\n", _PW),
    (json.dumps({"content": f"cat ~/.pgpass\n10.0.3.7:6432:analytics:report:{_PW}"}), _PW),
    # 4: personal access tokens: Azure DevOps' and any name ending `_PAT`.
    (f"AZURE_DEVOPS_EXT_PAT={_ADO_PAT}", _ADO_PAT),
    (f"env:\n  GH_PAT: {_TOKEN}\n", _TOKEN),
    # 5: Notion tokens; the older `secret_` form after `notion`.
    (f"use {_NOTION} for the workspace", _NOTION),
    (f"notion integration: {_NOTION_LEGACY}", _NOTION_LEGACY),
    # 6: Google OAuth access tokens.
    (f"$ gcloud auth print-access-token\n{_GOOGLE_ACCESS}\n", _GOOGLE_ACCESS),
    # 7: names ending `_PW` and `_PWD`.
    ("ADMIN_PW=hunter2long", "hunter2long"),
    ("DB_PWD: hunter2long", "hunter2long"),
    # 8: a `.env` value runs to the end of its line, whatever it holds.
    (f"DB_PASSWORD={_DOTENV_PW}", _DOTENV_PW),
    (f"export DB_PASSWORD={_DOTENV_PW}  # rotated", _DOTENV_PW),
    (f"environment:\n  - DB_PASSWORD={_DOTENV_PW}\n", _DOTENV_PW),
    (json.dumps({"content": f"DEBUG=1\nDB_PASSWORD={_DOTENV_PW}\nPORT=80"}), _DOTENV_PW),
    (f"API_TOKEN={_TOKEN[:10]},{_TOKEN[10:]}", _TOKEN[10:]),
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
    # The second November 2026 review.
    "DD_APP_KEY=${DD_APP_KEY}",
    "app_key = settings.app_key",
    "Ocp-Apim-Subscription-Key: <your-key>",
    "SECRET_KEY_BASE=$(rails secret)",
    "token: self.config.token",
    "api_key = config.openai.api_key",
    "TFE_TOKEN=xxxxxxxxxxxxx.atlasv1.xxxxxxxxxxxxx",
    "redis-cli -a $REDIS_PASSWORD ping",
    "REDISCLI_AUTH=${REDIS_PASSWORD}",
    "sha 12345:" + "A" * 35,
    "N" + "a" * 23 + ".abcdef." + "b" * 30,
    "Mozilla.Firefox.ProfileManager.Session.ChunkedStorageStore",
    "requires_auth=True",
    "_auth=${NPM_AUTH}",
    "mongosh -p 27017",
    "mongosh -u admin -p --authenticationDatabase admin",
    "sqlcmd -S srv -p -U sa -Q 'select 1'",
    "az login --service-principal -u $APP_ID -p $PASSWORD --tenant $TENANT",
    "ds.setPassword(password);",
    "self.setPassword(getpass())",
    'props.setProperty("password", password);',
    'storePassword System.getenv("STORE_PASSWORD")',
    "keytool -storepass:env STOREPASS -keypass:file kp.txt",
    "keytool -list -keystore debug.keystore -storepass android",
    "openssl rsa -passin env:PASSPHRASE -in key.pem",
    "openssl rsa -passin pass:$PW -in key.pem",
    "openssl genpkey -algorithm RSA -out key.pem -aes-128-cbc -pass pass:hello",
    "https://example.com/img.png?w=200&sig=abcdef and &sig=${SAS_SIG}",
    # The third review.
    f"object {_TWILIO_SID} was rebuilt",
    'requests.post(url, auth=("api", MAILGUN_API_KEY)) and auth=("api", "YOUR_API_KEY")',
    "root:*:19000:0:99999:7:::",
    "12:30:45:67:890",
    "db.example.com:web:app:app_user:S3cr3tP4ss",
    "db.example.com:5432:app:app_user:${PGPASSWORD}",
    "see db.example.com:5432:app:app_user:S3cr3tP4ss for the format",
    'URL_PAT = "[A-Za-z0-9]+://[^ ]+"',
    'NAME_PAT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")',
    f"secret_{_NOTION_LEGACY[7:]} without its issuer",
    "ya29.a0AfH6SMBx",
    "hash_pw = bcrypt.hashpw(pw, salt)",
    "PW=hunter2long",
    "password=getpass()",
    'SECRET_KEY=os.environ.get("SECRET_KEY")',
    "    password=password,\n    token=tokens[0],\n    secret_key=get_secret(name),\n    password=db_pass)",
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


@pytest.mark.parametrize("token", [_TELEGRAM, _DISCORD, _TERRAFORM, _DOPPLER], ids=["telegram", "discord", "tfc", "dp"])
def test_a_token_known_by_its_shape_is_replaced_whole_by_one_marker(token):
    assert redact(f"saved {token} here") == Redaction("saved [redacted:api-token] here", {"api-token": 1})
