"""Runs a page's ```python blocks, one after the other, in one namespace: a
later block uses what an earlier one defined, as a reader's session would.

Started by the harness in the page's folder (`python python_session.py`). It
reads one request a line from stdin (JSON: the block's code, the page and
line it comes from, the files the page has rewritten since) and writes one
reply a line to the file descriptor $DUE_DOCS_RESULT_FD: what the block
printed, and the exception it raised, if any. What the block prints goes to
the reply only; anything written to the real stdout and stderr (logs, child
processes) goes to the session's log, which the harness shows on a failure.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def main() -> None:
    replies = os.fdopen(int(os.environ["DUE_DOCS_RESULT_FD"]), "w")
    # As for `python script.py` run in the page's folder: its modules import.
    sys.path[0] = os.getcwd()
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for line in sys.stdin:
        request = json.loads(line)
        _forget(request.get("rewritten", []))
        replies.write(json.dumps(_run(request, namespace)) + "\n")
        replies.flush()


def _forget(paths: list[str]) -> None:
    """A module whose file the page rewrote is imported afresh next time."""
    rewritten = {str(Path(path).resolve()) for path in paths}
    for name, module in list(sys.modules.items()):
        location = getattr(module, "__file__", None)
        if location and str(Path(location).resolve()) in rewritten:
            del sys.modules[name]
    importlib.invalidate_caches()


def _run(request: dict[str, Any], namespace: dict[str, Any]) -> dict[str, Any]:
    # Blank lines before the code: a traceback names the page's own line numbers.
    source = "\n" * (request["line"] - 1) + request["code"]
    printed = io.StringIO()
    reply: dict[str, Any] = {"stdout": "", "traceback": None, "exception": None}
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(source, request["page"], "exec"), namespace)
    except BaseException as error:  # the page's own error, SystemExit included
        reply["traceback"] = "".join(traceback.format_exception(error))
        reply["exception"] = traceback.format_exception_only(error)[-1].strip()
    reply["stdout"] = printed.getvalue()
    return reply


if __name__ == "__main__":
    main()
