"""The Django page's `include("due.contrib.django.urls")` without the web extra's
packages: Django's error names the extra to install, not a bare
`No module named 'starlette'`. (A module set to None in sys.modules is one
Python will not import: the package is missing, as far as the project sees.)"""

from __future__ import annotations

import subprocess
import sys

from tests.contrib_django.conftest import PROJECT, project_env

WITHOUT_STARLETTE = """
import sys
sys.modules["starlette"] = None
import django
django.setup()
from django.urls import include
try:
    include("due.contrib.django.urls")
except Exception as error:
    print(type(error).__name__, error)
"""


def test_without_the_web_extra_the_error_says_which_extra_to_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_STARLETTE],
        cwd=PROJECT,
        env=project_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "ImproperlyConfigured due's dashboard needs due's web extra (starlette is missing): "
        "pip install 'due[django,web]'"
    )
