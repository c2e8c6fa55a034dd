"""Every dashboard query and every alert expression, evaluated by a real Prometheus against a
real worker's metrics: each returns series, with the labels its panel or alert reads.

A real worker (``groundedness run``, with ``RULES=groundedness,missing_citation`` and judge
prices) judges a stream on the real broker with the fake judge over HTTP; the stream has passing
and failing answers, a judge error, an answer whose first call meets a 429
``rate_limit_exceeded``, an empty output (skipped) and a record that is not JSON
(dead-lettered). The judge sends an account's ``x-ratelimit-*`` headers on every response, as
OpenAI does, so the worker paces by them and reports what the account has left. A real
Prometheus (``make prometheus``, the module promtool is built from) scrapes its ``/metrics``
every second as the chart's ServiceMonitor would: job ``gw-groundedness-worker``, namespace
``evals``. The span input's series (open traces, traces closed by quiet, max wait or capacity)
and the hand-over's (records redone) exist at 0 from the start on a ``trace_json`` worker
(``consumer.ops.metrics``), so their panels are checked on this worker too.

What is checked, and how:

- Panels: each target of the committed dashboard JSON, with Grafana's variables given values
  (``$namespace`` and ``$job`` this release's, ``$__rate_interval`` 1m, ``$__range`` 1h); it
  must return at least one series, and each series must carry every label its legend shows
  (``{{rule}} {{verdict}}`` needs ``rule`` and ``verdict``; ``{{topic}}/{{partition}}`` needs
  both). A query left with an unknown ``$variable`` fails.
- Template variables: ``label_values(selector, label)`` through the label values API; the
  values must include this release's.
- Alerts: each expression of the chart's PrometheusRule, rendered by ``helm template`` with the
  rules enabled. A quiet worker fires none, so the expression as written returns nothing, for a
  renamed metric as for a healthy one. Each comparison outside the label matchers becomes a
  ``bool`` comparison (``> 0.05`` becomes ``> bool 0.05``): the expression then returns its
  0/1 for every series it compares, and nothing when a metric is missing; and since the
  operands of ``and`` must still match label for label, a grouping that differs across the
  operands fails too, which evaluating each metric alone would miss. The result must carry the
  labels the alert groups by. Alerts are evaluated two minutes after the data (within
  Prometheus' five-minute lookback), so the lag alert's ``deriv(...[15m:1m])`` subquery has the
  two one-minute steps it needs on a test that lasts seconds.

Every value must be a number: a ratio or quantile over counters that never moved is 0/0,
``NaN``, and fails. And the panels show what the stream fixes, read from the same queries with
each ``rate(...[...])`` or ``increase(...[...])`` replaced by its counter (exact: the worker
starts from 0, and no window edge extrapolates): the verdicts by rule and verdict are the
verdicts topic's tally; the pass rate of each rule is the topic's pass share; the latency
quantiles are finite and above 0; the cost is above 0; there is a dead letter and an
``empty_output`` skip; the account's requests and tokens left are the judge's headers; each
replica's pace is above 0 and at most the account's limit, and the fleet's is their sum; the
429 share by code is 1 over the judge calls for ``rate_limit_exceeded`` and 0 for the other
codes, the calls being every request the judge received; one worker on a fresh group redoes no
record, and its commits' progress has a size above 0 and never overflows. A worker that judged
nothing, or stopped counting, fails.

That the check fails on a renamed metric is shown in the same run: for every metric the
queries name, a copy of the queries with that one metric renamed must fail exactly the queries
that name it.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from consumer.localjudge.server import JudgeServer
from scripts.dashboard import DASHBOARD_PATH
from tests.support.fake_judge import ScriptedJudge
from tests.support.helm import FULLNAME, NAMESPACE, Helm, find_tool, private_env
from tests.support.http import wait_status
from tests.support.ports import free_port
from tests.support.prometheus import SCRAPE_INTERVAL_S, Prometheus, running_prometheus
from tests.support.streams import Topics, create_topics, produce, trace
from tests.support.workers import VerdictCollector, WorkerPool, wait_committed, worker_env

pytestmark = pytest.mark.integration

PARTITIONS = 3
DOCS = [{"id": "kb-1", "content": "Refunds are prorated to the day of cancellation."}]
PRICES = {"JUDGE_PRICE_INPUT_PER_MILLION": "0.15", "JUDGE_PRICE_OUTPUT_PER_MILLION": "0.60"}
# The judge account, as the headers of every response say it: plenty left, so the pace stays
# near the account's refill and the test is not slowed.
REQUESTS_LIMIT, REQUESTS_LEFT = 6000, 5400
TOKENS_LIMIT, TOKENS_LEFT = 2_000_000, 1_900_000
ACCOUNT_HEADERS = {
    "x-ratelimit-limit-requests": str(REQUESTS_LIMIT),
    "x-ratelimit-remaining-requests": str(REQUESTS_LEFT),
    "x-ratelimit-reset-requests": "6s",
    "x-ratelimit-limit-tokens": str(TOKENS_LIMIT),
    "x-ratelimit-remaining-tokens": str(TOKENS_LEFT),
    "x-ratelimit-reset-tokens": "3s",
}
RATE_LIMIT_CODES = ("rate_limit_exceeded", "insufficient_quota", "none")
# Grafana's own variables, as a dashboard over the last hour with a 15 s scrape would have
# them; 1m also spans the whole test, so a rate sees every verdict.
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
# The values a user picks for the dashboard's variables: this release's, as the chart's
# ServiceMonitor labels its series.
PICKED = {"namespace": NAMESPACE, "job": FULLNAME}
# Later than the last scrape by more than a subquery step twice over, within the lookback.
ALERT_DELAY_S = 120.0

# A comparison operator (not a label matcher's `=`, `!=`, `=~`: those are inside braces).
COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(?!\s*bool\b)")
LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
GROUPED_BY = re.compile(r"\bby\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?([A-Za-z_][A-Za-z0-9_]*)\)$")
VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
METRIC = re.compile(r"\bgroundedness_[A-Za-z0-9_]+")
WINDOWED = re.compile(r"\b(?:rate|increase)\((groundedness_\w+\{[^}]*\})\[[^\]]*\]\)")


@dataclass(frozen=True)
class Check:
    """One query, where it comes from, and what its result must carry."""

    source: str
    expr: str
    labels: frozenset[str] = frozenset()
    at_offset_s: float = 0.0  # evaluated this long after now
    label_of: str | None = None  # a variable's query: the values of this label...
    wanted_value: str | None = None  # ...must include this one


# -- the queries -----------------------------------------------------------------------------


def substitute(expr: str, variables: dict[str, str]) -> str:
    """``expr`` with ``$name`` and ``${name}`` replaced by the variable's value (an unknown
    variable is left as it is)."""

    def value(found: re.Match[str]) -> str:
        return variables.get(found.group(1) or found.group(2), found.group())

    return VARIABLE.sub(value, expr)


def dashboard_checks(board: dict[str, Any]) -> list[Check]:
    """Each panel target and each query variable of ``board``, variables substituted."""
    variables = {**GRAFANA_VARIABLES, **PICKED}
    checks = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                checks.append(Check(
                    source=f"panel {inner['title']!r} {target['refId']}",
                    expr=substitute(target["expr"], variables),
                    labels=frozenset(LEGEND_LABEL.findall(target.get("legendFormat", ""))),
                ))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            checks.append(Check(
                source=f"variable ${variable['name']}",
                expr=substitute(variable["query"], variables),
                label_of=variable["name"],
                wanted_value=PICKED[variable["name"]],
            ))
    return checks


def as_bool(expr: str) -> str:
    """``expr`` with every comparison outside label matchers and strings made a ``bool`` one."""
    out: list[str] = []
    depth, quote, i = 0, "", 0
    while i < len(expr):
        char = expr[i]
        if quote:
            out.append(expr[i:i + 2] if char == "\\" else char)
            i += 2 if char == "\\" else 1
            quote = "" if char == quote else quote
            continue
        if char in "\"'`":
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif depth == 0 and (found := COMPARISON.match(expr, i)):
            out.append(f"{found.group()} bool")
            i = found.end()
            continue
        out.append(char)
        i += 1
    return "".join(out)


def alert_checks(rules: list[dict[str, Any]]) -> list[Check]:
    """Each alert of the rendered PrometheusRule, its comparisons made ``bool`` ones."""
    checks = []
    for rule in rules:
        grouped = GROUPED_BY.search(rule["expr"])
        labels = {name.strip() for name in grouped.group(1).split(",")} if grouped else set()
        checks.append(Check(
            source=f"alert {rule['alert']}", expr=as_bool(rule["expr"]),
            labels=frozenset(labels - {""}), at_offset_s=ALERT_DELAY_S,
        ))
    return checks


def chart_alerts(helm: Helm) -> list[dict[str, Any]]:
    """The alerting rules of the chart's PrometheusRule, rules enabled, defaults otherwise."""
    result = helm.template({"minAcceptableScore": 0.5, "prometheusRule": {"enabled": True}})
    assert result.returncode == 0, result.stderr
    (manifest,) = [doc for doc in yaml.safe_load_all(result.stdout)
                   if doc and doc["kind"] == "PrometheusRule"]
    return [rule for group in manifest["spec"]["groups"] for rule in group["rules"]
            if "alert" in rule]


