# Adapted from Django's tests/tasks/tasks.py (Django 6.1.3), under Django's licence:
#
# Copyright (c) Django Software Foundation and individual contributors.
# All rights reserved.
#
# Redistribution and use in source and binary forms, with or without modification,
# are permitted provided that the following conditions are met:
#
#     1. Redistributions of source code must retain the above copyright notice,
#        this list of conditions and the following disclaimer.
#
#     2. Redistributions in binary form must reproduce the above copyright
#        notice, this list of conditions and the following disclaimer in the
#        documentation and/or other materials provided with the distribution.
#
#     3. Neither the name of Django nor the names of its contributors may be used
#        to endorse or promote products derived from this software without
#        specific prior written permission.
#
# THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND
# ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED
# WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
# DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT OWNER OR CONTRIBUTORS BE LIABLE FOR
# ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES
# (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES;
# LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON
# ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
# (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS
# SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""Django's test tasks, as Django's tests/tasks/tasks.py declares them.

What differs, and why:
- The tasks that fail are run once (`retry=due.Retry(max_attempts=1)`):
  Django's backends never run a task again, due retries a failing task 20
  times by default. Django 6.1's `@task` takes due's options; on 6.0, due's
  own decorator does.
- `hang` and `sleep_for` are left out: no test of Django's that applies to a
  backend uses them.
- `plain_function_*`: plain functions for the tests that make tasks of a
  function with due's options (due takes one set of options per function: a
  second, other set is refused).
"""

import django
from django.tasks import TaskContext, task

import due
from due.contrib.django import task as due_task

task_with_options = task if django.VERSION >= (6, 1) else due_task
ONCE = due.Retry(max_attempts=1)


@task()
def noop_task(*args, **kwargs):
    return None


@task
def noop_task_from_bare_decorator(*args, **kwargs):
    return None


@task()
async def noop_task_async(*args, **kwargs):
    return None


@task()
def calculate_meaning_of_life():
    return 42


@task_with_options(retry=ONCE)
def failing_task_value_error():
    raise ValueError("This Task failed due to ValueError")


@task_with_options(retry=ONCE)
def failing_task_system_exit():
    raise SystemExit("This Task failed due to SystemExit")


@task_with_options(retry=ONCE)
def failing_task_keyboard_interrupt():
    raise KeyboardInterrupt("This Task failed due to KeyboardInterrupt")


@task_with_options(retry=ONCE)
def complex_exception():
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value():
    # Return something which isn't JSON serializable nor picklable.
    return lambda: True


@task_with_options(retry=ONCE)
def exit_task():
    exit(1)  # noqa: PLR1722  (as Django's: the builtin, not sys.exit)


@task(takes_context=True)
def get_task_id(context):
    return context.task_result.id


@task(takes_context=True)
def test_context(context, attempt):
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt


def plain_function_a():
    return None


def plain_function_b():
    return None


def plain_function_c():
    return None
