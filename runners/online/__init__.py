"""One online run: its typed config, the run folder, the parts and the loop that drives them,
the zarr recorder, the summary and the figures (``python -m runners.train_online``)."""