def renamed(checks: list[Check], metric: str) -> list[Check]:
    """``checks`` as they would be with ``metric`` renamed in the worker and not in them."""
    return [replace(check, expr=re.sub(rf"\b{metric}\b", f"{metric}_renamed", check.expr))
            for check in checks]


# -- evaluating them -------------------------------------------------------------------------


async def problem(prometheus: Prometheus, check: Check) -> str | None:
    """What is wrong with ``check``'s result, or None."""
    if "$" in check.expr:
        return f"a variable is left: {check.expr}"
    if check.label_of is not None:
        parsed = LABEL_VALUES.match(check.expr)
        if parsed is None or parsed.group(2) != check.label_of:
            return f"not label_values(..., {check.label_of}): {check.expr}"
        values = await prometheus.label_values(check.label_of, parsed.group(1))
        return None if check.wanted_value in values else f"values {values}"
    result = await prometheus.query(check.expr, at=time.time() + check.at_offset_s)
    if not result:
        return "no series"
    if not_numbers := [series.labels for series in result if not math.isfinite(series.value)]:
        return f"NaN or infinite (nothing counted?): {not_numbers}"
    lacking = [series.labels for series in result
               if not all(series.labels.get(label) for label in check.labels)]
    return f"series without {sorted(check.labels)}: {lacking}" if lacking else None


