"""How well the anomaly checks do on labelled runs they were not tuned to: the scorer (check_eval) over the demo,
the vendored real runs and the synthetic generator (synthetic_runs)."""
