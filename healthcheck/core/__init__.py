"""The model every layer shares: statuses, findings, the check registry, config, errors."""
