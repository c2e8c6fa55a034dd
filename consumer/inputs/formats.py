"""The input formats: every name ``TRACES_FORMAT`` (and ``check --format``) takes, and how a
record of it is read. The one place a new input format is added (docs/extending.md).

Two kinds. A record of an **event** format is one whole trace, judged on its own (the record
path, ``pipeline/records.py``). A record of a **span** format carries spans of any number of
traces, which each partition assembles into traces before judging (the span path,
``pipeline/spans.py``). The decoders are imported when first asked for, so that reading the
configuration (``groundedness --help``, a bad setting) does not load protobuf and the OTel
packages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING

from consumer.inputs import FormatName, OtlpEncoding

if TYPE_CHECKING:
    from consumer.telemetry.spans import DecodedRecord
    from schemas.trace import TraceEvent



@dataclass(frozen=True, slots=True)
class EventFormat:
    """Each record one trace event: ``decoder()`` takes its value (None for a tombstone) to a
    ``TraceEvent``, or raises ``DecodeError`` (the record is dead-lettered with its reason)."""

    name: FormatName
    in_files: bool  # ``check`` reads it from a file
    decode: str = "consumer.inputs.trace_json:decode_trace"  # "module:function"

    def decoder(self) -> Callable[[bytes | None], TraceEvent]:
        module, _, function = self.decode.partition(":")
        decode: Callable[[bytes | None], TraceEvent] = getattr(import_module(module), function)
        return decode


@dataclass(frozen=True, slots=True)
class SpanFormat:
    """Each record a batch of OTLP spans: ``decoder()`` takes its bytes to the kept spans;
    ``logs_decoder()`` a batch of OTLP log records to their GenAI events."""

    name: OtlpEncoding
    in_files: bool

    def decoder(self) -> Callable[[bytes], DecodedRecord]:
        from consumer.inputs.otlp.decode import decode_otlp

        return partial(decode_otlp, encoding=self.name)  # no frame of ours per record

    def logs_decoder(self) -> Callable[[bytes], DecodedRecord]:
        """The decoder of the collector's logs topic in the same encoding (``OTLP_LOGS_TOPIC``):
        its GenAI log records, which assembly joins to their spans."""
        from consumer.inputs.otlp.logs import decode_otlp_logs

        return partial(decode_otlp_logs, encoding=self.name)


Format = EventFormat | SpanFormat

TRACE_JSON = EventFormat("trace_json", in_files=True)
OTLP_PROTO = SpanFormat("otlp_proto", in_files=False)  # binary: the collector's default
OTLP_JSON = SpanFormat("otlp_json", in_files=True)
FORMATS: dict[str, Format] = {fmt.name: fmt for fmt in (TRACE_JSON, OTLP_PROTO, OTLP_JSON)}


def input_format(name: str) -> Format:
    """The format named ``name`` (settings have checked it is one)."""
    return FORMATS[name]


def file_formats() -> tuple[str, ...]:
    """The formats ``check`` reads from a file, in the registry's order."""
    return tuple(name for name, fmt in FORMATS.items() if fmt.in_files)
