"""The worker's Grafana dashboard, built with the Grafana Foundation SDK.

``python -m scripts.dashboard`` (``make dashboard``) writes it to the Helm chart, which ships
it as a ConfigMap for Grafana's dashboard sidecar (``grafanaDashboard.enabled``).
tests/deploy/test_dashboard.py fails when the committed JSON differs from what this module
builds, and when a query names a metric ``consumer.ops.metrics`` does not define.

Every query selects ``{namespace=~"$namespace", job=~"$job"}``: a Prometheus without a
``namespace`` label still matches, as ``All`` is ``.*`` (which matches the empty value).
"""

from __future__ import annotations

import json
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    DynamicConfigValue,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

DASHBOARD_PATH = (
    Path(__file__).resolve().parents[1]
    / "helm"
    / "groundedness-worker"
    / "dashboards"
    / "groundedness-worker.json"
)
UID = "groundedness-worker"

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
SELECTOR = 'namespace=~"$namespace", job=~"$job"'
RATE = "$__rate_interval"
# A variable's options come from a series every worker exposes from its start.
ALWAYS_THERE = "groundedness_in_flight"


def _select(metric: str, *matchers: str) -> str:
    """``metric{matchers..., namespace, job}``: every query is scoped by the variables."""
    return f"{metric}{{{', '.join([*matchers, SELECTOR])}}}"


NAMED_PROJECT = 'project!=""'  # the by-project panels: traces that name no project left out


def _rate(metric: str, *matchers: str) -> str:
    return f"rate({_select(metric, *matchers)}[{RATE}])"


def _query(expr: str, legend: str, ref_id: str = "A") -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .range()
    )


def _thresholds(*steps: tuple[float | None, str]) -> dashboard_builders.ThresholdsConfig:
    return (
        dashboard_builders.ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(value=value, color=color) for value, color in steps])
    )


def _graph(title: str, description: str, unit: str, *queries: prometheus.Dataquery,
           stacked: bool = False, width: int = 12) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .height(8)
        .span(width)
        .fill_opacity(10)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["mean", "max", "lastNotNull"])
        )
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI))
    )
    if stacked:
        panel = panel.stacking(
            common_builders.StackingConfig().mode(common.StackingMode.NORMAL)
        ).fill_opacity(40)
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _threshold_line(panel: timeseries.Panel, threshold: float) -> timeseries.Panel:
    """``panel`` with a red line at ``threshold`` (an alert's)."""
    return panel.thresholds(_thresholds((None, "green"), (threshold, "red"))).thresholds_style(
        common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE)
    )


def _stat(title: str, description: str, unit: str, query: prometheus.Dataquery,
          thresholds: dashboard_builders.ThresholdsConfig) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(8)
        .span(6)
        .thresholds(thresholds)
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.AREA)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        .with_target(query)
    )


def _verdict_panels() -> list[timeseries.Panel]:
    verdicts = "groundedness_verdicts_total"
    passed = _rate(verdicts, 'verdict="pass"')
    judged = _rate(verdicts, 'verdict=~"pass|fail"')
    errors = _rate(verdicts, 'verdict="error"')
    return [
        _graph(
            "Verdicts per second, by rule and verdict",
            "Verdicts the broker acknowledged (groundedness_verdicts_total).",
            "short",
            _query(f"sum by (rule, verdict) ({_rate(verdicts)})", "{{rule}} {{verdict}}"),
            stacked=True,
            width=24,
        ),
        _graph(
            "Pass rate, by rule",
            "pass / (pass + fail): the share of judged traces that passed. `error` verdicts "
            "are left out (see Error share).",
            "percentunit",
            _query(
                f"sum by (rule) ({passed}) / sum by (rule) ({judged})",
                "{{rule}}",
            ),
        ).max(1),
        _threshold_line(_graph(
            "Error share, by rule",
            "error / all verdicts of a rule. The alert fires above 5% for groundedness (the "
            "judge could not decide); a deterministic rule's error is a bug.",
            "percentunit",
            _query(
                f"sum by (rule) ({errors}) / sum by (rule) ({_rate(verdicts)})",
                "{{rule}}",
            ),
        ), 0.05),
        _graph(
            "Verdicts per second, by project and verdict",
            "The traces' projects (project_id; from spans the project attribute, else "
            "service.name): METRICS_MAX_PROJECTS of them per worker, the rest as other, "
            "traces naming none are left out (groundedness_verdicts_total{project}).",
            "short",
            _query(f"sum by (project, verdict) ({_rate(verdicts, NAMED_PROJECT)})",
                   "{{project}} {{verdict}}"),
            stacked=True,
        ),
        _graph(
            "Judge cost per hour, by project",
            "USD per hour at the current pace, by the traces' project "
            "(groundedness_judge_cost_usd_total{project}; traces naming none left out).",
            "currencyUSD",
            _query("sum by (project) "
                   f"({_rate('groundedness_judge_cost_usd_total', NAMED_PROJECT)}) * 3600",
                   "{{project}}"),
            stacked=True,
        ),
    ]


