"""Memory subsystem: boundary detector, experience buffer, experience encoder, aggregator."""

from agent.memory.buffer import ExperienceBuffer, GroupBuffer
from agent.memory.detector import BoundaryDetector
from agent.memory.oracle import OracleContext
from agent.memory.read import Aggregate, AttentionAggregator, ExperienceEncoder, MemoryView

__all__ = ["Aggregate", "AttentionAggregator", "BoundaryDetector", "ExperienceBuffer",
           "ExperienceEncoder", "MemoryView", "OracleContext", "GroupBuffer"]  # fmt: skip
