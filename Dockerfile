# The production image: slim Python, the runtime requirements only, a non-root user, gunicorn with
# uvicorn workers (gunicorn.conf.py). compose.yaml runs the same image as web, worker and beat.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WEB_BIND=0.0.0.0:8000 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus

WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .
# Static files collected into the image; whitenoise serves them (no separate web server).
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput -v0 \
    && useradd --create-home --uid 10001 app \
    && mkdir -p /tmp/prometheus \
    && chown -R app /app /tmp/prometheus
USER app

EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["gunicorn", "agentplatform.asgi:application", "--config", "gunicorn.conf.py"]
