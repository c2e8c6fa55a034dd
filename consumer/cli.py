"""The ``groundedness`` command line."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog
from rich.console import Console

from consumer.cost.pricing import DEFAULT_PRICE_PER_MILLION_TOKENS
from consumer.errors import ConfigError
from consumer.inputs.formats import file_formats
from consumer.jsonl import decode_text, read_text
from consumer.ops.collector import tune_collector
from consumer.ops.logs import configure_logging
from consumer.ops.progress import interactive
from consumer.samples import DEFAULT as DEFAULT_SAMPLE
from consumer.samples import SAMPLES, print_sample
from consumer.settings import Settings, load_settings, lookalike_variables
from consumer.settings_help import settings_help
from consumer.tail.selection import OUTCOMES, RULE_NAMES

EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell's tools end when their reader leaves


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run one command; the return value is the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.command
    try:
        return command(args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader of stdout is gone (`| head`): nothing more to show
        # Python's own flush at exit would fail again, with a traceback: stdout goes nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="groundedness", description="Judge whether LLM answers are grounded in their sources."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="consume TRACES_TOPIC and publish verdicts",
        description="The worker: consume TRACES_TOPIC, publish a verdict per trace and rule\n"
                    "to VERDICTS_TOPIC (undecodable records to DLQ_TOPIC); SIGTERM drains and\n"
                    "exits 0. It takes no options: the environment configures it.",
        epilog=settings_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    run.set_defaults(command=_run)

    local = commands.add_parser(
        "local-judge", help="serve the offline heuristic judge",
        description="The offline heuristic judge behind the OpenAI chat-completions API, for "
                    "demos and tests: no key, no network.")
    local.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: %(default)s; 0.0.0.0 for every "
                            "interface)")
    local.add_argument("--port", type=_port, default=8000,
                       help="port to listen on (default: %(default)s; 0 for any free one); "
                            "point the worker at it with OPENAI_BASE_URL=http://HOST:PORT/v1")
    local.add_argument("--requests-per-minute", type=_positive, metavar="N",
                       help="answer as an account limited to N requests a minute would: "
                            "429s and x-ratelimit-* headers (default: no limit)")
    local.add_argument("--tokens-per-minute", type=_positive, metavar="N",
                       help="the same for N tokens a minute (prompt estimate + max_tokens)")
    local.set_defaults(command=_local_judge)

    load = commands.add_parser("load-sample", help="produce the bundled sample traces")
    load.add_argument("--topic", help="topic to load (default: TRACES_TOPIC)")
    load.add_argument("--limit", type=int, help="load only the first N traces")
    load.set_defaults(command=_load_sample)

    replay = commands.add_parser(
        "replay", help="judge one time window of a topic again, outside the consumer group"
    )
    replay.add_argument("--from", dest="start", required=True, metavar="ISO",
                        help="first instant of the window (ISO 8601; UTC when no zone)")
    replay.add_argument("--to", dest="end", metavar="ISO",
                        help="end of the window, excluded (default: the topic's end now)")
    replay.add_argument("--topic", help="topic to replay (default: TRACES_TOPIC)")
    replay.add_argument("--summary-json", type=Path, metavar="PATH",
                        help="also write the summary as JSON")
    replay.add_argument("--dry-run", action="store_true",
                        help="only count and estimate tokens: no judge calls, nothing published")
    replay.add_argument("--price-per-million-tokens", type=float, metavar="USD",
                        default=DEFAULT_PRICE_PER_MILLION_TOKENS,
                        help="the dry run's price for every token when JUDGE_PRICE_* are "
                             "unset (default: %(default)s, gpt-4o-mini input pricing)")
    replay.add_argument("--batch", action="store_true",
                        help="send the judge's requests through the OpenAI Batch API (half the "
                             "price, answered within 24 h); the same command again resumes")
    replay.add_argument("--batch-state", type=Path, metavar="PATH",
                        help="the batch replay's state file (default: named after the topic "
                             "and window, in the working directory)")
    replay.set_defaults(command=_replay)

    verdicts = commands.add_parser(
        "verdicts", help="show the verdicts on VERDICTS_TOPIC as they come, outside any "
                         "consumer group"
    )
    verdicts.add_argument("--rule", action="append", choices=RULE_NAMES,
                          help="only this rule's verdicts (again for several)")
    verdicts.add_argument("--verdict", action="append", choices=OUTCOMES,
                          help="only these verdicts (again for several)")
    verdicts.add_argument("--trace-id", action="append", metavar="ID",
                          help="only this trace's verdicts (again for several)")
    verdicts.add_argument("--from-beginning", action="store_true",
                          help="from the oldest verdict still on the topic (default: from now)")
    verdicts.add_argument("--limit", type=_positive, metavar="N",
                          help="stop after N verdicts shown")
    verdicts.add_argument("--until-end", action="store_true",
                          help="stop at the end of the topic as it was at start")
    verdicts.add_argument("--json", action="store_true",
                          help="one JSON line per verdict (the default when stdout is not a "
                               "terminal; else a live table)")
    verdicts.set_defaults(command=_verdicts)

    check = commands.add_parser(
        "check", help="run the rules of RULES on traces from a JSON or JSON-lines file, "
                      "without Kafka"
    )
    check.add_argument("file", metavar="FILE",
                       help="one JSON document or JSON lines; - for stdin")
    check.add_argument("--format", dest="file_format", default="auto",
                       choices=("auto", *file_formats(), "labelled"),
                       help="trace events, OTLP JSON spans (TracesData, one per line or one "
                            "document) assembled into traces, or eval's labelled rows (id, "
                            "input, documents, output, label: groundedness sample); auto (the "
                            "default): OTLP JSON when the first JSON object has resourceSpans, "
                            "labelled when it has a label and no trace_id")
    check.set_defaults(command=_check)

    evaluate = commands.add_parser(
        "eval", help="measure the judge, or the rules, against labelled traces")
    evaluate.add_argument("--dataset", type=Path, required=True, metavar="FILE",
                          help="labelled JSON lines (input, documents, output, label), or a "
                               "file of another --format")
    evaluate.add_argument("--format", dest="dataset_format",
                          choices=("labelled", "aggrefact", "halubench", "rules"),
                          help="labelled: the worker's labelled JSON lines (the default, "
                               "unless the first line has labels per rule: rules); "
                               "aggrefact: LLM-AggreFact (doc, claim, label 1/0); halubench: "
                               "HaluBench (passage, question, answer, label PASS/FAIL); "
                               "benchmarks as CSV, JSON lines or Parquet (needs pyarrow), "
                               "reported beside their published figures; rules: trace events "
                               "with labels per rule (pass, fail, not_applicable), as "
                               "groundedness sample rules, each rule of RULES measured "
                               "against its labels")
    evaluate.add_argument("--json", type=Path, metavar="PATH",
                          help="also write the metrics here, as JSON (the table is printed "
                               "either way)")
    evaluate.add_argument("--plot", type=Path, metavar="PATH.png",
                          help="draw the score distribution per label (needs matplotlib)")
    evaluate.set_defaults(command=_eval)

    sample = commands.add_parser(
        "sample", help="the bundled data files: list them, print one, or its path",
        description="The data files installed with the package. Without NAME: the list; "
                    "with NAME: the file on stdout; --path: its path instead.",
        epilog='e.g. groundedness check "$(groundedness sample --path)"')
    sample.add_argument("name", nargs="?", metavar="NAME", choices=sorted(SAMPLES),
                        help=f"one of {', '.join(sorted(SAMPLES))}")
    sample.add_argument("--path", action="store_true",
                        help=f"print the file's path (NAME's, default: {DEFAULT_SAMPLE})")
    sample.set_defaults(command=_sample)
    return parser


def _settings(*, progress_bar: bool = False, require_threshold: bool = True,
              kafka: bool = False) -> Settings:
    """``kafka``: the command connects to Kafka, so its security settings must agree."""
    settings = load_settings(require_threshold=require_threshold, kafka=kafka)
    level = settings.log_level
    if progress_bar and interactive() and level == "info":
        level = "warning"  # a person watches the bar; per-record lines would bury it
    configure_logging(level, settings.log_format, settings.secrets())
    _warn_lookalikes()
    return settings


def _warn_lookalikes() -> None:
    """A variable that reads like one of the worker's but is not: said at start, as the
    worker runs on with that setting's default."""
    for warning in lookalike_variables(os.environ):
        structlog.get_logger(__name__).warning("setting_not_known", detail=warning)