def _judge_panels() -> list[timeseries.Panel | stat.Panel]:
    buckets = _rate("groundedness_judge_latency_seconds_bucket")
    latency = [
        _query(f"histogram_quantile({q}, sum by (le) ({buckets}))", f"p{name}", ref_id)
        for q, name, ref_id in ((0.5, "50", "A"), (0.95, "95", "B"), (0.99, "99", "C"))
    ]
    return [
        _graph(
            "Judge latency",
            "Time to a judge result per evaluation, retries included "
            "(groundedness_judge_latency_seconds).",
            "s",
            *latency,
        ),
        _stat(
            "Workers with the judge circuit open",
            "Replicas holding because the judge is down for everyone "
            "(groundedness_circuit_open). Traces wait; none are failed.",
            "short",
            _query(f"sum({_select('groundedness_circuit_open')})", "open"),
            _thresholds((None, "green"), (1, "red")),
        ),
        _stat(
            "Judge cost in range",
            "USD spent on the judge over the dashboard's time range "
            "(groundedness_judge_cost_usd_total; 0 without JUDGE_PRICE_*_PER_MILLION).",
            "currencyUSD",
            _query(
                f"sum(increase({_select('groundedness_judge_cost_usd_total')}[$__range]))",
                "USD",
            ),
            _thresholds((None, "blue")),
        ),
        _graph(
            "Judge tokens per hour, by kind",
            "Tokens the judge reported, at the current pace (groundedness_judge_tokens_total).",
            "short",
            _query(
                f"sum by (kind) ({_rate('groundedness_judge_tokens_total')}) * 3600",
                "{{kind}}",
            ),
            stacked=True,
        ),
        _graph(
            "Judge cost per hour",
            "USD per hour at the current pace (groundedness_judge_cost_usd_total).",
            "currencyUSD",
            _query(f"sum({_rate('groundedness_judge_cost_usd_total')}) * 3600", "USD/h"),
        ),
        *_account_panels(),
    ]


