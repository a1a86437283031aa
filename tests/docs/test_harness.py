"""The harness that runs the docs' examples can fail: small pages, each with
one thing wrong, fail; the same pages put right pass."""

from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.docs.normalise import begins_with, matches, may_still_begin_with, normalise_line
from tests.docs.pages import Page, console_commands, read_page
from tests.docs.processes import PageFailure
from tests.docs.reader import Reader
from tests.docs.urls import Databases, hosts_named

FENCE = "```"


def follow(tmp_path: Path, text: str) -> None:
    source = tmp_path / "page.md"
    source.write_text(textwrap.dedent(text).replace("'''", FENCE))
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    Reader(read_page(source), folder).follow()


def fails(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(PageFailure, match=match):
        follow(tmp_path, text)


PYTHON_WITH_OUTPUT = """
    '''python
    total = sum(range(4))
    print("total", total)
    '''

    '''text
    total {shown}
    '''

    '''python
    print(total * 2)
    '''
"""


def test_python_output_is_compared(tmp_path: Path) -> None:
    follow(tmp_path, PYTHON_WITH_OUTPUT.format(shown=6))
    fails(tmp_path, PYTHON_WITH_OUTPUT.format(shown=7), "output differs")


def test_a_python_block_that_raises_fails_unless_it_shows_the_traceback(tmp_path: Path) -> None:
    raising = """
        '''python
        int("x")
        '''
    """
    fails(tmp_path, raising, "raised")
    shown = (
        raising
        + """
        '''text
        Traceback (most recent call last):
          ...
        ValueError: invalid literal for int() with base 10: {value}
        '''
    """
    )
    follow(tmp_path, shown.format(value="'x'"))
    fails(tmp_path, shown.format(value="'y'"), "output differs")


FILES = """
    '''python
    # greet.py
    def hello() -> str:
        return "hello"
    '''

    '''console
    $ python -c 'import greet; print(greet.hello())'
    {shown}
    '''
"""


def test_console_output_is_compared_and_files_are_saved(tmp_path: Path) -> None:
    follow(tmp_path, FILES.format(shown="hello"))
    fails(tmp_path, FILES.format(shown="goodbye"), "output differs")


def test_a_file_no_later_step_uses_fails(tmp_path: Path) -> None:
    unused = """
        '''python
        # greet.py
        print("hello")
        '''
    """
    fails(tmp_path, unused, "no later step imports or runs")
    rewritten_unused = (
        FILES.format(shown="hello")
        + """
        '''python
        # greet.py (continued)
        GOODBYE = "goodbye"
        '''
    """
    )
    fails(tmp_path, rewritten_unused, "greet.py")


def test_a_failing_command_fails_unless_its_exit_code_is_shown(tmp_path: Path) -> None:
    page = """
        '''console
        $ python -c 'raise SystemExit(3)'
        {next}
        '''
    """
    fails(tmp_path, page.format(next=""), "exited 3")
    follow(tmp_path, page.format(next="$ echo $?\n        3"))
    fails(tmp_path, page.format(next="$ echo $?\n        0"), "output differs")


def test_blocks_it_cannot_run_fail_the_page(tmp_path: Path) -> None:
    fails(tmp_path, "'''sh\ndue status\n'''\n", "is not run")
    fails(tmp_path, "'''pycon\n>>> 1\n'''\n", "write ```python")
    fails(tmp_path, "<!-- fragmnet -->\n'''python\nx = 1\n'''\n", "unknown marker")
    fails(tmp_path, "<!-- background -->\n'''python\nx = 1\n'''\n", "does not apply")
    fails(tmp_path, "'''{code-block} python\nx = 1\n'''\n", "directive")
    fails(tmp_path, "'''console\n$ cd elsewhere\n'''\n", "in its folder")


def test_fragments_are_compiled_and_their_commands_parsed(tmp_path: Path) -> None:
    follow(
        tmp_path,
        """
        <!-- fragment -->
        '''python
        app = due.App("postgresql://app@db.internal/app")  # shown, not run: no database
        send_email.enqueue(user_id)
        '''

        <!-- fragment -->
        '''console
        $ pip install due
        $ DUE_APP=myapp:app due worker -q emails=4 --grace 60s && echo done
        '''

        '''ini
        ExecStart=/srv/app/.venv/bin/due worker --app myapp:app --processes 2
        '''

        '''yaml
        command: ["due", "check", "--app", "myapp:app"]
        '''

        <!-- fragment -->
        '''text
        */5 * * * * cd /srv/app && due check --app myapp:app > out.txt 2>&1 || cat out.txt
        '''
        """,
    )
    fails(tmp_path, "<!-- fragment -->\n'''python\ndef (:\n'''\n", "not Python")
    fails(tmp_path, "<!-- fragment -->\n'''console\n$ due worker --gracee 1s\n'''\n", "gracee")
    fails(tmp_path, "<!-- fragment -->\n'''console\n$ due wroker\n'''\n", "wroker")
    fails(tmp_path, "'''ini\nExecStart=due worker --processes many\n'''\n", "many")
    fails(tmp_path, "'''yaml\ncommand: [\"due\", \"chek\"]\n'''\n", "chek")
    fails(tmp_path, "<!-- fragment -->\n'''text\ndue check --json --jsn\n'''\n", "jsn")


SERVER = """
    '''python
    # server.py
    import signal
    import sys

    # Held until sigwait takes it: a Ctrl-C sent as soon as "ready" shows, before
    # sigwait has begun, would otherwise go to Python's handler, and sigwait wait on.
    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})
    print("ready")
    signal.sigwait({{signal.SIGINT}})
    print("stopping")
    sys.exit({code})
    '''

    <!-- background -->
    '''console
    $ python server.py
    {ready}
    '''

    '''console
    ^C
    stopping
    '''
"""


def test_background_commands_show_their_output_and_stop_on_ctrl_c(tmp_path: Path) -> None:
    follow(tmp_path, SERVER.format(code=0, ready="ready"))
    fails(tmp_path, SERVER.format(code=1, ready="ready"), "exited 1 on Ctrl-C")
    gone = """
        <!-- background -->
        '''console
        $ python -c 'print("ready")'
        set
        '''
    """
    fails(tmp_path, gone, "exited 0 before showing")


LOG = """
    '''python
    # log.py
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})
    print("started")
    print("leading term=1")
    signal.sigwait({{signal.SIGINT}})
    print("draining")
    print("stopped")
    '''

    <!-- background -->
    '''console
    $ python log.py
    {started}
    '''

    '''console
    ^C
    {stopped}
    '''
"""


def test_a_background_command_shows_every_line_it_prints_in_order(tmp_path: Path) -> None:
    def page(started: str, stopped: str) -> str:
        return LOG.format(
            started=started.replace("\n", "\n    "), stopped=stopped.replace("\n", "\n    ")
        )

    follow(tmp_path, page("started\nleading term=1", "draining\nstopped"))
    follow(tmp_path, page("started\n...", "stopped"))
    # A line it prints that the page leaves out, or one shown out of its order.
    fails(tmp_path, page("leading term=1", "stopped"), "showed")
    fails(tmp_path, page("leading term=1\nstarted", "stopped"), "showed")
    fails(tmp_path, page("started\nstopped", "stopped"), "showed")
    # After Ctrl-C, its last lines are those shown.
    fails(tmp_path, page("started\n...", "draining"), "after Ctrl-C")


def test_a_sqlite_url_shown_is_not_a_postgresql_one_printed(tmp_path: Path) -> None:
    page = """
        '''console
        $ echo database={printed} lease=10.0 | sed s/pg:/postgresql:/
        database={shown} lease=10.0
        '''
    """
    follow(tmp_path, page.format(printed="sqlite:///due.db", shown="sqlite:///due.db"))
    follow(tmp_path, page.format(printed="pg://a:•••@db/a", shown="postgresql://b:•••@h/b"))
    fails(tmp_path, page.format(printed="pg://a:•••@db/a", shown="sqlite:///due.db"), "differs")


PRINTED_TABLE = [
    "┏━━━━━━━━━┳━━━━━━━━┓",
    "┃ queue   ┃ paused ┃",
    "┡━━━━━━━━━╇━━━━━━━━┩",
    "│ default │        │",
    "└─────────┴────────┘",
]


def table_page(shown: list[str]) -> str:
    printed = " ".join(f"'{line}'" for line in PRINTED_TABLE)
    lines = "\n".join(f"    {line}" for line in shown)
    return f"\n    '''console\n    $ printf '%s\\n' {printed}\n{lines}\n    '''\n"


def test_a_table_is_drawn_as_printed(tmp_path: Path) -> None:
    follow(tmp_path, table_page(PRINTED_TABLE))
    # The paused column drawn narrower than its header (and than it prints).
    narrow = [line[:10] + line[10:12] + line[-1] for line in PRINTED_TABLE]
    narrow[1] = PRINTED_TABLE[1]
    fails(tmp_path, table_page(narrow), "out of line")
    # In line, but wider than it prints.
    wide = [line[:-1] + line[-2] + line[-1] for line in PRINTED_TABLE]
    fails(tmp_path, table_page(wide), "drawn other than printed")


def test_console_sessions_start_with_a_command(tmp_path: Path) -> None:
    page = read_page_text(tmp_path, "'''console\nhello\n$ true\n'''\n")
    with pytest.raises(ValueError, match="before the first"):
        console_commands(page.blocks[0])


def read_page_text(tmp_path: Path, text: str) -> Page:
    source = tmp_path / "page.md"
    source.write_text(text.replace("'''", FENCE))
    return read_page(source)


def test_the_normaliser_lets_through_only_what_moves() -> None:
    log = "2026-12-04 20:04:22,684 INFO due.worker job.succeeded job=12 duration_ms=1.4"
    shown = "2026-01-01 09:00:00,000 INFO due.worker job.succeeded job=1 duration_ms=7"
    assert normalise_line(log) == normalise_line(shown)
    assert normalise_line(log) != normalise_line(shown.replace("succeeded", "failed"))
    assert normalise_line("worker=vm:3360:a98a loop=uvloop") == normalise_line(
        "worker=laptop:1:0b0c loop=asyncio"
    )
    assert normalise_line("│  2 │ myapp.send │ 1/20 │") == normalise_line(
        "│ 17 │ myapp.send │ 1/20 │"
    )
    assert normalise_line("│ 2 │ send │ 1/20 │") != normalise_line("│ 2 │ send │ 2/20 │")
    assert matches(["first", "...", "last"], ["first", "a", "b", "last"])
    assert not matches(["first", "last"], ["first", "a", "last"])
    assert begins_with(["a", "b"], ["a", "b", "c"]) == 2
    assert begins_with(["a", "...", "c"], ["a", "b", "c", "d"]) == 3
    assert begins_with(["b"], ["a", "b"]) is None
    assert may_still_begin_with(["a", "b"], ["a"])
    assert not may_still_begin_with(["a", "b"], ["a", "c"])
    sqlite = "worker.started worker=vm:1:abcd database=sqlite:///due.db lease=10.0"
    assert normalise_line(sqlite) != normalise_line(
        sqlite.replace("sqlite:///due.db", "postgresql://app:***@db/app")
    )


def test_a_page_s_urls_stand_for_the_databases_it_runs_on() -> None:
    databases = Databases("postgresql://127.0.0.1/t?options=x", "postgresql://root@127.0.0.1:7/t")
    assert databases.url_for("postgresql://localhost/myapp") == "postgresql://127.0.0.1/t?options=x"
    through = databases.url_for(
        "postgresql://app@pgbouncer:6432/app?due_pooler=transaction&sslmode=require"
    )
    assert through == "postgresql://root@127.0.0.1:7/t?due_pooler=transaction"
    assert hosts_named("postgresql://app@pgbouncer:6432/app") == {"postgres", "pgbouncer"}
    assert hosts_named("sqlite:///due.db") == set()
    with pytest.raises(AssertionError, match="without that database"):
        Databases(None).url_for("postgresql://localhost/myapp")
