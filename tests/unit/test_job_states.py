from due.core.jobs import FINAL_STATES, TRANSITIONS, JobState, can_transition


def test_every_state_has_a_row_in_the_transition_table() -> None:
    assert set(TRANSITIONS) == set(JobState)


def test_final_states() -> None:
    assert {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED} == FINAL_STATES
    assert not can_transition(JobState.SUCCEEDED, JobState.QUEUED)
    assert can_transition(JobState.FAILED, JobState.QUEUED)
    assert can_transition(JobState.RUNNING, JobState.QUEUED)  # retry or rescue
    assert not can_transition(JobState.QUEUED, JobState.SUCCEEDED)
    assert can_transition(JobState.QUEUED, JobState.FAILED)  # no live worker knows its task
    assert not can_transition(JobState.WAITING, JobState.QUEUED)  # a parent is never retried
