"""Time in the engine: cron schedules and rate limits."""