def _account_panels() -> list[timeseries.Panel]:
    """The judge's account, which every replica shares, and how the replicas pace for it."""
    pace = _select("groundedness_judge_pace_requests_per_minute")
    calls = _rate("groundedness_judge_calls_total")
    limited = _rate("groundedness_judge_rate_limited_total")
    return [
        _graph(
            "Judge account: requests and tokens left",
            "What the judge account has left, as the latest x-ratelimit-remaining-requests / "
            "-tokens headers said (groundedness_judge_account_remaining). The account is "
            "shared by every replica, so this is the highest any replica saw, not a sum; a "
            "replica that never saw the headers reports 0, and an endpoint that sends none "
            "(vLLM, many gateways) shows 0 throughout. Pacing keeps it about half full: near "
            "0 the replicas together, or another user of the account, spend it faster than "
            "it refills (see 429s by code).",
            "short",
            _query(
                f"max by (budget) ({_select('groundedness_judge_account_remaining')})",
                "{{budget}} left",
            ),
            width=8,
        ),
        _graph(
            "Pace per replica and the fleet's",
            "Judge calls per minute each replica lets out, steered by the account's headers "
            "and its 429s (groundedness_judge_pace_requests_per_minute; 0: not paced, only "
            "JUDGE_REQUESTS_PER_MINUTE / JUDGE_TOKENS_PER_MINUTE hold it). The fleet's is "
            "their sum, of the paced ones: it settles near the account's refill. A fleet "
            "pace well under the account's limit with lag growing means another user takes "
            "the account's budget, or the account's tier is too small for the traffic.",
            "short",
            _query(f"sum by (instance) ({pace})", "{{instance}}"),
            _query(f"sum({pace})", "fleet", "B"),
            width=8,
        ),
        _threshold_line(_graph(
            "429s by code, share of judge calls",
            "Judge calls answered 429, by the error's code, over every call sent, probes "
            "included (groundedness_judge_rate_limited_total / groundedness_judge_calls_total). "
            "rate_limit_exceeded: the account's rate, each one slows the replica that met it; "
            "the alert fires above 1% for 10 minutes: the replicas together exceed the limit "
            "despite pacing (check the JUDGE_*_PER_MINUTE ceilings, other users of the "
            "account, or raise its tier). insufficient_quota: out of credit, the workers hold "
            "until it is topped up. none: a 429 without a code (a gateway's).",
            "percentunit",
            _query(
                f"sum by (code) ({limited}) / ignoring(code) group_left sum({calls})",
                "{{code}}",
            ),
            width=8,
        ), 0.01),
    ]


def _input_panels() -> list[timeseries.Panel | stat.Panel]:
    return [
        _graph(
            "Consumer lag, by partition",
            "Records of a partition not yet fetched (groundedness_consumer_lag); a partition "
            "is reported by the replica that owns it.",
            "short",
            _query(
                f"max by (topic, partition) ({_select('groundedness_consumer_lag')})",
                "{{topic}}/{{partition}}",
            ),
            stacked=True,
        ),
        _graph(
            "Skipped traces per second, by rule and reason",
            "Traces a rule gave no verdict: empty_output, no_answer_found (LLM spans that "
            "recorded no answer: see the worker's trace_answer_not_found warning), filtered "
            "(<RULE>_FILTER or TRACE_FILTER), sampled_out (<RULE>_SAMPLE_RATE or SAMPLE_RATE) "
            "(groundedness_skipped_total; a trace without an answer counts once per rule).",
            "short",
            _query(f"sum by (rule, reason) ({_rate('groundedness_skipped_total')})",
                   "{{rule}} {{reason}}"),
            stacked=True,
            width=6,
        ),
        _stat(
            "Dead letters in range",
            "Records sent to DLQ_TOPIC as undecodable over the dashboard's time range "
            "(groundedness_dead_letters_total); each carries its reason.",
            "short",
            _query(
                f"sum(increase({_select('groundedness_dead_letters_total')}[$__range]))",
                "dead letters",
            ),
            _thresholds((None, "green"), (1, "red")),
        ),
        _progress_panel(),
    ]


def _progress_panel() -> timeseries.Panel:
    """What a hand-over redoes, and the commit progress that keeps it small."""
    redone = _rate("groundedness_records_redone_total")
    size = _rate("groundedness_commit_metadata_bytes_bucket")
    overflow = _rate("groundedness_commit_metadata_overflow_total")
    return _graph(
        "Records redone after a hand-over, and the commit's progress size",
        "Records met again after a partition changed hands or a worker restarted "
        "(groundedness_records_redone_total): skipped_done were finished by the previous "
        "owner and are skipped; reread are judged again (paid calls). Bursts at deploys and "
        "rebalances are expected; a steady reread rate means hand-overs keep happening: look "
        "for restarts (OOM kills, failing probes) and rebalances. Right axis: p95 size of the "
        "progress each commit carries in its metadata (groundedness_commit_metadata_bytes; at "
        "most 4,000 bytes): the records unfinished above the committed offset and, with span "
        "input, the finished traces with spans among them. Commits left out did not fit "
        "(groundedness_commit_metadata_overflow_total): nothing is lost, the partition's last "
        "commit stands, but the next hand-over redoes more.",
        "short",
        _query(f"sum by (reason) ({redone})", "redone {{reason}}"),
        _query(f"histogram_quantile(0.95, sum by (le) ({size}))", "progress p95", "B"),
        _query(f"sum({overflow})", "commits left out", "C"),
        width=24,
    ).override_by_query("B", [
        DynamicConfigValue(id_val="unit", value="bytes"),
        DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
    ])


