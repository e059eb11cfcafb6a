"""Fitting the model to measured runs: calibration of the efficiencies and of the MoE launch
floor, with their left-out errors."""
