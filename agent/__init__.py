"""The EPM-JEPA learner: config, networks, memory, modulators, update, evaluation, checkpoint.

from agent import AgentConfig, Learner, DatasetSource
cfg = AgentConfig.from_preset("tiny", track="C")
learner = Learner(cfg)
metrics = learner.update(DatasetSource(frames, cfg).next())
"""

from agent.build import Parts, build_parts, count_parameters
from agent.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_checkpoint_config,
    save_checkpoint,
)
from agent.config import AgentConfig, preferred_precision
from agent.evaluation import EvalData, EvalResult, adaptation_curve, evaluate
from agent.learner import Learner
from agent.metrics import StepMetrics, stack
from agent.multirun import MultiLearner
from agent.sources import Batch, DatasetSource, StreamSource

__all__ = [
    "MultiLearner",
    "AgentConfig",
    "Batch",
    "CheckpointError",
    "DatasetSource",
    "EvalData",
    "EvalResult",
    "Learner",
    "Parts",
    "StepMetrics",
    "StreamSource",
    "adaptation_curve",
    "build_parts",
    "count_parameters",
    "evaluate",
    "load_checkpoint",
    "preferred_precision",
    "read_checkpoint_config",
    "save_checkpoint",
    "stack",
]
