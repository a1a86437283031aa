"""What this worker process did, counted: the exit summary's figures.

An attempt counts once its end is written (the completer), by that end's
state; a job handed back at shutdown counts as released (the shutdown). An
end the store refused (the lease was lost meanwhile) counts as discarded:
another worker will run the job.
"""

from __future__ import annotations

from dataclasses import dataclass

from due.core.jobs import JobState


@dataclass
class Tally:
    succeeded: int = 0
    failed: int = 0
    """Attempts that raised: retried later, or failed for good."""
    cancelled: int = 0
    waiting: int = 0
    """Parents that went on to wait for their pieces."""
    discarded: int = 0
    released: int = 0

    @property
    def ran(self) -> int:
        """Attempts that ran to an end this process wrote."""
        return self.succeeded + self.failed + self.cancelled + self.waiting

    def ended(self, state: JobState, written: bool) -> None:
        if not written:
            self.discarded += 1
        elif state is JobState.SUCCEEDED:
            self.succeeded += 1
        elif state is JobState.CANCELLED:
            self.cancelled += 1
        elif state is JobState.WAITING:
            self.waiting += 1
        else:
            self.failed += 1

    def summary(self) -> dict[str, int]:
        """The exit line's fields."""
        return {
            "ran": self.ran,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "released": self.released,
        }
