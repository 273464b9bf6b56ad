"""Per-run reports: verdict, root cause, sections, plots and samples."""