async def problems(prometheus: Prometheus, checks: list[Check]) -> dict[str, str]:
    """Each failing check (by source and query) with what is wrong with it."""
    found = {}
    for check in checks:
        wrong = await problem(prometheus, check)
        if wrong is not None:
            found[f"{check.source}: {check.expr}"] = wrong
    return found


# -- what the stream fixes ---------------------------------------------------------------------


def counters(expr: str) -> str:
    """``expr`` with each windowed rate or increase replaced by the counter itself."""
    return WINDOWED.sub(r"\1", expr)


def panel(checks: list[Check], title: str, ref: str = "A") -> str:
    """The query of the dashboard panel ``title``'s target ``ref``, over its counters."""
    (expr,) = [c.expr for c in checks if c.source == f"panel {title!r} {ref}"]
    return counters(expr)


async def values_by(prometheus: Prometheus, expr: str, *labels: str) -> dict[tuple[str, ...],
                                                                                float]:
    return {tuple(series.labels.get(label, "") for label in labels): series.value
            for series in await prometheus.query(expr)}


async def stream_problems(prometheus: Prometheus, checks: list[Check],
                          verdicts: list[dict[str, Any]], judge_calls: int) -> dict[str, object]:
    """Where the panels disagree with what the stream fixes (``verdicts``: the topic's;
    ``judge_calls``: the requests the judge received)."""
    found: dict[str, object] = {}
    tally = Counter((v["rule"], v["verdict"]) for v in verdicts)
    counted = await values_by(prometheus, panel(checks, "Verdicts per second, by rule and verdict"),
                              "rule", "verdict")
    if {key: value for key, value in counted.items() if value} != dict(tally):
        found["verdicts by rule and verdict"] = (counted, tally)
    shares = {(rule,): tally[rule, "pass"] / (tally[rule, "pass"] + tally[rule, "fail"])
              for rule, _ in tally if tally[rule, "pass"] + tally[rule, "fail"]}
    pass_rates = await values_by(prometheus, panel(checks, "Pass rate, by rule"), "rule")
    if pass_rates.keys() != shares.keys() or any(
            not math.isclose(pass_rates[rule], share) for rule, share in shares.items()):
        found["pass rate by rule"] = (pass_rates, shares)
    for ref in "ABC":
        quantile = await values_by(prometheus, panel(checks, "Judge latency", ref))
        if not all(math.isfinite(v) and v > 0 for v in quantile.values()) or not quantile:
            found[f"judge latency {ref}"] = quantile
    at_least = {
        "Judge cost in range": ((), 1e-12),
        "Dead letters in range": ((), 1),
        # The empty output, once for each rule.
        "Skipped traces per second, by rule and reason": (("missing_citation", "empty_output"), 1),
    }
    for title, (key, least) in at_least.items():
        labels = ("rule", "reason") if key else ()
        got = await values_by(prometheus, panel(checks, title), *labels)
        if not got.get(key, 0) >= least:
            found[title] = got
    found |= await account_problems(prometheus, checks, judge_calls)
    found |= await progress_problems(prometheus, checks)
    return found


