"""The RAG programs, each run from the repo's root as
``.venv-instrumentations/bin/python -m tests.instrumentations.apps.NAME``, or with
``.venv-instrumentations-2`` for those whose instrumentation needs the second venv
(``openlit_openai``; the Makefile's ``IAPPS2``). They import their instrumentations, which are
only in that venv: pyproject's mypy ``exclude`` keeps this folder out of the project venv's
check, and ``make lint-instrumentations`` checks each program against its venv.
"""
