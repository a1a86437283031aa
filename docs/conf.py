"""The documentation site: Sphinx, the Furo theme, pages in MyST Markdown.

Built by `make docs`, strictly: any warning fails the build, and so does a
cross-reference that does not resolve (nitpicky). The reference is generated
from the code: the API from its docstrings (autodoc, Google style through
napoleon), the `due` command from click itself (sphinx-click). Nothing is
fetched: no intersphinx, so the build needs no network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from due import __version__

DOCS = Path(__file__).resolve().parent

project = "due"
author = "the due developers"
copyright = "the due developers"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_click",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# --- strictness -----------------------------------------------------------------

nitpicky = True
# Types from outside due that autodoc names in signatures and that no page of
# this site documents (there is no intersphinx: the build stays offline). Each
# one listed by name, so that a name of due's own that fails to resolve still
# fails the build.
_EXTERNAL_TYPES = [
    "datetime",
    "datetime.datetime",
    "datetime.timedelta",
    "collections.abc.Awaitable",
    "collections.abc.Callable",
    "collections.abc.Iterable",
    "collections.abc.Iterator",
    "collections.abc.Mapping",
    "collections.abc.Sequence",
    "concurrent.futures.Future",
    "logging.Logger",
    "random.Random",
    "enum.Enum",
    "enum.IntEnum",
    "enum.StrEnum",
    "starlette.applications.Starlette",
]
nitpick_ignore = [("py:class", name) for name in _EXTERNAL_TYPES]
# The type variables of Task[P, R] (the function's parameters and result).
nitpick_ignore += [
    ("py:class", "P"),
    ("py:class", "~P"),
    ("py:obj", "typing.~P"),
    ("py:obj", "due.task.P"),
    ("py:obj", "due.task.R"),
    ("py:class", "due.task.R"),
    ("py:class", "due.app.R"),
]

# --- Markdown ---------------------------------------------------------------------

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [a section](page.md#its-title) links resolve, and are checked

# --- the API reference --------------------------------------------------------------

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_default_options: dict[str, Any] = {"members": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# `name` in a docstring is code, as on the Markdown pages (not italics).
default_role = "code"

# --- HTML -----------------------------------------------------------------------------

html_theme = "furo"
html_title = f"due {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
