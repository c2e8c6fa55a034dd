"""The ``groundedness`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence

from consumer.errors import ConfigError
from consumer.logs import configure_logging
from consumer.settings import Settings, load_settings

EXIT_CONFIG = 2


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
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="groundedness", description="Judge whether LLM answers are grounded in their sources."
    )
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="consume TRACES_TOPIC and publish verdicts")
    run.set_defaults(command=_run)

    local = commands.add_parser("local-judge", help="serve the offline heuristic judge")
    local.add_argument("--host", default="127.0.0.1")
    local.add_argument("--port", type=int, default=8000)
    local.set_defaults(command=_local_judge)

    load = commands.add_parser("load-sample", help="produce the bundled sample traces")
    load.add_argument("--topic", help="topic to load (default: TRACES_TOPIC)")
    load.add_argument("--limit", type=int, help="load only the first N traces")
    load.set_defaults(command=_load_sample)
    return parser


def _settings() -> Settings:
    settings = load_settings()
    configure_logging(settings.log_level, settings.log_format, settings.secrets())
    return settings


def _run(_: argparse.Namespace) -> int:
    from consumer.app import run_worker

    settings = _settings()
    asyncio.run(run_worker(settings))
    return 0


def _local_judge(args: argparse.Namespace) -> int:
    from consumer.local_judge import serve

    serve(args.host, args.port)
    return 0


def _load_sample(args: argparse.Namespace) -> int:
    from consumer.sample import load_sample

    settings = load_settings(require_threshold=False)
    configure_logging(settings.log_level, settings.log_format, settings.secrets())
    count = asyncio.run(load_sample(settings, args.topic or settings.traces_topic, args.limit))
    print(f"loaded {count} traces into {args.topic or settings.traces_topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