def _run(_: argparse.Namespace) -> int:
    from consumer.worker import run_worker

    settings = _settings(kafka=True)
    tune_collector()  # for a long-running stream, once start-up has imported everything
    asyncio.run(run_worker(settings))
    return 0


def _local_judge(args: argparse.Namespace) -> int:
    from consumer.localjudge.responder import serve

    serve(args.host, args.port, args.requests_per_minute, args.tokens_per_minute)
    return 0


def _version() -> str:
    try:
        return importlib.metadata.version("groundedness-worker")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown (not installed)"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number, 0 to 65535, not {text!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, not {text!r}")
    return value


def _load_sample(args: argparse.Namespace) -> int:
    from consumer.load_sample import load_sample

    settings = load_settings(require_threshold=False, kafka=True)
    configure_logging(settings.log_level, settings.log_format, settings.secrets())
    _warn_lookalikes()
    count = asyncio.run(load_sample(settings, args.topic or settings.traces_topic, args.limit))
    print(f"loaded {count} traces into {args.topic or settings.traces_topic}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from consumer.replay.command import replay
    from consumer.replay.passes import ReplayRequest, parse_instant
    from consumer.replay.summary import summary_table

    start = parse_instant(args.start, "--from")
    end = parse_instant(args.end, "--to") if args.end is not None else None
    if args.price_per_million_tokens < 0:
        raise ConfigError("--price-per-million-tokens cannot be negative")
    if args.batch and args.dry_run:
        raise ConfigError("--batch and --dry-run do not go together: a dry run sends nothing "
                          "(run --dry-run alone for the estimate)")
    if args.batch_state is not None and not args.batch:
        raise ConfigError("--batch-state is the state of a --batch replay: add --batch")
    settings = _settings(progress_bar=True, kafka=True)
    request = ReplayRequest(
        topic=args.topic or settings.traces_topic, start=start, end=end,
        dry_run=args.dry_run, price_per_million_tokens=args.price_per_million_tokens,
        batch=args.batch, batch_state=args.batch_state,
    )
    summary = asyncio.run(replay(settings, request))
    Console().print(summary_table(summary))
    if args.summary_json is not None:
        _write_json(args.summary_json, summary)
    return 0 if summary["complete"] else EXIT_INTERRUPTED


def _verdicts(args: argparse.Namespace) -> int:
    from consumer.tail.command import Ended, VerdictsRequest, follow_verdicts
    from consumer.tail.display import JsonLines, LiveTable
    from consumer.tail.selection import Selection

    # On a terminal only warnings are logged: info lines would push the table around.
    settings = _settings(progress_bar=True, require_threshold=False, kafka=True)
    request = VerdictsRequest(Selection.of(args.rule, args.verdict, args.trace_id),
                              from_beginning=args.from_beginning, limit=args.limit,
                              until_end=args.until_end)
    as_json = args.json or not sys.stdout.isatty()
    display: JsonLines | LiveTable = (
        JsonLines(sys.stdout) if as_json else LiveTable(f"verdicts on {settings.verdicts_topic}"))
    with display:
        ended = asyncio.run(follow_verdicts(settings, request, display))
    return EXIT_INTERRUPTED if ended is Ended.STOPPED else 0


def _check(args: argparse.Namespace) -> int:
    from consumer.evaluation.check import check

    settings = _settings(progress_bar=True)
    try:
        # As bytes: text-mode reads translate a lone \r, which may stand inside a JSON line.
        text = (decode_text(sys.stdin.buffer.read()) if args.file == "-"
                else read_text(Path(args.file)))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"check: cannot read {args.file}: {exc}") from exc
    return asyncio.run(check(settings, text, args.file_format))


