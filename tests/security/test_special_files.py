"""Finding 10 and a smaller one: a FIFO (or other special file) named as a key or config file is refused at once,
never waited on; an API key file that others may read is refused like a private key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from server.index.embeddings.select import read_secret
from server.index.errors import InvalidArgumentError

REPO = Path(__file__).resolve().parents[2]

# Each program reads one file named by argv[1] and prints the error class and message; a hang is the bug.
READERS = {
    "private key": "from channel.keys import read_private_key as read\n",
    "proxy config": "from client_proxy.config import ProxyConfig\nread = lambda p: ProxyConfig.load(p.parent)\n",
    "api key file": (
        "from server.index.embeddings.select import read_secret_file\n"
        "read = lambda p: read_secret_file('OPENAI_API_KEY', str(p))\n"
    ),
}
RUN = """import sys
from pathlib import Path
try:
    read(Path(sys.argv[1]))
except Exception as exc:
    print(type(exc).__name__, exc)
"""


@pytest.mark.parametrize("what", sorted(READERS))
def test_a_fifo_as_key_or_config_file_is_refused_at_once(tmp_path, what):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    fifo = home / ("proxy.toml" if what == "proxy config" else "device.key")
    os.mkfifo(fifo, 0o600)
    try:
        done = subprocess.run(
            [sys.executable, "-c", READERS[what] + RUN, str(fifo)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,  # the old code blocks in open() until a writer appears: forever
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading a FIFO as the {what} hung")
    assert "not a regular file" in done.stdout, done.stdout + done.stderr


def test_dev_null_as_an_api_key_file_means_no_key():
    assert read_secret({"VOYAGE_API_KEY_FILE": os.devnull}, "VOYAGE_API_KEY") is None


def test_an_api_key_file_readable_by_others_is_refused_without_showing_the_key(tmp_path):
    path = tmp_path / "openai.key"
    path.write_text("sk-proj-abcdefghijklmnop1234\n")
    path.chmod(0o644)
    with pytest.raises(InvalidArgumentError, match="lets other users read the key; run: chmod 600") as refused:
        read_secret({"OPENAI_API_KEY_FILE": str(path)}, "OPENAI_API_KEY")
    assert "abcdefghijklmnop" not in str(refused.value)
    path.chmod(0o600)
    assert read_secret({"OPENAI_API_KEY_FILE": str(path)}, "OPENAI_API_KEY") == "sk-proj-abcdefghijklmnop1234"
