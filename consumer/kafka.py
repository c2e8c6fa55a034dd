"""Connection options shared by every Kafka client the worker makes (security included)."""

from __future__ import annotations

from typing import Any

from aiokafka.helpers import create_ssl_context

from consumer.settings import Settings


def client_options(settings: Settings, client_id: str = "groundedness-worker") -> dict[str, Any]:
    """Bootstrap servers, client id and the SASL/TLS settings, for aiokafka's constructors."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap_servers,
        "client_id": client_id,
        "security_protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = create_ssl_context(cafile=settings.kafka_ssl_cafile)
    if settings.kafka_security_protocol.startswith("SASL_"):
        password = settings.kafka_sasl_password
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        options["sasl_plain_username"] = settings.kafka_sasl_username
        options["sasl_plain_password"] = password.get_secret_value() if password else None
    return options
