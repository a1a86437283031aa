"""What due shows of a job's arguments: redacted names matched exactly,
ignoring case, at any depth; positions by the task's signature or as stored;
the defaults unless turned off."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

import due
from due.shown_arguments import HIDDEN, hidden, scrubbed, secret_texts, shown_arguments

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def job(task: str, *args: Any, redact: tuple[str | int, ...] = (), **kwargs: Any) -> due.Job:
    return due.Job(
        1, task, "default", 0, due.JobState.QUEUED, args, kwargs, NOW, 0, 1, NOW, redact=redact
    )


def test_names_match_exactly_ignoring_case_at_any_depth() -> None:
    value = {"Password": "a", "password_hint": "b", "x": [{"API_KEY": "c"}, ({"TOKEN": 1},)]}
    assert hidden(value, {"password", "api_key", "token"}) == {
        "Password": HIDDEN,
        "password_hint": "b",
        "x": [{"API_KEY": HIDDEN}, [{"TOKEN": HIDDEN}]],
    }
    assert value["Password"] == "a"  # a copy: the job keeps its values


def test_the_defaults_apply_unless_the_app_turns_them_off() -> None:
    shown = job("t", {"secret": "s", "ssn": "1"}, authorization="a")
    assert shown_arguments(shown) == ([{"secret": HIDDEN, "ssn": "1"}], {"authorization": HIDDEN})
    mine = due.App("sqlite:///unused.db", redact=["SSN"], redact_defaults=False)
    expected = ([{"secret": "s", "ssn": HIDDEN}], {"authorization": "a"})
    assert shown_arguments(shown, mine) == expected


def test_positions_come_from_the_tasks_signature_or_from_the_job() -> None:
    app = due.App("sqlite:///unused.db")

    @app.task(name="pay", redact=["card"])
    def pay(ctx: due.Context, user: str, card: str, password: str = "") -> None: ...

    assert pay.redacted_positions == (1, 2)  # without its context
    assert shown_arguments(job("pay", "ada", "4242", "pw"), app)[0] == ["ada", HIDDEN, HIDDEN]
    # Shown where the task is not known: only what the job stored.
    stored = job("pay", "ada", "4242", "pw", redact=("card", 1))
    assert shown_arguments(stored, due.App("sqlite:///unused.db"))[0] == ["ada", HIDDEN, "pw"]
    assert pay.stored_redaction(2) == ["card", 1] and pay.stored_redaction(1) == ["card"]


@pytest.mark.parametrize("redact", ["password", [""], [3], 5])
def test_a_bad_redact_option_is_refused_with_what_to_write(redact: Any) -> None:
    with pytest.raises(due.ConfigurationError, match="redact= takes"):
        due.App("sqlite:///unused.db", redact=redact)
    app = due.App("sqlite:///unused.db")
    with pytest.raises(due.ConfigurationError, match="task 'bad': redact= takes"):
        app.task(name="bad", redact=redact)(lambda: None)


def test_error_text_loses_the_hidden_values_only() -> None:
    secrets = secret_texts(
        ("ada", "hunter22", {"token": ["tok-1234", 7]}), {"n": 1}, {"token"}, {1}
    )
    assert secrets == {"hunter22", "tok-1234"}  # short or unhidden values are not looked for
    text = "ada: hunter22 refused (tok-1234)"
    assert scrubbed(text, secrets) == f"ada: {HIDDEN} refused ({HIDDEN})"


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda s: s, id="as is"),
        pytest.param(lambda s: quote(s, safe=""), id="in a URL"),
        pytest.param(lambda s: quote(s, safe="").lower(), id="in a URL, lower-case hex"),
        pytest.param(quote_plus, id="in a form"),
        pytest.param(repr, id="repr"),
        pytest.param(lambda s: repr(s.encode()), id="repr of its bytes"),
        pytest.param(json.dumps, id="JSON"),
        pytest.param(lambda s: json.dumps(s, ensure_ascii=False), id="JSON, not ASCII"),
        pytest.param(html.escape, id="HTML"),
    ],
)
def test_error_text_loses_the_hidden_values_in_any_encoding(encode: Any) -> None:
    secret = "pä ss/w'o\"rd\n%&<x>"
    shown = scrubbed(f"refused {encode(secret)} for ada", {secret})
    assert shown.startswith("refused ") and shown.endswith(" for ada"), shown
    assert (
        shown.removeprefix("refused b").removeprefix("refused ")[: -len(" for ada")].strip("'\"")
        == HIDDEN
    ), shown


def test_arguments_nested_deeper_than_the_recursion_limit_are_hidden_not_fatal() -> None:
    deep: Any = {"token": "s3cret-deep"}
    for _ in range(5000):
        deep = {"x": [deep]}
    shown = job("t", deep, "visible", note=deep)
    assert shown_arguments(shown) == ([HIDDEN, "visible"], {"note": HIDDEN})
    assert secret_texts((deep,), {}, {"token"}, ()) == {"s3cret-deep"}
