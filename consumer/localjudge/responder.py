"""``groundedness local-judge``: the chat-completions API backed by the offline heuristic.

For demos without an API key. It reads the ``groundedness@v1`` data block back from the
messages and scores it with ``heuristic.py`` (word overlap, not an LLM; its measured accuracy
is printed by ``scripts/heuristic-accuracy``). Any ``response_format`` is
accepted: the answer is always the verdict JSON. The health probe gets ``{"ok": true}``.

Whatever model is asked for (``JUDGE_MODEL``, ``gpt-4o-mini`` unless set), it answers as what
it is, ``MODEL`` (the heuristic's version in its name), so a verdict never credits a model
that did not judge. ``GET /models`` lists ``MODEL`` alone, owned by ``ANSWERS_ANY_MODEL``:
the worker's start-up check reads that as "any name is answered" (``judge/models.py``).
With ``--requests-per-minute`` or ``--tokens-per-minute`` it answers as an OpenAI account with
those limits would (``account.py``): 429s and ``x-ratelimit-*`` headers, for a demo of pacing.
"""

from __future__ import annotations

import errno
import json
from typing import Any

from consumer.errors import ConfigError
from consumer.judge.models import ANSWERS_ANY_MODEL
from consumer.judge.prompt import CHARS_PER_TOKEN, read_data
from consumer.localjudge.account import AccountLimits
from consumer.localjudge.heuristic import HEURISTIC_VERSION, assess, document_texts
from consumer.localjudge.replies import Reply, Responder, completion, error_reply, is_probe
from consumer.localjudge.server import JudgeServer

DEFAULT_PORT = 8000
MODEL = f"groundedness-local-judge-v{HEURISTIC_VERSION}"
NO_DATA_MESSAGE = (
    "The local judge only answers groundedness@v1 requests: no fenced data block was found "
    "in the user message."
)


class LocalJudge:
    """A ``Responder`` that scores ``groundedness@v1`` requests with the offline heuristic."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        """Answer one chat-completions request."""
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return error_reply(400, "'messages' must be a non-empty array.", param="messages")
        model = MODEL  # not the name asked for: the verdict names who answered
        prompt_tokens = len(json.dumps(messages, ensure_ascii=False)) // CHARS_PER_TOKEN
        try:
            data = read_data(messages)
        except ValueError:
            if is_probe(messages):
                return Reply(body=completion('{"ok": true}', model, prompt_tokens, 3))
            return error_reply(400, NO_DATA_MESSAGE, param="messages")
        documents = document_texts(data.get("documents") or [])
        assessment = assess(documents, str(data.get("answer") or ""))
        content = json.dumps(
            {
                "score": assessment.score,
                "reason": assessment.reason,
                "unsupported_claims": list(assessment.unsupported_claims),
            },
            ensure_ascii=False,
        )
        completion_tokens = max(1, len(content) // CHARS_PER_TOKEN)
        return Reply(body=completion(content, model, prompt_tokens, completion_tokens))


def local_judge_server(
    host: str = "127.0.0.1", port: int = DEFAULT_PORT, requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
) -> JudgeServer:
    """The local judge on ``host:port`` (0: any free port), bound, not yet serving; behind an
    OpenAI-like account's per-minute limits if any is given (``account.py``)."""
    responder: Responder = LocalJudge()
    if requests_per_minute or tokens_per_minute:
        responder = AccountLimits(responder, requests_per_minute, tokens_per_minute)
    return JudgeServer(responder, host=host, port=port, models=(MODEL,),
                       owned_by=ANSWERS_ANY_MODEL)


def serve(
    host: str = "127.0.0.1", port: int = DEFAULT_PORT, requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
) -> None:
    """Run the local judge on ``host:port`` until SIGTERM or SIGINT; a ConfigError (one line,
    exit 2) when it cannot listen there (the port taken, an unknown host)."""
    try:
        server = local_judge_server(host, port, requests_per_minute, tokens_per_minute)
    except OSError as exc:  # socket.gaierror too
        # create_server's strerror repeats the address: the line names it already.
        reason = (exc.strerror or str(exc)).split(" (while attempting", 1)[0]
        hint = (" (another process has it: choose another --port, or 0 for any free one)"
                if exc.errno == errno.EADDRINUSE else "")
        raise ConfigError(
            f"local-judge: cannot listen on {host}:{port}: {reason.lower()}{hint}") from exc
    limits = [f"{n:,} {unit}/min" for n, unit in ((requests_per_minute, "requests"),
                                                  (tokens_per_minute, "tokens")) if n]
    suffix = f" (account limits: {', '.join(limits)})" if limits else ""
    print(f"local judge listening on {server.url}{suffix}", flush=True)
    server.serve_forever()
