"""Private Redis and Valkey servers and local clusters for tests, benchmarks and the demo."""
