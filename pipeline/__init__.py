"""grpolens: a local warehouse for diagnosing GRPO / RL fine-tuning runs."""

__version__ = "0.1.0"
