"""Probes: measuring instruments for a trained learner, outside the learner itself.

- ``probes.digits``: linear probes of the digits' state (positions, moves) from the latents;
- ``probes.gravity``: gravity read linearly from the aggregated memory e_agg (and from the
  entries' own statistics);
- ``probes.world``: predictors fit offline on frozen latents with and without the world's true
  physics (what the latent allows a predictor, and what knowing the world is worth on it);
- ``probes.perfect_physics``: the env's exact simulator branched at the input frame, rendered
  and encoded: what perfect physics, world-blind or of another world, scores in the latent (the
  physics ceiling).

Definitions: docs/definitions.md ("Probes", "The world probe", "Perfect physics").
"""
