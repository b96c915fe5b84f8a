"""Running the platform in production: request context and structured logs, health
and readiness, Prometheus metrics. Not an app: middleware, views and helpers only."""
