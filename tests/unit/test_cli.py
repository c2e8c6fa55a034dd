"""The command line's own behaviour: the version, help texts, a busy port for the local judge,
a reader of stdout that leaves early."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from consumer.cli import main


def test_version_is_the_installed_package(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"groundedness {version('groundedness-worker')}\n"


def test_local_judge_options_have_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["local-judge", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert re.search(r"--host HOST [a-z]", out), out
    assert re.search(r"--port PORT [a-z]", out), out
    assert "default: 127.0.0.1" in out
    assert "default: 8000" in out


def test_local_judge_on_a_busy_port_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = main(["local-judge", "--host", "127.0.0.1", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith(f"local-judge: cannot listen on 127.0.0.1:{port}: "), err
    assert "in use" in err
    assert "while attempting" not in err  # the address once


def test_local_judge_on_an_unknown_host_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["local-judge", "--host", "no-such-host.invalid", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith("local-judge: cannot listen on no-such-host.invalid:0: "), err
    assert "while attempting" not in err  # the address once


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_local_judge_refuses_a_port_that_is_none(
    capsys: pytest.CaptureFixture[str], port: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["local-judge", "--port", port])
    assert exited.value.code == 2
    assert "must be a port number, 0 to 65535" in capsys.readouterr().err


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """``groundedness check FILE | head -1``: exit 141 (as a shell's tools do), no traceback
    and no evaluation left unawaited."""
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps({
        "trace_id": f"t-{n}", "output": f"Prorated [1]. ({n})",
        "retrieved_documents": ["Refunds are prorated."]}) + "\n" for n in range(3_000)))
    env = {**os.environ, "RULES": "missing_citation", "PYTHONWARNINGS": "default"}
    process = subprocess.Popen(
        [sys.executable, "-m", "consumer.cli", "check", str(path)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline()
    process.stdout.close()  # as `head -1` does once it has its line
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 141
    assert b"Traceback" not in stderr
    assert b"never awaited" not in stderr


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--plot", "/nope/dir/x.png", "--plot: the directory /nope/dir does not exist"),
    ("--plot", "x.txt", "--plot: x.txt is not one of .png"),
    ("--json", "/nope/dir/x.json", "--json: the directory /nope/dir does not exist"),
])
def test_an_output_eval_cannot_write_is_refused_before_any_judging(
        option: str, value: str, says: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # No judge is reachable here: refused first, or it would wait for one.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    dataset = Path(__file__).resolve().parents[2] / "consumer/data/factcheck-gpt-sample.jsonl"
    assert main(["eval", "--dataset", str(dataset), option, value]) == 2
    assert capsys.readouterr().err.startswith(says)
