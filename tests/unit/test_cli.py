"""The command line's own behaviour: the version, help texts, a busy port for the local judge."""

from __future__ import annotations

import re
import socket
from importlib.metadata import version

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
