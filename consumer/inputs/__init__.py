"""The input formats' names, kept apart from the registry (``formats.py``) so that a decoder
can name its own format without importing the registry that imports it."""

from typing import Literal

OtlpEncoding = Literal["otlp_proto", "otlp_json"]
FormatName = Literal["trace_json", OtlpEncoding]
