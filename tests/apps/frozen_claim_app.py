"""Two apps for the test of a worker frozen in the middle of its claim
(tests/process/test_limit_faults.py): `frozen` knows only the task whose
claim is frozen; `steady` knows the others, so that each worker claims only
its own jobs, whatever the keys they share. Both declare the same limit.
"""

from __future__ import annotations

import os
import time

import due

LEDGER = os.environ.get("DUE_TEST_LEDGER", "/dev/null")

frozen = due.App()  # DUE_DATABASE_URL
steady = due.App()

for app in (frozen, steady):
    app.limit("acct", concurrency=1)  # per account


def by_account(account: str, seconds: float = 0.0) -> str:
    return account


@frozen.task(name="frozen_sync", queue="limited", limits={"acct": by_account})
def frozen_sync(account: str, seconds: float = 0.0) -> None:
    time.sleep(seconds)


@steady.task(name="sync_account", queue="limited", limits={"acct": by_account})
def sync_account(account: str, seconds: float = 0.0) -> None:
    time.sleep(seconds)


@steady.task(name="quick", queue="limited")
def quick(n: int) -> None:
    pass


@steady.task(name="elsewhere", queue="other")
def elsewhere(n: int) -> None:
    pass
