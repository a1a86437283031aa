"""Integrations with web frameworks, each behind its own extra (`due[django]`).

Nothing under `due.contrib` is imported by the rest of `due`: the core knows no
framework.
"""
