"""`groundedness replay`'s window arguments: a bad instant is refused before any broker is
reached (the bootstrap address below answers nothing)."""

from __future__ import annotations

import pytest

from consumer.cli import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--from", "yesterday"], "--from: 'yesterday' is not an ISO 8601",
                     id="bad-from"),
        pytest.param(["--from", "2024-05-01", "--to", "2024-13-01"],
                     "--to: '2024-13-01' is not an ISO 8601", id="bad-to"),
        pytest.param(["--from", "2024-05-02", "--to", "2024-05-01"],
                     "--to must be later than --from", id="backwards"),
    ],
)
def test_bad_instants_are_one_line_and_exit_2(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # never reached
    assert main(["replay", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1
