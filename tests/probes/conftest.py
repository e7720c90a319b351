"""The probes' tests share the agent tests' stand-in encoder (``tests/agent/conftest.py``)."""

from tests.agent.conftest import pixel_encoder  # noqa: F401  (a fixture, found by name)
