"""The aiokafka names the rest of the worker uses as types and in ``except`` clauses.

``consumer.kafka`` is the one package that imports aiokafka; the pipeline, its delivery and
the replay name the clients, a partition and the error base through here, so that a change of
client library (or of what aiokafka calls these) is made in one folder.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.producer.transaction_manager import TransactionState

__all__ = ["AIOKafkaConsumer", "AIOKafkaProducer", "KafkaError", "TopicPartition",
           "TransactionState"]