def _span_panels() -> list[timeseries.Panel]:
    return [
        _graph(
            "Open traces",
            "Traces being assembled from spans (groundedness_open_traces; TRACES_FORMAT "
            "otlp_proto / otlp_json only). At MAX_OPEN_TRACES the oldest closes with what it "
            "has (closed_by capacity).",
            "short",
            _query(f"sum({_select('groundedness_open_traces')})", "open traces"),
        ),
        _graph(
            "Traces closed per second: quiet, max wait or capacity",
            "quiet: the root arrived, then no span for TRACE_QUIET_SECONDS. A steady "
            "max_wait share means roots that never arrive: traces split over partitions, or "
            "a root span the application does not export. capacity: MAX_OPEN_TRACES (or "
            "about 256 MiB of spans) was reached and the oldest trace was judged with the "
            "spans it had: raise MAX_OPEN_TRACES or the memory limit, or add replicas "
            "(groundedness_traces_closed_total).",
            "short",
            _query(
                f"sum by (closed_by) ({_rate('groundedness_traces_closed_total')})",
                "{{closed_by}}",
            ),
            stacked=True,
        ),
    ]


def _variables() -> list[dashboard_builders.DatasourceVariable
                      | dashboard_builders.QueryVariable]:
    everything = VariableOption(selected=True, text="All", value="$__all")

    def label(name: str, query: str) -> dashboard_builders.QueryVariable:
        return (
            dashboard_builders.QueryVariable(name)
            .label(name)
            .datasource(DATASOURCE)
            .query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(everything)
        )

    return [
        dashboard_builders.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus"),
        label("namespace", f"label_values({ALWAYS_THERE}, namespace)"),
        label("job", f'label_values({ALWAYS_THERE}{{namespace=~"$namespace"}}, job)'),
    ]


def build() -> dashboard_builders.Dashboard:
    """The dashboard: verdicts, the judge, the Kafka input, and the span input."""
    board = (
        dashboard_builders.Dashboard("Groundedness worker")
        .uid(UID)
        .description("Verdicts, the judge, and the input of the groundedness worker.")
        .tags(["groundedness", "llm", "kafka"])
        .time("now-6h", "now")
        .refresh("1m")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .editable()
    )
    for variable in _variables():
        board = board.with_variable(variable)
    sections: list[tuple[str, list[timeseries.Panel] | list[timeseries.Panel | stat.Panel]]] = [
        ("Verdicts", _verdict_panels()),
        ("Judge", _judge_panels()),
        ("Kafka input", _input_panels()),
        ("Span input (TRACES_FORMAT otlp_*)", _span_panels()),
    ]
    panel_id = 0
    for title, panels in sections:
        panel_id += 1
        board = board.with_row(dashboard_builders.Row(title).id(panel_id))
        for panel in panels:
            panel_id += 1
            board = board.with_panel(panel.id(panel_id))
    return board


def render() -> str:
    """The committed text of the dashboard JSON."""
    model = build().build()
    return json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main() -> None:
    """Regenerate the dashboard JSON."""
    DASHBOARD_PATH.parent.mkdir(parents=True, exist_ok=True)
    DASHBOARD_PATH.write_text(render(), encoding="utf-8")
    print(DASHBOARD_PATH)


if __name__ == "__main__":
    main()
