"""The demo: sample GRPO runs written by the real wandb library in offline mode (runs), the trainer's Axiom events
(events), and the command that writes, ingests, builds and checks them through Dagster (run)."""
