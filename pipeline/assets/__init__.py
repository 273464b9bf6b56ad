"""Dagster assets: ingestion into the lake, and the dbt models built on it."""
