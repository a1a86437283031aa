"""A job's progress as the command shows it: reported by its handler, or its pieces."""

from __future__ import annotations

from due.core.jobs import Job


def progress_of(job: Job) -> tuple[float, float | None, str]:
    """(done, total, message) from a job's reported progress or its pieces."""
    if job.pieces is not None:
        message = f"{job.pieces.failed} failed" if job.pieces.failed else ""
        return float(job.pieces.ended), float(job.pieces.total), message
    progress = job.progress or {}
    total = progress.get("total")
    return (
        float(progress.get("done", 0)),
        float(total) if total is not None else None,
        str(progress.get("message", "")),
    )
