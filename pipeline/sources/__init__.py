"""Ingest sources: each reads one kind of input incrementally and appends to the Parquet lake."""
