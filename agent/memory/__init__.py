"""Memory subsystem: boundary detector, experience buffer, experience encoder, aggregator."""

from agent.memory.aggregator import Aggregate, AttentionAggregator
from agent.memory.buffer import ExperienceBuffer
from agent.memory.detector import BoundaryDetector
from agent.memory.experience import ExperienceEncoder
from agent.memory.group import GroupBuffer
from agent.memory.oracle import OracleContext
from agent.memory.view import MemoryView

__all__ = [
    "Aggregate",
    "AttentionAggregator",
    "BoundaryDetector",
    "ExperienceBuffer",
    "ExperienceEncoder",
    "MemoryView",
    "OracleContext",
    "GroupBuffer",
]
