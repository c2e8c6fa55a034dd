"""Real instrumentation output: small RAG programs (``apps/``) traced by instrumentations this
project did not write, run in a venv of their own (``make instrumentation-venv``, from
``requirements.txt``). ``cases`` and ``telemetry`` import only the standard library and the OTel
SDK, so both venvs import them."""