async def account_problems(prometheus: Prometheus, checks: list[Check],
                           judge_calls: int) -> dict[str, object]:
    """Where the judge account's panels disagree with the judge's headers and its 429."""
    found: dict[str, object] = {}
    left = await values_by(prometheus, panel(checks, "Judge account: requests and tokens left"),
                           "budget")
    if left != {("requests",): REQUESTS_LEFT, ("tokens",): TOKENS_LEFT}:
        found["account left"] = left
    title = "Pace per replica and the fleet's"
    paces = await values_by(prometheus, panel(checks, title), "instance")
    fleet = await values_by(prometheus, panel(checks, title, "B"))
    paced = len(paces) == 1 and all(0 < pace <= REQUESTS_LIMIT for pace in paces.values())
    if not paced or list(fleet.values()) != [sum(paces.values())]:
        found["pace"] = (paces, fleet)
    job = f'job="{FULLNAME}"'
    calls = await values_by(prometheus, f"sum(groundedness_judge_calls_total{{{job}}})")
    if calls != {(): judge_calls}:
        found["judge calls"] = (calls, judge_calls)
    shares = await values_by(prometheus, panel(checks, "429s by code, share of judge calls"),
                             "code")
    expected = {(code,): (1 / judge_calls if code == "rate_limit_exceeded" else 0.0)
                for code in RATE_LIMIT_CODES}
    if shares.keys() != expected.keys() or any(
            not math.isclose(shares[code], share) for code, share in expected.items()):
        found["429 share by code"] = (shares, expected)
    return found


async def progress_problems(prometheus: Prometheus, checks: list[Check]) -> dict[str, object]:
    """Where the progress panel disagrees with one worker on a fresh group: nothing redone,
    its commits' progress above 0 bytes, none left out."""
    found: dict[str, object] = {}
    title = "Records redone after a hand-over, and the commit's progress size"
    redone = await values_by(prometheus, panel(checks, title), "reason")
    if redone != {("skipped_done",): 0, ("reread",): 0}:
        found["records redone"] = redone
    size = await values_by(prometheus, panel(checks, title, "B"))
    if not size or not all(math.isfinite(v) and v > 0 for v in size.values()):
        found["commit progress size"] = size
    if (overflow := await values_by(prometheus, panel(checks, title, "C"))) != {(): 0}:
        found["commit progress overflow"] = overflow
    return found


# -- the worker and its stream ---------------------------------------------------------------


def stream() -> tuple[list[bytes | None], set[str]]:
    """The records, and the traces that must get a verdict."""
    judged = {f"dash-pass-{n}": f"Prorated [1]. [[score=5]] ({n})" for n in range(6)}
    judged |= {f"dash-fail-{n}": f"Never refunded. [[score=1]] ({n})" for n in range(4)}
    judged["dash-error"] = "Too long for the judge. [[context_length]]"
    # Its first call is refused for the account's rate (429 rate_limit_exceeded), then judged.
    judged["dash-429"] = "Prorated [1]. [[fail=1 status=429 retry_after=0]] [[score=5]]"
    # Each of two projects: the panels by project read them.
    values: list[bytes | None] = [
        trace(trace_id, text, retrieved_documents=DOCS, project_id=("checkout", "search")[n % 2])
        for n, (trace_id, text) in enumerate(judged.items())]
    values.append(trace("dash-empty", "", retrieved_documents=DOCS))  # skipped: empty_output
    values.append(b"{not json")  # dead-lettered
    return values, set(judged)


@pytest.fixture
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    binary = find_tool("helm")
    if binary is None or find_tool("prometheus") is None:
        pytest.skip("helm and prometheus are needed (make helm prometheus)")
    return Helm(binary=binary, env=private_env(tmp_path_factory.mktemp("helm-home")))


