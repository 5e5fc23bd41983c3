"""The page the browser is told to open: a private file that leads on to the printed URL.

A browser is started with the address it opens on its command line, which every local user can read
(`/proc/<pid>/cmdline`) for as long as it runs; the URL's token is this run's password. So the browser is given
`file://` of a file only this user can read (0600, in a 0700 folder), whose content redirects to the URL, as
Jupyter does. The file goes when the run ends.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

PAGE_NAME: Final = "open.html"
FOLDER_PREFIX: Final = "ui-"


def redirect_page(url: str) -> str:
    """HTML that replaces itself with `url` (a meta refresh, and script for browsers that ignore it), with a link
    for a browser that does neither."""
    attribute = html.escape(url, quote=True)
    script = json.dumps(url).replace("<", "\\u003c")  # no `</script>` can end the script early
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8">\n'
        f'<meta http-equiv="refresh" content="0; url={attribute}">\n'
        "<title>memory browser</title></head>\n"
        f"<body><script>location.replace({script});</script>\n"
        f'<p><a href="{attribute}">Open the memory browser</a></p></body></html>\n'
    )


@contextmanager
def redirect_file(url: str, home: Path) -> Iterator[Path]:
    """A private file under `home` (made 0700 if new) whose page leads to `url`; removed on leaving."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=home))  # 0700, a new name, this user's
    try:
        target = folder / PAGE_NAME
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as page:
            page.write(redirect_page(url))
        yield target
    finally:
        shutil.rmtree(folder, ignore_errors=True)
