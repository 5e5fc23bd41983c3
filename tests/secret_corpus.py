"""The secrets corpus shared by the redaction tests and the transcript upload tests: realistic planted secrets
(each with the kinds the redactor must report) and look-alikes that must survive untouched.

Every fake secret is built at run time from a seeded generator and split prefixes, so no format-correct token
is ever committed as a literal (secret scanners would flag it, and none of these is real).
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass

RNG = random.Random(20240611)
B62 = string.ascii_letters + string.digits
URL_SAFE = B62 + "_-"
UPPER_DIGITS = string.ascii_uppercase + string.digits


def rand(alphabet: str, size: int) -> str:
    """Random characters that mix upper case, lower case and digits whenever the alphabet allows it."""
    while True:
        text = "".join(RNG.choice(alphabet) for _ in range(size))
        wanted = [cls for cls in (str.isupper, str.islower, str.isdigit) if any(map(cls, alphabet))]
        if all(any(cls(c) for c in text) for cls in wanted):
            return text


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def pem(label: str, line: int, size: int, *, headers: str = "", end: bool = True) -> str:
    body = b64(RNG.randbytes(size))
    lines = [f"-----BEGIN {label}-----", *([headers] if headers else []), *_chunks(body, line)]
    return "\n".join(lines + ([f"-----END {label}-----"] if end else []))


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def body_lines(block: str) -> tuple[str, ...]:
    """The lines between a key block's BEGIN and END lines: all of them are the secret."""
    return tuple(line for line in block.splitlines()[1:-1] if line)


