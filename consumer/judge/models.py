"""What an endpoint's model list (``GET /models``) says of the model the worker asks for (pure).

The asked model is offered when the list names it, or when the list holds a model marked as
answering whatever model is asked for, under its own name: ``owned_by`` set to
``ANSWERS_ANY_MODEL``. The project's local judge lists itself so (``consumer/localjudge``):
it takes ``JUDGE_MODEL`` as given (``gpt-4o-mini`` by default) and answers as what it is, so
the start-up check must not warn that the model is missing, and the verdicts name it
(``rules/verdicts.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

# The ``owned_by`` of a listed model that answers any model name asked for.
ANSWERS_ANY_MODEL = "groundedness-worker"


def answering_model(asked: str, listed: Iterable[tuple[str, str | None]]) -> str | None:
    """The model that will answer ``asked`` by this list of ``(id, owned_by)``: ``asked``
    itself when listed, else a model that answers any name; None when neither is listed."""
    entries = list(listed)
    if any(model_id == asked for model_id, _ in entries):
        return asked
    return next((model_id for model_id, owner in entries if owner == ANSWERS_ANY_MODEL), None)
