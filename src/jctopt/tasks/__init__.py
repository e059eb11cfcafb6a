"""One module per Hydra task; each exposes a function returning a pandas DataFrame."""
