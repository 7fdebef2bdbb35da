"""``nas.errors.first_line``: what a nas error quotes of another error, in one line."""

from __future__ import annotations

from nas.errors import first_line


def test_the_first_line_of_a_page_long_error() -> None:
    page = OSError("\n  connection refused  \nDETAIL: the server's whole state\n...")
    assert first_line(page) == "connection refused"
    assert first_line(page, typed=True) == "OSError: connection refused"
    assert first_line(ValueError("x" * 500), limit=3) == "xxx"


def test_an_empty_message_gives_the_type_or_the_default() -> None:
    assert first_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert first_line(RuntimeError(" \n "), typed=True) == "RuntimeError"
    assert first_line(ValueError(""), default="no detail") == "no detail"
