#!/usr/bin/env python
"""The test project's manage.py, as `django-admin startproject` writes it
(and DUE_TEST_START_METHOD: how `test --parallel` starts its processes, as
Python 3.14 on Linux (forkserver) or macOS (spawn) would)."""

import multiprocessing
import os
import sys

if __name__ == "__main__":
    if os.environ.get("DUE_TEST_START_METHOD"):
        multiprocessing.set_start_method(os.environ["DUE_TEST_START_METHOD"])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
