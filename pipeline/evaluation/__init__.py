"""Evaluation helpers: labelled synthetic runs for measuring the anomaly checks on data they were not tuned to."""
