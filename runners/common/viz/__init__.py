"""The live visualizer's view layer (``python -m runners.visualize``).

``model`` (what is shown, numpy only), ``draw`` (pygame widgets), ``screen`` (the 1280x720
layout), ``app`` (steps between redraws, keys), ``drivers`` (the adapter onto
``runners.common.loop.OnlineLoop`` and the agent), ``fake`` (a fake feed for tests).
"""