def _eval(args: argparse.Namespace) -> int:
    from consumer.evaluation.benchmarks.sets import BENCHMARKS
    from consumer.evaluation.judge_eval import evaluate_dataset, read_dataset, sniff_dataset_format
    from consumer.evaluation.report import benchmark_table, eval_table, plot_scores

    dataset_format = args.dataset_format or sniff_dataset_format(args.dataset)
    if dataset_format == "rules":
        return _eval_rules(args)
    settings = _settings(progress_bar=True)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise ConfigError("--plot needs matplotlib: pip install 'groundedness-worker[plot]'")
    _check_outputs(args.json, args.plot)  # before the judge is paid, not after
    rows = read_dataset(args.dataset, dataset_format)
    report = asyncio.run(evaluate_dataset(settings, rows, BENCHMARKS.get(dataset_format)))
    report["dataset"] = str(args.dataset)
    if args.json is not None:
        _write_json(args.json, report)
    Console().print(eval_table(report, str(args.dataset)))
    if "benchmark" in report:
        Console().print(benchmark_table(report))
    if args.plot is not None:
        plot_scores(args.plot, report)
    return 0


def _eval_rules(args: argparse.Namespace) -> int:
    from consumer.evaluation.report import rules_tables
    from consumer.evaluation.rule_eval import evaluate_rules, read_rule_dataset

    if args.plot is not None:
        raise ConfigError("--plot draws the judge's scores: not with --format rules")
    # MIN_ACCEPTABLE_SCORE only if groundedness is judged: RULES names it and the set labels it.
    settings = _settings(progress_bar=True, require_threshold=False)
    _check_outputs(args.json, None)
    rows = read_rule_dataset(args.dataset)
    report = asyncio.run(evaluate_rules(settings, rows))
    report["dataset"] = str(args.dataset)
    if args.json is not None:
        _write_json(args.json, report)
    for table in rules_tables(report, str(args.dataset)):
        Console().print(table)
    return 0


def _sample(args: argparse.Namespace) -> int:
    print_sample(args.name, path_only=args.path)
    return 0


# What the plot can be saved as (matplotlib's formats this project's docs show).
PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def _check_outputs(json_path: Path | None, plot_path: Path | None) -> None:
    """One line for an output that cannot be written, before any work is done."""
    for option, path in (("--json", json_path), ("--plot", plot_path)):
        if path is not None and not path.parent.is_dir():
            raise ConfigError(f"{option}: the directory {path.parent} does not exist")
    if plot_path is not None and plot_path.suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(f"--plot: {plot_path.name} is not one of "
                          f"{', '.join(PLOT_SUFFIXES)}: name the picture's format")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc}") from exc


if __name__ == "__main__":
    sys.exit(main())
