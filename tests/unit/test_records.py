"""Records that cross the store boundary refuse values that cannot work."""

from __future__ import annotations

import pytest

from due.core.records import UnknownTaskSweep


@pytest.mark.parametrize("scan", [0, -1])
def test_an_unknown_task_sweep_that_would_look_at_nothing_is_refused(scan: int) -> None:
    """With scan=0 a sweep reads nothing and says it stopped at the limit:
    every later sweep would start from nowhere and never read on."""
    with pytest.raises(ValueError, match="looks at 1 job or more"):
        UnknownTaskSweep(["default"], ["t"], 3600, scan=scan)
    assert UnknownTaskSweep(["default"], ["t"], 3600, scan=1).scan == 1
