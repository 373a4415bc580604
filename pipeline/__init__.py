"""splitbrain pipeline: event logs of runs into verdicts, metrics and plots (PySpark)."""
