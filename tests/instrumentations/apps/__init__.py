"""The RAG programs, each run from the repo's root as
``.venv-instrumentations/bin/python -m tests.instrumentations.apps.NAME``. They import their
instrumentations, which are only in that venv: pyproject's mypy ``exclude`` keeps this folder
out of the project venv's check, and ``make lint-instrumentations`` checks it against that venv.
"""
