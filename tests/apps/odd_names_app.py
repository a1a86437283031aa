"""Tasks whose names hold quotes, semicolons and unicode (the chaos suite's bad input)."""

from __future__ import annotations

import due

app = due.App(max_payload_bytes=4096)  # DUE_DATABASE_URL

QUOTED = "it's; DROP TABLE due_jobs; --"
UNICODE = "ünïcødé ✓ 日本"


@app.task(name=QUOTED, queue="odd:names.1")
def quoted(text: str) -> str:
    return text


@app.task(name=UNICODE, queue="odd:names.1")
def unicode_named(text: str) -> str:
    return text[::-1]


@app.task(name="echo", queue="odd:names.1")
def echo(blob: str) -> int:
    return len(blob)
