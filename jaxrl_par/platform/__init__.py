"""Platform-specific tuning, kept apart from the default code path."""
