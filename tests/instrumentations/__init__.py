"""Real instrumentation output: small RAG programs (``apps/``) traced by instrumentations this
project did not write, run in venvs of their own (``make instrumentation-venv``, from
``requirements.txt``; ``make instrumentation-venv-2``, from ``requirements-2.txt``, for those
whose pins conflict with the first's). ``cases`` and ``telemetry`` import only the standard
library and the OTel SDK, so every venv imports them."""
