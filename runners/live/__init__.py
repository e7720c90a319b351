"""The live view (``python -m runners.visualize``): ``model`` (what is shown, numpy only),
``draw`` (pygame widgets), ``screen`` (the 1280x720 layout), ``app`` (steps between redraws,
keys), ``drivers`` (the adapter onto ``runners.online.loop.OnlineLoop`` and the agent); its
tests' fake feed is ``tests/runners/live_fake.py``."""
