"""The EPM-JEPA learner: config, networks, memory, modulators, step, evaluation, checkpoint.

from agent import AgentConfig, Learner, DatasetSource
cfg = AgentConfig.of_size("tiny", track="C")
learner = Learner(cfg)
metrics = learner.update(DatasetSource(frames, cfg).next())
"""

from agent.build import count_parameters
from agent.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_checkpoint_config,
    save_checkpoint,
)
from agent.config import AgentConfig, bf16_unsupported, preferred_precision
from agent.evaluation import (
    EvalData,
    EvalResult,
    TargetReference,
    adaptation_curve,
    evaluate,
    target_reference,
)
from agent.learner import Learner
from agent.memory.read import MemoryView
from agent.objective import StepMetrics, columns
from agent.sources import Batch, DatasetSource, StreamSource
from agent.step import Knobs, Model, StepSpec, jepa_step, modulated_prediction

__all__ = [
    "AgentConfig", "Batch", "CheckpointError", "DatasetSource", "EvalData", "EvalResult",
    "Learner", "Knobs", "MemoryView", "Model", "StepMetrics", "StepSpec", "StreamSource",
    "adaptation_curve", "TargetReference", "target_reference", "count_parameters", "evaluate",
    "jepa_step", "load_checkpoint", "modulated_prediction", "bf16_unsupported",
    "preferred_precision", "read_checkpoint_config", "save_checkpoint", "columns",
]
