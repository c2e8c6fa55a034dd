"""`groundedness replay`'s arguments: a bad instant, and a ``--batch`` that cannot run, are
refused in one line before any broker is reached (the bootstrap address below answers
nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumer.cli import main
from consumer.replay.batch.state import BatchState, Scope


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


def test_batch_refusals_are_one_line_and_reach_no_broker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # never reached
    monkeypatch.chdir(tmp_path)
    window = ["replay", "--from", "2024-05-01", "--to", "2024-05-02"]
    other = tmp_path / "other.json"
    BatchState(other, Scope("another-topic", "2024-05-01T00:00:00+00:00", None, "m")).save()
    cases = [
        ([*window, "--batch", "--dry-run"], {}, "--batch and --dry-run do not go together"),
        ([*window, "--batch-state", "s.json"], {}, "--batch-state is the state of a --batch"),
        ([*window, "--batch"], {"RULES": "missing_citation"},
         "--batch: RULES (missing_citation) has no groundedness"),
        ([*window, "--batch", "--batch-state", str(other)], {},
         f"{other} is the batch state of another-topic from 2024-05-01T00:00:00+00:00 to the "
         "end (model m), not of llm-traces"),
        ([*window, "--batch", "--batch-state", str(tmp_path / "no" / "s.json")], {},
         f"--batch-state: the directory {tmp_path / 'no'} does not exist"),
    ]
    for args, env, message in cases:
        with monkeypatch.context() as scoped:
            for name, value in env.items():
                scoped.setenv(name, value)
            assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(message), err
        assert err.count("\n") == 1
    # The lock taken to read other.json stays, empty of any holder once released (lock.py).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json", "other.json.lock"], \
        "no state written"
