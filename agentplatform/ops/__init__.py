"""Running the platform in production (issue 12): request context and structured logs, health
and readiness, Prometheus metrics. Not an app: middleware, views and helpers only."""