async def test_every_dashboard_query_and_alert_returns_labelled_series_from_a_real_worker(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient, helm: Helm,
) -> None:
    judge, server = fake_judge
    judge.account_headers = ACCOUNT_HEADERS
    board = yaml.safe_load(DASHBOARD_PATH.read_text(encoding="utf-8"))
    checks = dashboard_checks(board) + alert_checks(chart_alerts(helm))
    topics = Topics.fresh("dashboard")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    port = free_port()
    # A budget far from spent: its gauge is the budget alert's series.
    env = worker_env(topics.env(kafka), server.url, RULES="groundedness,missing_citation",
                     HEALTH_PORT=str(port), JUDGE_BUDGET_USD_PER_DAY="1000", **PRICES)
    values, judged = stream()
    job = f'job="{FULLNAME}"'

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(env)
        await wait_status(http, f"http://127.0.0.1:{port}/readyz", 200, timeout_s=60)
        async with running_prometheus(f"127.0.0.1:{port}", tmp_path / "prometheus",
                                      job=FULLNAME, namespace=NAMESPACE) as prometheus:
            # Scraped before the stream, so the counters' rates see it go by.
            # A project's series starts with its first verdict (no project is known before),
            # and a rate misses a series' first increment: the first trace of each project
            # goes first, scraped, then the rest increase series Prometheus has seen.
            await produce(kafka, topics.traces, values[:2])
            assert await out.wait_for_count(4, timeout_s=60), worker.log()  # 2 rules each
            await prometheus.wait_until(
                f"timestamp(up{{{job}}}) > {time.time() + 2 * SCRAPE_INTERVAL_S}", timeout_s=30)
            await produce(kafka, topics.traces, values[2:])
            assert await out.wait_for(judged, timeout_s=90), worker.log()
            committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
            assert committed == ends, worker.log()
            # A scrape after the last verdict and commit, with every partition's lag (reported
            # every few seconds); neither wait names a metric the checks are about.
            done = time.time()
            await prometheus.wait_until(f"timestamp(up{{{job}}}) > {done + SCRAPE_INTERVAL_S}",
                                        timeout_s=30)
            await prometheus.wait_until(
                f'count(count by (partition) ({{{job}, partition=~".+"}})) >= {PARTITIONS}',
                timeout_s=30)

            assert await problems(prometheus, checks) == {}
            total = sum((await values_by(prometheus, panel(
                checks, "Verdicts per second, by rule and verdict"), "rule", "verdict")).values())
            assert await out.wait_for_count(int(total), timeout_s=30), "counted, not published"
            assert await stream_problems(prometheus, checks, out.verdicts, judge.count()) == {}

            # The same checks with one metric renamed fail exactly the queries naming it.
            metrics = sorted({m for check in checks for m in METRIC.findall(check.expr)})
            for metric in metrics:
                failing = await problems(prometheus, renamed(checks, metric))
                naming = {f"{c.source}: {c.expr}" for c in renamed(checks, metric)
                          if f"{metric}_renamed" in c.expr}
                assert set(failing) == naming, metric
        assert await worker.terminate() == 0

    kinds = {check.source.split()[0] for check in checks}
    print(f"\n{len(checks)} queries checked ({', '.join(sorted(kinds))}), "
          f"{len(metrics)} metrics each shown to fail when renamed:")
    for check in checks:
        print(f"  {check.source}: {check.expr}")
    assert {"panel", "variable", "alert"} <= kinds


# -- the checks themselves, without a server -------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("a > 5", "a > bool 5"),
        ('x{rule!="g",verdict=~"a|b"} / y{a="<>"} >= 0.05',
         'x{rule!="g",verdict=~"a|b"} / y{a="<>"} >= bool 0.05'),
        ("a > 1 and deriv(b[15m:1m]) > 0", "a > bool 1 and deriv(b[15m:1m]) > bool 0"),
        ("max(c) == 1", "max(c) == bool 1"),
        ("a > bool 1", "a > bool 1"),
        ('a{b="x\\"<"} < 3', 'a{b="x\\"<"} < bool 3'),
    ],
)
def test_comparisons_become_bool_ones_and_label_matchers_stay(expr: str, expected: str) -> None:
    assert as_bool(expr) == expected


def test_dashboard_variables_are_all_given_values() -> None:
    board = yaml.safe_load(DASHBOARD_PATH.read_text(encoding="utf-8"))
    checks = dashboard_checks(board)
    assert checks
    assert [c.expr for c in checks if "$" in c.expr] == []
    assert substitute("rate(x[$__rate_interval]) $__range ${job}", GRAFANA_VARIABLES | PICKED) \
        == f"rate(x[1m]) 1h {FULLNAME}"
