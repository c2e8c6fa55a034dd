"""``groundedness run --help``: every setting, in a group, with its variable and default."""

from __future__ import annotations

import pytest

from consumer.cli import main
from consumer.settings import Settings
from consumer.settings_help import GROUPS, settings_help


def test_every_setting_is_in_exactly_one_group() -> None:
    grouped = [name for _, names in GROUPS for name in names]
    assert sorted(set(Settings.model_fields) - set(grouped)) == [], "a setting without a group"
    assert sorted(set(grouped) - set(Settings.model_fields)) == [], "a group names no setting"
    assert len(grouped) == len(set(grouped)), "a setting in two groups"


def test_run_help_lists_each_variable_with_its_default_and_links_the_docs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-shown")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")  # defaults, not the env

    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])

    out = capsys.readouterr().out
    assert exited.value.code == 0
    lines = [" ".join(line.split()) for line in out.splitlines()]
    for expected in ("KAFKA_BOOTSTRAP_SERVERS localhost:9092", "JUDGE_MAX_CONCURRENCY 16",
                     "SAMPLE_RATE 1", "RULES groundedness", "HEALTH_PORT 8080",
                     "KAFKA_SSL_CHECK_HOSTNAME true", "OPENAI_API_KEY unset (secret)",
                     "JUDGE_REQUESTS_PER_MINUTE unset",
                     "MIN_ACCEPTABLE_SCORE required while RULES includes groundedness"):
        assert expected in lines
    for group, _ in GROUPS:
        assert f"{group}:" in lines
    assert "docs/configuration.md" in out
    assert "sk-never-shown" not in out
    assert "elsewhere" not in out


def test_a_secret_shows_no_default_value() -> None:
    for line in settings_help().splitlines():
        if "(secret)" in line:
            assert line.split()[1:] == ["unset", "(secret)"], line
