"""splitbrain harness: clusters, backends, scenarios, fault schedules, checks and the CLI."""
