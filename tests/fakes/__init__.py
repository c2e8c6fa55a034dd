"""Test doubles that speak real protocols: ``ScriptedJudge`` behind a real HTTP server."""

from .judge import Call, ScriptedJudge

__all__ = ["Call", "ScriptedJudge"]
