"""Loaded by every Python process a docs page starts (the harness puts this
folder on PYTHONPATH): notes each Python file of the page's folder that the
process opens (imports or runs), so that the harness can tell that a file a
page writes (`# myapp.py`) was used by a later step, not only saved."""

import os
import sys

_PAGE_FOLDER = os.environ.get("DUE_DOCS_PAGE_FOLDER")


def _note_page_files(event: str, args: tuple[object, ...]) -> None:
    if event != "open" or not args or not isinstance(args[0], str):
        return
    path = os.path.abspath(args[0])
    if path.endswith(".py") and _PAGE_FOLDER and path.startswith(_PAGE_FOLDER + os.sep):
        with open(os.path.join(_PAGE_FOLDER, ".docs-files-run"), "a") as log:
            log.write(path + "\n")


if _PAGE_FOLDER:
    sys.addaudithook(_note_page_files)