def jwt() -> str:
    def part(document: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")

    signature = base64.urlsafe_b64encode(RNG.randbytes(32)).decode().rstrip("=")
    return ".".join([part({"alg": "HS256", "typ": "JWT"}), part({"sub": rand(B62, 12), "exp": 1900000000}), signature])


def password() -> str:
    return "S" + rand(B62, 13) + "!9"


@dataclass(frozen=True)
class Planted:
    """A text with secrets in it, the secrets, and how many of each kind the redactor must report."""

    name: str
    text: str
    secrets: tuple[str, ...]
    kinds: dict[str, int]


def planted_corpus() -> list[Planted]:
    s = {
        "pw1": password(),
        "pw2": password(),
        "pw3": password(),
        "stripe": "sk" + "_live_" + rand(B62, 24),
        "openai": "sk-" + "proj-" + rand(URL_SAFE, 120),
        "openai_legacy": "sk-" + rand(B62, 48),
        "anthropic": "sk-" + "ant-api03-" + rand(URL_SAFE, 93) + "AA",
        "akia": "AK" + "IA" + rand(UPPER_DIGITS, 16),
        "aws_secret": rand(B62 + "+/", 40),
        "ghp": "gh" + "p_" + rand(B62, 36),
        "ghs": "gh" + "s_" + rand(B62, 36),
        "github_pat": "github" + "_pat_" + rand(B62, 22) + "_" + rand(B62, 59),
        "hf": "hf" + "_" + rand(string.ascii_letters, 34),
        "bearer": rand(B62, 40),
        "basic": b64(b"deploy:" + password().encode()),
        "webhook": "https://hooks.slack.com/services/T"
        + rand(UPPER_DIGITS, 8)
        + "/B"
        + rand(UPPER_DIGITS, 10)
        + "/"
        + rand(B62, 24),
        "voyage": "pa" + "-" + rand(URL_SAFE, 43),
        "sendgrid": "SG" + "." + rand(URL_SAFE, 22) + "." + rand(URL_SAFE, 43),
        "npm": "npm" + "_" + rand(B62, 36),
        "google": "AI" + "za" + rand(URL_SAFE, 35),
        "client_secret": rand(B62, 32),
        "glpat": "gl" + "pat-" + rand(URL_SAFE, 20),
        "xoxb": "xo" + "xb-" + rand(string.digits, 12) + "-" + rand(string.digits, 13) + "-" + rand(B62, 24),
        "session": rand(B62, 48),
        "pypi": "pypi-" + "AgEIcHlwaS5vcmc" + rand(URL_SAFE, 150),
        "jwt": jwt(),
        "hex": rand("0123456789abcdef", 40),
        "ssh": pem("OPENSSH PRIVATE KEY", 70, 400),
        "rsa": pem(
            "RSA PRIVATE KEY",
            64,
            600,
            headers="Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC," + rand("0123456789ABCDEF", 32) + "\n",
        ),
        "memory_key": b64(RNG.randbytes(64)),
        "restricted": "rk" + "_test_" + rand(B62, 24),
        "whsec": "whsec" + "_" + rand(B62, 32),
        "xoxp": "xo" + "xp-" + "-".join(rand(string.digits, 12) for _ in range(3)) + "-" + rand("0123456789abcdef", 32),
        "svcacct": "sk-" + "svcacct-" + rand(URL_SAFE, 80),
        "gho": "gh" + "o_" + rand(B62, 36),
    }
    truncated = pem("RSA PRIVATE KEY", 64, 300, end=False)
    hex_ = "0123456789abcdef"
    s |= {
        "twilio_sid": "S" + "K" + rand(hex_, 32),
        "twilio_auth": rand(hex_, 32),
        "ado_pat": rand("abcdefghijklmnopqrstuvwxyz234567", 52),
        "notion": "ntn" + "_" + rand(string.digits, 11) + rand(B62, 35),
        "dotenv_pw": rand(B62, 6) + "(" + rand(B62, 3) + ",{" + rand(B62, 4) + "}" + rand(B62, 3),
        "mailgun": "key" + "-" + rand(string.ascii_lowercase + string.digits, 32),
        "google_access": "ya" + "29." + rand(URL_SAFE, 180),
    }
    return [
        Planted(
            "dotenv",
            "# production\nDATABASE_URL=postgres://app:{pw1}@db.internal:5432/app\nSTRIPE_SECRET_KEY={stripe}\n"
            "OPENAI_API_KEY={openai}\nANTHROPIC_API_KEY={anthropic}\nDB_PASSWORD={pw2}\nDEBUG=false\n".format(**s),
            (s["pw1"], s["stripe"], s["openai"], s["anthropic"], s["pw2"]),
            {"url-password": 1, "stripe-key": 1, "openai-key": 1, "anthropic-key": 1, "password": 1},
        ),
        Planted(
            "shell history",
            "export AWS_ACCESS_KEY_ID={akia}\nexport AWS_SECRET_ACCESS_KEY={aws_secret}\n"
            "export GITHUB_TOKEN={ghp}\nexport HF_TOKEN={hf}\nPGPASSWORD={pw1} psql -h db -U app\n"
            "mysql --user=root --password {pw2} -h db\ngit push origin main\n".format(**s),
            (s["akia"], s["aws_secret"], s["ghp"], s["hf"], s["pw1"], s["pw2"]),
            {"aws-key": 1, "aws-secret": 1, "github-token": 1, "huggingface-token": 1, "password": 2},
        ),
        Planted(
            "curl commands",
            'curl -H "Authorization: Bearer {bearer}" https://api.example.com/v1/items\n'
            "curl -H 'Authorization: Basic {basic}' https://intranet.example.com/\n"
            "curl -sS -u deploy:{pw1} https://ci.example.com/job/build\n"
            'curl -X POST {webhook} -d \'{{"text": "deployed"}}\'\n'
            'curl https://api.voyageai.com/v1/embeddings -H "Authorization: Bearer {voyage}"\n'.format(**s),
            (s["bearer"], s["basic"], s["pw1"], s["webhook"], s["voyage"]),
            {"bearer-token": 1, "basic-auth": 1, "password": 1, "slack-webhook": 1, "voyage-key": 1},
        ),
        Planted(
            "json config",
            json.dumps(
                {
                    "sendgrid": {"apiKey": s["sendgrid"]},
                    "npmToken": s["npm"],
                    "google": {"api_key": s["google"]},
                    "db": {"user": "app", "password": s["pw1"]},
                    "oauth": {"client_id": "web-frontend", "client_secret": s["client_secret"]},
                },
                indent=2,
            ),
            (s["sendgrid"], s["npm"], s["google"], s["pw1"], s["client_secret"]),
            {"sendgrid-key": 1, "npm-token": 1, "google-api-key": 1, "password": 1, "secret": 1},
        ),
        Planted(
            "compose yaml",
            "services:\n  db:\n    environment:\n      POSTGRES_PASSWORD: {pw1}\n  app:\n    environment:\n"
            "      GITLAB_TOKEN: {glpat}\n      SLACK_BOT_TOKEN: '{xoxb}'\n      SESSION_SECRET: \"{session}\"\n"
            "    smtp:\n      passwd: {pw2}  # rotated by ops\n".format(**s),
            (s["pw1"], s["glpat"], s["xoxb"], s["session"], s["pw2"]),
            {"password": 2, "gitlab-token": 1, "slack-token": 1, "secret": 1},
        ),
        Planted(
            "python code",
            'client = OpenAI(api_key="{openai_legacy}")\nheaders = {{"Authorization": "Bearer {jwt}"}}\n'
            'PYPI_TOKEN = "{pypi}"\nconn = psycopg.connect(host="db", password="{pw1}")\n'.format(**s),
            (s["openai_legacy"], s["jwt"], s["pypi"], s["pw1"]),
            {"openai-key": 1, "jwt": 1, "pypi-token": 1, "password": 1},
        ),
        Planted(
            "more issuers, one per line",
            "STRIPE_RESTRICTED_KEY={restricted}\nSTRIPE_WEBHOOK_SECRET={whsec}\nSLACK_USER_TOKEN={xoxp}\n"
            "$ openai keys list --service-account\n{svcacct}\n$ gh auth token\n{gho}\n".format(**s),
            (s["restricted"], s["whsec"], s["xoxp"], s["svcacct"], s["gho"]),
            {"stripe-key": 2, "slack-token": 1, "openai-key": 1, "github-token": 1},
        ),
        Planted(
            "stack trace with a DSN",
            'Traceback (most recent call last):\n  File "/app/db.py", line 12, in connect\n'
            "    engine = create_engine(url)\nsqlalchemy.exc.OperationalError: (psycopg2.OperationalError) "
            "connection to server failed\n(Background on this error at: https://sqlalche.me/e/20/e3q8)\n"
            "url = 'postgresql+psycopg2://reporting:{pw1}@10.0.3.7:5432/analytics'\n".format(**s),
            (s["pw1"],),
            {"url-password": 1},
        ),
        Planted(
            "git remotes with tokens",
            "$ git remote -v\norigin\thttps://x-access-token:{ghs}@github.com/acme/api.git (fetch)\n"
            "mirror\thttps://oauth2:{glpat}@gitlab.com/acme/api.git (push)\n"
            "backup\thttps://{github_pat}@github.com/acme/api.git (fetch)\n"
            "upstream\thttps://deploy:{pw1}@git.example.com/acme/api.git (fetch)\n".format(**s),
            (s["ghs"], s["glpat"], s["github_pat"], s["pw1"]),
            {"github-token": 2, "gitlab-token": 1, "url-password": 1},
        ),
        Planted(
            "ssh key pasted into a chat",
            "Can you check why ssh rejects this key?\n\n```\n{ssh}\n```\n\nThanks!\n".format(**s),
            body_lines(s["ssh"]),
            {"private-key": 1},
        ),
        Planted(
            "encrypted pem and this project's key file",
            "{rsa}\n\n$ cat ~/.config/memory/laptop.key\nmemory-ed25519-private {memory_key} laptop\n".format(**s),
            (*body_lines(s["rsa"]), s["memory_key"]),
            {"private-key": 2},
        ),
        Planted(
            "key quoted in markdown",
            "## Incident\n\n> " + s["ssh"].replace("\n", "\n> ") + "\n\n- rotate it\n- **today**\n",
            body_lines(s["ssh"]),
            {"private-key": 1},
        ),
        Planted(
            "truncated key inside a transcript line",
            json.dumps({"type": "user", "content": "it fails with this key:\n" + truncated}) + "\n",
            body_lines(truncated + "\n-----END"),
            {"private-key": 1},
        ),
        Planted(
            "tokens in prose and headers",
            "Set-Cookie: session={jwt}; HttpOnly\nThe staging token is {session} for now.\n"
            'my api key: {hex} (rotate it)\n\\"X-Api-Key\\": \\"{client_secret}\\"\n'.format(**s),
            (s["jwt"], s["session"], s["hex"], s["client_secret"]),
            {"jwt": 1, "secret": 3},
        ),
        Planted(
            "service credentials of the third review",
            "# .env\nTWILIO_API_KEY_SID={twilio_sid}\nTWILIO_AUTH_TOKEN={twilio_auth}\nAZURE_DEVOPS_EXT_PAT={ado_pat}\n"
            "NOTION_TOKEN={notion}\nADMIN_PW={pw1}\nDB_PASSWORD={dotenv_pw}\n\n# ~/.pgpass\n"
            "db.internal:5432:app:app_user:{pw2}\n\n"
            'requests.post(url, auth=("api", "{mailgun}"), data=form)\n'
            'creds = {{"access_token": "{google_access}", "expires_in": 3599}}\n'.format(**s),
            (
                s["twilio_sid"],
                s["twilio_auth"],
                s["ado_pat"],
                s["notion"],
                s["pw1"],
                s["dotenv_pw"],
                s["pw2"],
                s["mailgun"],
                s["google_access"],
            ),
            {"api-token": 3, "secret": 3, "password": 3},
        ),
    ]


PLANTED = planted_corpus()


def hexes(size: int) -> str:
    return "".join(RNG.choice("0123456789abcdef") for _ in range(size))


LOOK_ALIKES = [
    # Hashes, checksums and identifiers outside a credential context.
    f"commit {hexes(40)}\nAuthor: Dev <dev@example.com>",
    f"sha256 {hexes(64)}  dist/app.tar.gz",
    f"content_hash: {hexes(64)}",
    f'{{"path": "notes/a.md", "hash": "{hexes(64)}"}}',
    f"token refresh fixed in commit {hexes(40)}",
    '"node_modules/@octokit/auth-token": {\n  "version": "4.0.0",\n'
    '  "resolved": "https://registry.npmjs.org/@octokit/auth-token/-/auth-token-4.0.0.tgz",\n'
    f'  "integrity": "sha512-{b64(RNG.randbytes(64))}"\n}}',
    '{"resolved":"https://registry.npmjs.org/@octokit/auth-token/-/auth-token-4.0.0.tgz",'
    f'"integrity":"sha512-{b64(RNG.randbytes(64))}"}}',
    "sessionId: 123e4567-e89b-12d3-a456-426614174000",
    '{"requestId": "req_011CRf8Y2ePpmvTq9pbeGSnm", "uuid": "9b2f6f0e-6b1a-4c55-a8a4-0c4a8a4b2f51"}',
    "X-Request-Id: 3f1c2b9e-7d4a-4e8b-9a6c-2d1f0e9b8a7c",
    '"source": {"data": "data:image/png;base64,iVBORw0KGgo' + b64(RNG.randbytes(6000)) + '"}',
    '"signature": "' + b64(RNG.randbytes(300)) + '"',
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + b64(RNG.randbytes(30)) + " dev@laptop",
    "memory-ed25519 " + b64(RNG.randbytes(32)) + " laptop",
    pem("PUBLIC KEY", 64, 270),
    "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n",
    # Names that contain a credential word without holding a credential.
    "max_tokens = 254",
    '"usage": {"input_tokens": 1200, "output_tokens": 40, "cache_read_input_tokens": 5000}',
    "token_count = 5",
    "tokenizer = WordPieceTokenizer.default()",
    "password_hash_rounds = 12",
    'SECRET_KEY = os.environ["SECRET_KEY"]',
    "password = getpass.getpass()",
    "api_key = settings.api_key",
    "token = None",
    "password: ${DB_PASSWORD}",
    'password = "<your password here>"',
    'api_key: "YOUR_API_KEY"',
    'password = "changeme"',
    '"password": "Password"',
    "connect(user=user, password=password, token=self.token)",
    "def login(password: str, token: Hashable | None = None) -> None:",
    "self._dep_token: ProxyValue | None = None",
    'fetch(url, {credentials: "include"})',
    "token_type: bearer",
    "PWD=/home/dev/project",
    "# First pass: build the index, second pass: compress it",
    ":param password: user provided password",
    "from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey as _X25519PrivateKey",
    "self.token2wav = Qwen2_5OmniToken2WavModel(self.config.token2wav_config)",
    "    entity_mask2_token=entity_mask2_token,\n    private_key: PKCS7PrivateKeyTypes,",
    '"""Single-pass: recursively build a context while collecting tensors."""',
    'curl -H "Authorization: Bearer $TOKEN" -H "Authorization: Bearer ${API_TOKEN}" https://api.example.com',
    # Prose.
    "The password is rotated weekly.",
    "Token refresh happens every hour.",
    "Use a Bearer token in the header, or Basic authentication for the intranet.",
    "Secrets live in the vault; the API key is read from the environment.",
    # Code and words that merely start like a token.
    "pip install scikit-learn sk-learn-contrib-imbalanced-learn",
    "pa-ssword and pa-rent are not keys",
    "AKIA is a prefix; AKIA1234 is too short",
    "a bare ghp_ prefix, sk_live_ too, and xoxb- alone",
    # URLs without a password.
    "https://user@host.example.com/path",
    "postgres://localhost:5432/db",
    "http://[::1]:8080/health and https://example.com:443/a:b@c",
    "http://localhost:3000/api?email=dev@example.com and https://example.com:8443/users/@alice",
    "file://C:/Users/me@home/notes.md",
    "postgres://user:password@localhost/db and redis://:${REDIS_PASSWORD}@cache:6379",
    # Near-misses of the rules added after the second November 2026 review.
    "mongosh -u admin -p --authenticationDatabase admin",
    'ds.setPassword(password);\nstorePassword System.getenv("STORE_PASSWORD")',
    "keytool -list -keystore debug.keystore -storepass android",
    "openssl rsa -passin env:PASSPHRASE -in key.pem",
    "token: self.config.token",
    "sha 12345:" + "A" * 35,
    # Near-misses of the rules added after the third review.
    f"object SK{hexes(32)} was rebuilt",
    "root:*:19000:0:99999:7:::",
    'URL_PAT = "[A-Za-z0-9]+://[^ ]+"\npassword=getpass()\nrequests.post(url, auth=("api", MAILGUN_API_KEY))',
    # Markers are not redacted again.
    "password=[redacted:password]",
    "Authorization: Bearer [redacted:bearer-token]",
    "postgres://app:[redacted:url-password]@db/app and [redacted:private-key]",
]
