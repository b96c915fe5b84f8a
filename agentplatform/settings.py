"""Django settings for agentplatform, read from the environment (12-factor).

With nothing set: SQLite file database, eager Celery, the offline model.
`DATABASE_URL=postgres://...` switches to PostgreSQL through psycopg 3;
`CELERY_BROKER_URL=redis://...` switches to a real broker;
`LLM_API_KEY` (+ `LLM_BASE_URL`, `LLM_MODEL`) switches to a real OpenAI-compatible model.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import dj_database_url

from agentplatform import deploy
from core.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

# --- Deployment safety (agentplatform/deploy.py; docs/operations.md, "Production") ---------------
# DEPLOY_ENV=production: SECRET_KEY and ALLOWED_HOSTS must come from the environment, HTTPS only.
# Otherwise (the embedded default) a random key is generated once per checkout into SECRET_KEY_FILE.
DEPLOY_ENV = env_str("DEPLOY_ENV", "development")
PRODUCTION = DEPLOY_ENV == "production"
SECRET_KEY = deploy.secret_key(production=PRODUCTION,
                               key_file=Path(env_str("SECRET_KEY_FILE", str(BASE_DIR / ".secret_key"))))
DEBUG = env_bool("DEBUG", False)
if PRODUCTION and DEBUG:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("DEBUG=true is refused with DEPLOY_ENV=production")
ALLOWED_HOSTS = deploy.require_hosts(
    env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "testserver"]), production=PRODUCTION)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", PRODUCTION)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", PRODUCTION)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", PRODUCTION)
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto: SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO
if env_str("SECURE_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = (env_str("SECURE_PROXY_SSL_HEADER"), "https")
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# The OpenAPI schema and Swagger UI: public (default) or signed-in users only.
API_DOCS_REQUIRE_LOGIN = env_bool("API_DOCS_REQUIRE_LOGIN", PRODUCTION)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "csp",
    "rest_framework",
    "knox",  # API keys: digest only, shown once, expiry (agentplatform.api.models.ApiKey)
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served by the project (no CDN)
    "guardian",
    "axes",  # failed sign-ins: lockout per username and per IP (AXES_* below)
    # bottom: tenancy and audit
    "agentplatform.tenancy",
    "audit",
    # middle: approvals below tools
    "approvals",
    # policy bundles (Cedar rules, limits, kill switches): between approvals and tools (docs/policy.md)
    "policies",
    "tools",
    "tools.catalog",
    # remote tools: MCP servers as tool sources, above tools (docs/remote_tools.md)
    "mcp_sources",
    # top: the agent runtime
    "agentplatform.runtime",
    # notifications (email, tenant webhooks): above approvals, listening to its signals
    "notifications",
    # the REST API (its HTTP Idempotency-Key records) sits on top of everything
    "agentplatform.api",
    # retention: how long each class of records stays online, archive first (docs/operations.md)
    "agentplatform.retention",
    # control-plane audit: receivers on every model an administrator changes (docs/roles.md)
    "agentplatform.controlplane",
    # the MCP server at /mcp/: the governed tools for agents of any framework (docs/mcp.md)
    "agentplatform.mcp_server",
]

MIDDLEWARE = [
    # Outermost: nothing under /api/ answers an HTML error page (agentplatform.api.middleware).
    "agentplatform.api.middleware.ApiErrorMiddleware",
    # Request id (X-Request-ID or new, echoed), correlation fields for log lines, the access line.
    "agentplatform.ops.logs.RequestContextMiddleware",
    "agentplatform.ops.metrics.HttpMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves /static/ from the project itself (no CDN, no separate web server needed for the demo).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The admin follows the administrator's language; the API and product pages keep LANGUAGE_CODE.
    "agentplatform.web.admin_language.AdminLanguageMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Cache-Control: private, no-store for a signed-in user's pages and the API (agentplatform.ops.caching).
    "agentplatform.ops.caching.PrivateNoStoreMiddleware",
    # remembers the request, so control-plane audit rows name the actor (agentplatform.tenancy.actor)
    "agentplatform.tenancy.actor.ActorMiddleware",
    # Expire requests past their deadline before anything is read (docs/decisions.md, item 9).
    "agentplatform.runtime.settle.SettleOnReadMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # An administrator's guarded change in the admin becomes a pending control change (docs/roles.md).
    "agentplatform.controlplane.middleware.ControlChangeMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

# Content-Security-Policy (django-csp): scripts, styles, fonts and images only from this origin
# (static files, Swagger UI from drf-spectacular-sidecar); no inline script, no eval, no framing.
# Inline *styles* stay allowed: Django's admin and guardian's widgets set style attributes (a style
# cannot run code); our own pages and Swagger UI use none (tests/deploy).
from csp.constants import NONE, SELF, UNSAFE_INLINE  # noqa: E402

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

ROOT_URLCONF = "agentplatform.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # the navigation's count of requests the user may decide (one lazy COUNT)
                "approvals.context_processors.approvals_nav",
                # whether the navigation links the approval overview (administrators, auditors; lazy)
                "approvals.overview_access.overview_nav",
                "agentplatform.web.auditor.context.auditor_nav",  # the Audit link, for auditors
                "agentplatform.web.context_processors.people_nav",
            ],
        },
    },
]
WSGI_APPLICATION = "agentplatform.wsgi.application"
ASGI_APPLICATION = "agentplatform.asgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Wait for the writer instead of failing at once when threads share the file. IMMEDIATE: a
    # transaction takes the write lock when it begins (Django 5.1+), so two transactions that both
    # read and then write cannot fail with an immediate "database is locked" on the upgrade (the
    # busy timeout does not cover that case); the web process's sweeper, the non-blocking chat's
    # run thread and page requests share one file in the embedded default.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_int("DB_POOL_MAX_SIZE", 0) > 0:
    # A psycopg connection pool per process (Django 5.1+): the production server bounds its
    # connections with it (gunicorn.conf.py sets DB_POOL_MAX_SIZE=4 per worker). CONN_MAX_AGE must be 0.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": env_int("DB_POOL_MAX_SIZE", 0), "timeout": env_float("DB_POOL_TIMEOUT", 30.0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool("DB_PREPARED_STATEMENTS", True):
    # Server-side parameter binding (Django's `server_side_binding`, psycopg 3): statements are sent
    # with their parameters apart, and psycopg prepares one on the server once it ran
    # DB_PREPARE_THRESHOLD times on a connection, so the hot path is parsed and planned once per
    # connection instead of once per call (docs/operations.md#database). Behind PgBouncer
    # in transaction mode this needs PgBouncer >= 1.21 with `max_prepared_statements` set; otherwise
    # set DB_PREPARED_STATEMENTS=false.
    DATABASES["default"].setdefault("OPTIONS", {})["server_side_binding"] = True
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = env_int("DB_PREPARE_THRESHOLD", 2)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and not env_bool("DB_RELEASE_SAVEPOINTS", False):
    # Django's PostgreSQL backend without the RELEASE SAVEPOINT round trip of a successful nested
    # atomic block (the transaction's end releases it; agentplatform/pgbackend/base.py).
    DATABASES["default"]["ENGINE"] = "agentplatform.pgbackend"
DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME", "") or None}
if env_str("RETENTION_DATABASE_URL"):
    # The retention run's own role (docs/operations.md, "Retention and storage"): the only one that
    # may record an archive and delete archived audit rows; the application's role may do neither.
    DATABASES["retention"] = {**DATABASES["default"], **dj_database_url.parse(
        env_str("RETENTION_DATABASE_URL"), conn_max_age=0), "TEST": {"MIRROR": "default"}}
    DATABASES["retention"]["OPTIONS"] = {k: v for k, v in DATABASES["retention"].get("OPTIONS", {}).items()
                                         if k != "pool"}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" and not DATABASES["default"]["TEST"]["NAME"]:
    # Tests on SQLite use a file, not Django's shared-cache in-memory database: under shared cache a
    # live-server thread that meets another's write fails at once with "database table is locked"
    # (SQLITE_LOCKED, which the busy timeout above does not cover); a file waits for the writer.
    DATABASES["default"]["TEST"]["NAME"] = str(BASE_DIR / "test-db.sqlite3")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ATOMIC_REQUESTS = False

AUTH_USER_MODEL = "tenancy.User"
AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out username or address before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    # Django's and guardian's backends, refusing service accounts a password sign-in, a session
    # and approve_tool (agentplatform.tenancy.backends, docs/roles.md).
    "agentplatform.tenancy.backends.PersonModelBackend",
    "agentplatform.tenancy.backends.ServiceAccountAwareObjectPermissionBackend",
]
# guardian's check looks for its own backend's dotted path; ours is its subclass.
SILENCED_SYSTEM_CHECKS = ["guardian.W001"]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row
GUARDIAN_MONKEY_PATCH_USER = False
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/chat/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
# Languages of the admin (agentplatform.web.admin_language): Django ships its own Chinese; ours is
# in locale/ (compiled .mo files are committed, so nothing needs gettext at run time).
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# Without `collectstatic`, whitenoise finds files where Django's finders do (dev and demo).
WHITENOISE_USE_FINDERS = True
# STATIC_ROOT exists only after `collectstatic`; until then whitenoise's "No directory" warning is noise.
warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
WHITENOISE_AUTOREFRESH = DEBUG

# Structured logs (agentplatform/ops/logs.py): JSON lines with request, tenant, user, run,
# conversation, tool and tool-call ids; tokens and secrets redacted. LOG_FORMAT=text for people.
LOG_FORMAT = env_str("LOG_FORMAT", "json")
LOG_ACCESS = env_bool("LOG_ACCESS", True)
if LOG_FORMAT not in ("json", "text"):
    raise ValueError("LOG_FORMAT must be json or text")
from agentplatform.ops.logs import logging_config  # noqa: E402 - needs nothing from Django

LOGGING = logging_config(fmt=LOG_FORMAT, level=env_str("LOG_LEVEL", "WARNING"), access=LOG_ACCESS)

# --- Metrics and probes (agentplatform/ops/) ----------------------------------
# GET /metrics: off with METRICS_ENABLED=0; admitted with `Authorization: Bearer $METRICS_TOKEN` or
# from METRICS_ALLOWED_NETWORKS (CIDRs, default loopback). GET /healthz and /readyz are open.
METRICS_ENABLED = env_bool("METRICS_ENABLED", True)
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
METRICS_ALLOWED_NETWORKS = env_list("METRICS_ALLOWED_NETWORKS", ["127.0.0.1/32", "::1/128"])
METRICS_MAX_LABEL_VALUES = env_int("METRICS_MAX_LABEL_VALUES", 200)
METRICS_RECENT_SECONDS = env_int("METRICS_RECENT_SECONDS", 900)

# --- REST framework -----------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "agentplatform.api.auth.ApiKeyAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "agentplatform.api.errors.exception_handler",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "agentplatform.api.negotiation.ContentNegotiation",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
from agentplatform.api.getting_started import GETTING_STARTED  # noqa: E402 - plain text, no Django

SPECTACULAR_SETTINGS = {
    "TITLE": "agentplatform API",
    "DESCRIPTION": GETTING_STARTED,  # keys, the Token scheme, Idempotency-Key, async runs, SSE, errors
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and its favicon come from drf-spectacular-sidecar's static files, never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Separate request and response components (read-only fields stay out of request bodies).
    "COMPONENT_SPLIT_REQUEST": True,
    # Path ids in any letter case (agentplatform.api.urls.AnyCaseUUIDConverter) are UUIDs.
    "PATH_CONVERTER_OVERRIDES": {"anyuuid": {"type": "string", "format": "uuid"}},
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "agentplatform.runtime.models.Run.Status",
        "ConfirmationStatusEnum": "approvals.models.ConfirmationRequest.Status",
        "RunEventTypeEnum": "agentplatform.runtime.models.RunEvent.Type",
    },
}
# Request rates per user (or client IP) and scope, DRF's "N/second|minute|hour|day"; empty = no
# limit (agentplatform.api.throttling; docs/operations.md "Limits"). 429 THROTTLED + Retry-After.
API_THROTTLE_RATES = {
    "chat": env_str("API_THROTTLE_CHAT", "30/minute") or None,
    "confirm": env_str("API_THROTTLE_CONFIRM", "20/minute") or None,
    "approve": env_str("API_THROTTLE_APPROVE", "60/minute") or None,
    "api_keys": env_str("API_THROTTLE_API_KEYS", "20/minute") or None,
}
# Refused decisions on unknown confirmation ids/tokens are audited as a sample, not one row each:
# the 1st, 10th, 100th ... refusal of one user within this window (audit.events.record_sampled).
AUDIT_REFUSAL_WINDOW_SECONDS = env_int("AUDIT_REFUSAL_WINDOW_SECONDS", 300)
# The cache holds throttle counters and the refusal samples: local memory per process by default;
# CACHE_URL=redis://host:6379/2 shares them between processes (Django's RedisCache).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": env_str("CACHE_URL")}
          if env_str("CACHE_URL") else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Failed sign-ins (django-axes): after LOGIN_FAILURE_LIMIT failures for one username, or from one
# IP address, sign-in is refused for LOGIN_LOCKOUT_MINUTES (429 LOGIN_LOCKED_OUT + Retry-After);
# attempts are recorded (admin: Axes). A successful sign-in resets the username's count.
import datetime as _dt  # noqa: E402

AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = _dt.timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "agentplatform.web.lockout.lockout_response"

# API keys (django-rest-knox, token model agentplatform.api.models.ApiKey): `Authorization: Token <key>`.
# Keys start with "ap_" (secret scanners and our own redaction recognise them), are stored as
# SHA-512 digests, expire after API_KEY_TTL_DAYS (0 = never) unless the issuer asks for less.
KNOX_TOKEN_MODEL = "api.ApiKey"
API_KEY_TTL_DAYS = env_int("API_KEY_TTL_DAYS", 90)
API_KEY_MAX_TTL_DAYS = env_int("API_KEY_MAX_TTL_DAYS", 365)
API_KEY_ALLOW_NO_EXPIRY = env_bool("API_KEY_ALLOW_NO_EXPIRY", False)
API_KEY_LAST_USED_RESOLUTION_SECONDS = env_int("API_KEY_LAST_USED_RESOLUTION_SECONDS", 60)
REST_KNOX = {
    "TOKEN_TTL": None,  # each key carries its own expiry (agentplatform.tenancy.credentials.api_key_issue)
    "TOKEN_PREFIX": "ap_",
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}
# HTTP Idempotency-Key on POST /api/v1/chat/ (IETF httpapi draft): records live 24 h; a claim left
# PROCESSING by a crashed request may be taken over after the lease.
API_IDEMPOTENCY_TTL_HOURS = env_int("API_IDEMPOTENCY_TTL_HOURS", 24)
API_IDEMPOTENCY_LEASE_SECONDS = env_int("API_IDEMPOTENCY_LEASE_SECONDS", 300)
# Server-Sent Events of a run: database poll interval, longest stream, keep-alive comment interval.
API_SSE_POLL_SECONDS = env_float("API_SSE_POLL_SECONDS", 0.5)
API_SSE_MAX_SECONDS = env_float("API_SSE_MAX_SECONDS", 60.0)
API_SSE_HEARTBEAT_SECONDS = env_float("API_SSE_HEARTBEAT_SECONDS", 15.0)
# Under the ASGI server, streams share one hub per process (agentplatform/api/sse_hub.py): its
# queries run on this many threads (each closes its connection after the query).
API_SSE_DB_THREADS = env_int("API_SSE_DB_THREADS", 2)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 256 * 1024)

# --- Celery -------------------------------------------------------------------
_BROKER = env_str("CELERY_BROKER_URL", "")
# No broker configured: run tasks eagerly in-process (the embedded default).
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not _BROKER)
CELERY_BROKER_URL = _BROKER or "memory://localhost/"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# After a task could not be sent (the broker unreachable), the broker is not tried again for this
# many seconds (core.broker): notifications run in-process meanwhile and resumes are left to the
# recovery sweep, instead of waiting out the publish retries once per task of a mass expiry.
BROKER_RETRY_SECONDS = env_int("BROKER_RETRY_SECONDS", 30)
# One message reserved per pool process: with late acks a prefetched message would wait behind a
# long resume, unacknowledged and eligible for redelivery.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Late acknowledgement is opted into per task, and only by tasks that are idempotent in the
# database (all of ours: runtime.resume_run, runtime.recover_stuck_runs,
# approvals.expire_confirmations, tools.prune_idempotency_records); each of them also sets
# reject_on_worker_lost, so a worker killed mid-task leaves its message to be redelivered.
CELERY_TASK_ACKS_LATE = False
# After a broker connection loss a late-ack task cannot be acknowledged and will be redelivered;
# letting it finish is better than killing it: the redelivered copy finds the work claimed or done.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Time limits (seconds). Default for any task; the sweeps (expiry, recovery, pruning) are short;
# a resume may make AGENT_MAX_ITERATIONS model calls of at most LLM_DEADLINE_SECONDS each
# (6 x 120 = 720 s at the defaults) plus the tools of each turn.
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 240)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 300)
CELERY_SWEEP_SOFT_TIME_LIMIT = env_int("CELERY_SWEEP_SOFT_TIME_LIMIT", 60)
CELERY_SWEEP_TIME_LIMIT = env_int("CELERY_SWEEP_TIME_LIMIT", 90)
CELERY_RESUME_SOFT_TIME_LIMIT = env_int("CELERY_RESUME_SOFT_TIME_LIMIT", 780)
CELERY_RESUME_TIME_LIMIT = env_int("CELERY_RESUME_TIME_LIMIT", 840)
# A resume that meets a model outage (ModelUnavailable: timeouts, connection errors, 429/5xx after
# the SDK's own retries) parks the run and retries with exponential backoff and full jitter
# (factor x 2**n seconds, capped); after the last retry the run is FAILED with MODEL_UNAVAILABLE.
CELERY_RESUME_MAX_RETRIES = env_int("CELERY_RESUME_MAX_RETRIES", 5)
CELERY_RESUME_RETRY_BACKOFF = env_int("CELERY_RESUME_RETRY_BACKOFF", 2)
CELERY_RESUME_RETRY_BACKOFF_MAX = env_int("CELERY_RESUME_RETRY_BACKOFF_MAX", 120)
# Redis redelivers a message not acknowledged within visibility_timeout. It must stay above the
# longest task (CELERY_RESUME_TIME_LIMIT) and the longest retry countdown, or a task still running
# (or waiting for its ETA) is delivered a second time. That second copy would do no harm (every
# task is idempotent) but wastes a worker. Unacknowledged messages are swept back about every
# interval x throttle seconds (kombu's defaults: 10 x 10).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
    "unacked_restore_interval": env_int("CELERY_UNACKED_RESTORE_INTERVAL", 10),
    "unacked_restore_throttle": env_int("CELERY_UNACKED_RESTORE_THROTTLE", 10),
    "socket_connect_timeout": 5,
}
# The scheduled incremental verification of every tenant's audit chain (audit.verify_chains,
# docs/audit.md "Incremental verification"): how often, how many rows per tenant one run checks at
# most (a tenant further behind, e.g. on the first run after an upgrade, catches up over the next
# runs; about 30,000 rows/s on one core, docs/performance.md "Audit verification"), and its time limits.
AUDIT_VERIFY_EVERY_SECONDS = env_int("AUDIT_VERIFY_EVERY_SECONDS", 300)
AUDIT_VERIFY_MAX_ROWS_PER_RUN = env_int("AUDIT_VERIFY_MAX_ROWS_PER_RUN", 2_000_000)
# Processes `manage.py audit_verify` splits one long chain among (audit.verify_parallel); the
# scheduled task stays in its worker process. Default: the machine's cores, at most 4.
AUDIT_VERIFY_WORKERS = env_int("AUDIT_VERIFY_WORKERS", min(4, os.cpu_count() or 1))
AUDIT_VERIFY_SOFT_TIME_LIMIT = env_int("AUDIT_VERIFY_SOFT_TIME_LIMIT", 600)
AUDIT_VERIFY_TIME_LIMIT = env_int("AUDIT_VERIFY_TIME_LIMIT", 660)
# The periodic schedule lives here, in settings (not in the database): `celery -A agentplatform
# beat` reads it. See docs/operations.md.
CELERY_BEAT_SCHEDULE = {
    "expire-confirmations": {"task": "approvals.expire_confirmations", "schedule": 15.0},
    "recover-stuck-work": {"task": "runtime.recover_stuck_runs", "schedule": 60.0},
    "prune-idempotency-records": {"task": "tools.prune_idempotency_records", "schedule": 3600.0},
    "refresh-mcp-tool-lists": {"task": "mcp_sources.refresh_tool_lists", "schedule": 60.0},
    "prune-http-idempotency-keys": {"task": "api.prune_http_idempotency_keys", "schedule": 3600.0},
    "expire-control-changes": {"task": "controlplane.expire_control_changes", "schedule": 300.0},
    "apply-retention": {"task": "retention.apply_retention", "schedule": float(env_int("RETENTION_INTERVAL_SECONDS", 86_400))},
    "verify-audit-chains": {"task": "audit.verify_chains", "schedule": float(AUDIT_VERIFY_EVERY_SECONDS)},
}
# How long a pending control change waits for its second person (docs/roles.md, "Trust model").
CONTROL_CHANGE_TTL_HOURS = env_int("CONTROL_CHANGE_TTL_HOURS", 72)

# --- Retention (docs/operations.md, "Retention and storage") -----------------------------------
# How many days each class of records stays online by default; a tenant's row in the admin
# (agentplatform.retention.models.TenantRetention) overrides them. 0 = keep forever.
RETENTION_RUN_EVENT_DAYS = env_int("RETENTION_RUN_EVENT_DAYS", 30)
RETENTION_CONVERSATION_DAYS = env_int("RETENTION_CONVERSATION_DAYS", 180)
RETENTION_REQUEST_DAYS = env_int("RETENTION_REQUEST_DAYS", 365)
RETENTION_AUDIT_DAYS = env_int("RETENTION_AUDIT_DAYS", 400)
# No tenant setting may keep audit rows online for fewer days than this (the floor is the
# operator's, through the environment; a tenant administrator cannot lower it).
RETENTION_AUDIT_MIN_DAYS = env_int("RETENTION_AUDIT_MIN_DAYS", 365)
# Where archive files go (one directory per tenant); S3 and other object stores are not built in:
# mount or sync this directory (docs/operations.md).
RETENTION_ARCHIVE_DIR = env_str("RETENTION_ARCHIVE_DIR", str(BASE_DIR / "var" / "retention"))
# Rows deleted per transaction (each batch is one short transaction: no long locks).
RETENTION_BATCH = env_int("RETENTION_BATCH", 1000)
# The daily task's time limits: a first run over a long history may take a while; one stopped by
# the limit is completed by the next (every step is idempotent).
RETENTION_SOFT_TIME_LIMIT = env_int("RETENTION_SOFT_TIME_LIMIT", 3300)
RETENTION_TIME_LIMIT = env_int("RETENTION_TIME_LIMIT", 3600)

# --- Model access -------------------------------------------------------------
LLM_BASE_URL = env_str("LLM_BASE_URL", "https://api.openai.com/v1")
LLM_API_KEY = env_str("LLM_API_KEY", "")
LLM_MODEL = env_str("LLM_MODEL", "gpt-4o-mini" if LLM_API_KEY else "offline-planner")
LLM_TIMEOUT_SECONDS = env_float("LLM_TIMEOUT_SECONDS", 30.0)
LLM_MAX_RETRIES = env_int("LLM_MAX_RETRIES", 2)
LLM_STREAM = env_bool("LLM_STREAM", True)
# The whole of one model call (connect, retries and their waits, every chunk of a stream), in
# seconds; LLM_TIMEOUT_SECONDS bounds each read only. Past it the call is abandoned: MODEL_TIMEOUT.
LLM_DEADLINE_SECONDS = env_float("LLM_DEADLINE_SECONDS", 120.0)

# --- Agent runtime ------------------------------------------------------------
AGENT_MAX_ITERATIONS = env_int("AGENT_MAX_ITERATIONS", 6)
# Tool calls one model turn may make; a turn with more is refused whole (TOO_MANY_TOOL_CALLS,
# nothing runs) and the model is asked again: a runaway turn must not fan out into side effects.
AGENT_MAX_TOOL_CALLS_PER_TURN = env_int("AGENT_MAX_TOOL_CALLS_PER_TURN", 32)
AGENT_MEMORY_WINDOW = env_int("AGENT_MEMORY_WINDOW", 20)
AGENT_MEMORY_FULL_TOOL_TRACE = env_bool("AGENT_MEMORY_FULL_TOOL_TRACE", False)
AGENT_INTERNAL_TOOL_EXECUTION = env_bool("AGENT_INTERNAL_TOOL_EXECUTION", True)
# Dotted path of `predicate(internal_tool_execution_enabled: bool, turn: ModelTurn) -> bool`
# (as Spring AI's ToolExecutionEligibilityPredicate: whether the loop runs a turn's tool calls itself
# or hands them to the caller).
AGENT_TOOL_EXECUTION_ELIGIBILITY = env_str(
    "AGENT_TOOL_EXECUTION_ELIGIBILITY", "agentplatform.runtime.eligibility.default_predicate"
)
AGENT_RUN_LEASE_SECONDS = env_int("AGENT_RUN_LEASE_SECONDS", 300)
# Model calls per tenant and UTC day (0 = no limit); a tenant's own quota is set in the admin
# (Runtime > Tenant model quotas). Past it a run fails with MODEL_QUOTA_EXCEEDED (HTTP 429).
TENANT_MODEL_CALLS_PER_DAY = env_int("TENANT_MODEL_CALLS_PER_DAY", 5000)
# Settling without beat (agentplatform/runtime/settle.py): expire due requests before each read,
# and sweep every WEB_SWEEP_SECONDS in the web process (0 = off).
APPROVALS_SETTLE_ON_READ = env_bool("APPROVALS_SETTLE_ON_READ", True)
WEB_SWEEP_SECONDS = env_int("WEB_SWEEP_SECONDS", 5)

# --- Notifications (notifications/; docs/notifications.md) ------------------------------------
# Links in emails and webhook bodies start with PLATFORM_BASE_URL (the address people reach);
# `make serve` and `make dev` set it from the address they bind when it is not set (gunicorn.conf.py).
PLATFORM_BASE_URL = env_str("PLATFORM_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
NOTIFY_EMAIL = env_bool("NOTIFY_EMAIL", True)
# Without a broker, or while it cannot be reached (BROKER_RETRY_SECONDS), notifications run on at
# most this many threads per process, each holding at most one database connection while there is
# work (notifications.dispatch; docs/notifications.md; docs/operations.md, "Mass expiry").
NOTIFY_THREADS = env_int("NOTIFY_THREADS", 2)
# At most this many notification jobs wait for those threads per process; past it the caller runs
# the job itself (its own connection), so a broker outage during a mass expiry cannot grow memory
# without bound, nor drop a notice.
NOTIFY_QUEUE_MAX = env_int("NOTIFY_QUEUE_MAX", 10_000)
# Django's email backend: the console (stdout) by default, so the demo shows what would be sent;
# SMTP (EMAIL_HOST...) by default with DEPLOY_ENV=production, where the console and file backends
# are refused: they write every email, password-reset links included, where the logs go.
_LOG_EMAIL_BACKENDS = ("django.core.mail.backends.console.EmailBackend", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend" if PRODUCTION
                        else "django.core.mail.backends.console.EmailBackend")
if PRODUCTION and EMAIL_BACKEND in _LOG_EMAIL_BACKENDS:
    raise ImproperlyConfigured(f"EMAIL_BACKEND={EMAIL_BACKEND} is refused with DEPLOY_ENV=production: it writes "
                               "password-reset links into the logs; use SMTP (EMAIL_HOST...) or a provider's backend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agentplatform <noreply@localhost>")
# Outbound webhooks per tenant: timeout of one attempt (seconds), retries after the first attempt
# on 5xx/429/timeout/connection errors with exponential backoff (factor x 2**n seconds, capped).
WEBHOOK_TIMEOUT_SECONDS = env_float("WEBHOOK_TIMEOUT_SECONDS", 5.0)
WEBHOOK_MAX_RETRIES = env_int("WEBHOOK_MAX_RETRIES", 6)
WEBHOOK_RETRY_BACKOFF = env_int("WEBHOOK_RETRY_BACKOFF", 5)
WEBHOOK_RETRY_BACKOFF_MAX = env_int("WEBHOOK_RETRY_BACKOFF_MAX", 600)
# Webhook URLs that are (or resolve to) loopback, private, link-local or reserved addresses are
# refused unless this is true (a relay on the same host or network; tests with a local receiver).
WEBHOOK_ALLOW_PRIVATE_ADDRESSES = env_bool("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", False)
# How often the approver dashboard and the navigation's count ask what changed (seconds).
APPROVALS_POLL_SECONDS = env_int("APPROVALS_POLL_SECONDS", 5)
# Approval quality (docs/approvals.md): a decision made less than this many seconds after the
# approver first opened the request's facts counts as fast (the overview, the metric, the alert).
APPROVAL_FAST_DECISION_SECONDS = env_int("APPROVAL_FAST_DECISION_SECONDS", 10)
# How long opening a request (or its Claim button) reserves it for the approver (seconds).
APPROVAL_CLAIM_SECONDS = env_int("APPROVAL_CLAIM_SECONDS", 300)

# --- Tools --------------------------------------------------------------------
TOOLS_THROW_ON_ERROR = env_bool("TOOLS_THROW_ON_ERROR", False)
# Exception classes (dotted paths) that always propagate to the caller instead of becoming a failure result.
TOOLS_PROPAGATE_EXCEPTIONS = env_list("TOOLS_PROPAGATE_EXCEPTIONS", [])
TOOLS_MAX_ARGUMENT_BYTES = env_int("TOOLS_MAX_ARGUMENT_BYTES", 16 * 1024)
# Largest policy bundle file accepted, in bytes (docs/policy.md); larger files are refused unread.
POLICY_BUNDLE_MAX_BYTES = env_int("POLICY_BUNDLE_MAX_BYTES", 256 * 1024)
TOOLS_RESULT_MAX_ITEMS = 20
# Owner and version recorded for a tool in code that declares none, so every tool has someone
# answering for it and every audit row names a version.
TOOLS_DEFAULT_OWNER = env_str("TOOLS_DEFAULT_OWNER", "Platform team <platform-team@example.com>")
TOOLS_DEFAULT_VERSION = "1.0.0"
TOOLS_RESULT_MAX_BYTES = 32 * 1024
TOOLS_IDEMPOTENCY_LEASE_SECONDS = env_int("TOOLS_IDEMPOTENCY_LEASE_SECONDS", 120)
TOOLS_IDEMPOTENCY_RETENTION_HOURS = max(72, env_int("TOOLS_IDEMPOTENCY_RETENTION_HOURS", 72))
CONFIRMATION_DEFAULT_TTL_SECONDS = env_int("CONFIRMATION_DEFAULT_TTL_SECONDS", 900)

# MCP servers as tool sources (docs/remote_tools.md)
MCP_DEFAULT_TIMEOUT_SECONDS = env_float("MCP_DEFAULT_TIMEOUT_SECONDS", 30.0)
MCP_TOOL_LIST_TTL_SECONDS = env_int("MCP_TOOL_LIST_TTL_SECONDS", 300)
MCP_BREAKER_FAILURES = env_int("MCP_BREAKER_FAILURES", 3)
MCP_BREAKER_RESET_SECONDS = env_int("MCP_BREAKER_RESET_SECONDS", 60)
# Tool search: above this many offered tools the model gets `tool_search`.
TOOL_SEARCH_THRESHOLD = env_int("TOOL_SEARCH_THRESHOLD", 20)
TOOL_SEARCH_RESULTS = env_int("TOOL_SEARCH_RESULTS", 5)

# --- The MCP server at /mcp/ (docs/mcp.md) ------------------------------------
# A gated call repeated over MCP with the same tool, arguments and API key within this many seconds
# is the same call: "still pending", then the one execution, then its stored result (or the
# rejection, expiry or withdrawal) replayed. After the window the same call is a new proposal.
MCP_RETRY_WINDOW_SECONDS = env_int("MCP_RETRY_WINDOW_SECONDS", 24 * 3600)
# Largest body accepted on /mcp/, in bytes; a larger one is refused (413) before it is parsed.
MCP_MAX_BODY_BYTES = env_int("MCP_MAX_BODY_BYTES", 256 * 1024)
# A client that declared the elicitation capability is asked to confirm the requester's own HIGH
# calls with a form; False: the requester confirms on the request's page only.
MCP_CONFIRM_BY_ELICITATION = env_bool("MCP_CONFIRM_BY_ELICITATION", True)
# --- The MCP server's transport (agentplatform.mcp_server: sessions, elicitation, list changes) ---
# Open MCP sessions per worker process; a client opening one more is answered 503 until one ends.
MCP_MAX_SESSIONS = env_int("MCP_MAX_SESSIONS", 1000)
# A session with no request in flight for this many seconds is closed (the client opens a new one).
MCP_SESSION_IDLE_SECONDS = env_int("MCP_SESSION_IDLE_SECONDS", 1800)
# How long an elicitation form for the requester's confirmation may stay open, in seconds; after it
# the call answers "pending" (the requester still decides on the request's page).
MCP_ELICITATION_TIMEOUT_SECONDS = env_float("MCP_ELICITATION_TIMEOUT_SECONDS", 300.0)
# Every this many seconds each open session re-lists the tools offered to its key's user and sends
# notifications/tools/list_changed when the list changed (a tool disabled in the admin).
MCP_LIST_CHANGED_POLL_SECONDS = env_float("MCP_LIST_CHANGED_POLL_SECONDS", 10.0)
# MCP Tasks (2025-11-25 clients): tasks/result re-reads the call's state every MCP_TASK_POLL_SECONDS
# (also the poll interval suggested to clients) for at most MCP_TASK_RESULT_WAIT_SECONDS, then
# answers the call's pending result.
MCP_TASK_POLL_SECONDS = env_float("MCP_TASK_POLL_SECONDS", 1.0)
MCP_TASK_RESULT_WAIT_SECONDS = env_float("MCP_TASK_RESULT_WAIT_SECONDS", 30.0)

# --- Tracing (OpenTelemetry; agentplatform/ops/tracing.py, docs/observability.md) ---------------
# Tracing itself is configured only by the standard OTEL_* variables (OTEL_TRACES_EXPORTER, ...),
# read by agentplatform.ops.tracing, and is off without them. This adds the *masked* arguments and
# results of governed calls to their execute_tool spans (never the raw ones); the GenAI conventions'
# own switch OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (true, span_only, span_and_event) turns it on too.
TRACING_CAPTURE_MASKED_CONTENT = env_bool(
    "TRACING_CAPTURE_MASKED_CONTENT",
    env_str("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT").strip().lower() in ("true", "1", "span_only",
                                                                                      "span_and_event"))
