"""CITATION_PATTERN runs on RE2: a pattern that backtracks on ``re`` costs time linear in the
answer, and what RE2 cannot run is refused at start in one line saying why (#28 item 4)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from consumer.cli import main
from consumer.rules.citations import DEFAULT_MARKERS
from consumer.rules.linear_regex import LinearPattern, compile_linear
from consumer.rules.missing_citation import MissingCitation, compile_citation_pattern
from schemas.trace import TraceEvent

NESTED = r"\{\{cite:(\w+-?)+\}\}"  # nested quantifiers: on re, 2**n paths for n letters

# A 10,000-character answer that opens a citation and never closes it, checked in a child
# process: re holds the GIL while it backtracks, so no thread of this one could time it out.
_HOSTILE = f"""
from consumer.rules.missing_citation import MissingCitation, compile_citation_pattern
from schemas.trace import TraceEvent
rule = MissingCitation(compile_citation_pattern({NESTED!r}))
answer = ("See {{{{cite:" + "a" * 10_000)[:10_000]
outcome = rule.check(TraceEvent(trace_id="t", output=answer,
                                retrieved_documents=[{{"content": "x"}}]), None)
print(outcome.passed, len(answer))
"""


def test_a_nested_quantifier_pattern_checks_a_hostile_answer_in_linear_time() -> None:
    done = subprocess.run([sys.executable, "-c", _HOSTILE], capture_output=True, text=True,
                          timeout=120, check=False)  # seconds; re needs longer than the universe
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "10000"]


def test_the_pattern_and_the_default_markers_run_on_the_linear_time_engine() -> None:
    assert isinstance(compile_citation_pattern(NESTED), LinearPattern)
    assert isinstance(DEFAULT_MARKERS, LinearPattern)


def test_the_nested_pattern_still_finds_its_citations() -> None:
    rule = MissingCitation(compile_citation_pattern(NESTED))
    trace = TraceEvent(trace_id="t", output="Prorated {{cite:kb-1047}}.",
                       retrieved_documents=[{"content": "x"}])
    outcome = rule.check(trace, None)
    assert outcome.passed
    assert '"{{cite:kb-1047}}"' in outcome.reason


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        pytest.param(r"\{\{cite:(\w+)\}\}.*\1", "uses a backreference", id="backreference"),
        pytest.param(r"\{\{cite:(?P<id>\w+)\}\}(?P=id)", "uses a backreference",
                     id="named-backreference"),
        pytest.param(r"\[\d+\](?=\.)", "uses a look-ahead", id="look-ahead"),
        pytest.param(r"\[\d+\](?!\()", "uses a look-ahead", id="negative-look-ahead"),
        pytest.param(r"(?<=see )\[\d+\]", "uses a look-behind", id="look-behind"),
        pytest.param(r"(?<!\w)\[\d+\]", "uses a look-behind", id="negative-look-behind"),
        pytest.param(r"\[(?>\d+)\]", "uses an atomic group", id="atomic-group"),
        pytest.param(r"\[\d++\]", "uses a possessive repeat", id="possessive"),
    ],
)
def test_what_re2_cannot_run_is_refused_naming_it(pattern: str, problem: str) -> None:
    with pytest.raises(ValueError, match=r"^" + problem +
                       r", which the linear-time matcher \(RE2\) refuses \(") as refused:
        compile_citation_pattern(pattern)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("pattern", "hint"),
    [
        pytest.param("\\u3010\\d+\\u3011", "write \\x{3010}", id="python-code-point"),
        pytest.param(r"\{\{cite:\w+\}\}\Z", "write \\z", id="python-end-of-text"),
        pytest.param(r"(?x) \[ \d+ \]", "verbose mode", id="verbose"),
    ],
)
def test_python_only_syntax_is_refused_with_the_re2_spelling(pattern: str, hint: str) -> None:
    with pytest.raises(ValueError, match=r"^not RE2 syntax: ") as refused:
        compile_citation_pattern(pattern)
    assert hint in str(refused.value)


def test_re2_syntax_python_lacks_is_accepted() -> None:
    pattern = compile_citation_pattern(r"\x{3010}\p{Nd}+\x{3011}")
    assert [m.group() for m in pattern.finditer("\u3010\uff14\u3011 and \u30101\u3011")] == [
        "\u3010\uff14\u3011", "\u30101\u3011"]


def test_ignore_case_is_an_option() -> None:
    assert compile_linear("doc", ignore_case=True).search("DOC") is not None
    assert compile_linear("doc").search("DOC") is None


def test_a_refused_pattern_stops_the_start_in_one_line_and_re2_prints_nothing(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RULES", "missing_citation")
    monkeypatch.setenv("CITATION_PATTERN", r"\{\{cite:(\w+)\}\}\1")
    assert main(["run"]) == 2
    err = capfd.readouterr().err  # file descriptor 2: RE2 logs from C++, past sys.stderr
    assert err.startswith("CITATION_PATTERN: uses a backreference, which the linear-time "
                          "matcher (RE2) refuses"), err
    assert err.count("\n") == 1, err
