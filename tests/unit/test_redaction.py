"""Known secrets are cut out of any text the worker writes: logs and verdicts alike."""

from __future__ import annotations

import pytest

from consumer.redaction import REDACTED, known_secrets, redact

KEY = "sk-proj-Abc123Def456Ghi789"
PASSWORD = "hunter2-very-secret"
SECRETS = known_secrets([KEY, PASSWORD])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(f"Incorrect key: Bearer {KEY}.", f"Incorrect key: Bearer {REDACTED}.",
                     id="whole-key"),
        pytest.param(f"{KEY}{KEY} and {PASSWORD}", f"{REDACTED}{REDACTED} and {REDACTED}",
                     id="repeated-and-both"),
        pytest.param(f"cut at 300 chars: Bearer {KEY[:9]}", f"cut at 300 chars: Bearer {REDACTED}",
                     id="key-cut-by-a-length-limit"),
        pytest.param(f"ends with {PASSWORD[:4]}", f"ends with {REDACTED}",
                     id="shortest-fragment-redacted"),
        pytest.param(f"ends with {KEY[:3]}", f"ends with {KEY[:3]}", id="three-chars-kept"),
        pytest.param(f"{KEY[:9]} in the middle", f"{KEY[:9]} in the middle",
                     id="fragment-not-at-the-end"),
        pytest.param("nothing secret here", "nothing secret here", id="clean"),
        pytest.param("", "", id="empty"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text, SECRETS) == expected


def test_a_secret_inside_another_is_redacted_whole() -> None:
    secrets = known_secrets(["abcd", "xxabcdxx"])
    assert redact("key xxabcdxx, part abcd", secrets) == f"key {REDACTED}, part {REDACTED}"


def test_known_secrets_drop_blanks_and_duplicates_longest_first() -> None:
    assert known_secrets(["abcd", "", "abcdef", "abcd"]) == ("abcdef", "abcd")


def test_no_secrets_leaves_text_alone() -> None:
    assert redact(f"Bearer {KEY}", ()) == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("ends with admi", "ends with admi", id="head-of-a-short-secret-kept"),
        pytest.param("ends with adm", "ends with adm", id="shorter-head-kept"),
        pytest.param("log in as admin", f"log in as {REDACTED}", id="whole-short-secret"),
        pytest.param("admin, then more", f"{REDACTED}, then more", id="whole-at-the-start"),
    ],
)
def test_a_short_secret_is_redacted_only_whole(text: str, expected: str) -> None:
    """Under 8 characters, a secret's head is an ordinary word ("admi"): a text ending in it
    is not cut (the secret itself is still redacted wherever it appears)."""
    assert redact(text, known_secrets(["admin"])) == expected


def test_a_head_of_an_8_character_secret_is_redacted() -> None:
    assert redact("ends with pass", known_secrets(["passw0rd"])) == f"ends with {REDACTED}"


def test_a_long_part_of_a_secret_quoted_alone_is_redacted() -> None:
    # A judge that splits an answer into words quotes the key's random part without its prefix.
    secrets = known_secrets(["sk-oc15-2184db7b14a4d049fda2fd98"])
    reason = "Numbers not found in the documents: 2050, 2184db7b14a4d049fda2fd98, oc15."
    assert redact(reason, secrets) == f"Numbers not found in the documents: 2050, {REDACTED}, oc15."


def test_short_parts_of_a_secret_are_left_alone() -> None:
    # "correct", "horse": ordinary words, never redacted alone.
    secrets = known_secrets(["correct-horse-battery-staple"])
    assert secrets == ("correct-horse-battery-staple",)
    assert redact("correct: a horse and a battery", secrets) == "correct: a horse and a battery"
