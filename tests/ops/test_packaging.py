"""Packaging, what can be checked without a container engine: the requirements
split, and that the Dockerfile and compose.yaml run the commands the Makefile runs."""
from __future__ import annotations

import re
from pathlib import Path

import yaml
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "-r")):
            assert "==" in line, f"{name}: not pinned: {line}"
            package, version = line.split("==")
            pins[package.lower().replace("_", "-")] = version
    return pins


def _makefile_recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, target
    return match.group(1)


def test_requirements_are_split_and_pinned():
    runtime, dev = _pins("requirements.txt"), _pins("requirements-dev.txt")
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text()
    assert not set(runtime) & set(dev)
    for package in ("django", "gunicorn", "uvicorn", "uvicorn-worker", "whitenoise", "prometheus-client",
                    "python-json-logger", "psycopg-pool", "celery"):
        assert package in runtime, package
    for package in ("pytest", "pytest-django", "schemathesis", "playwright"):
        assert package in dev and package not in runtime, package
    # make demo installs the runtime set only; make test both
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: \$\(STAMP\)", text, re.M) and re.search(r"^test: \$\(DEV_STAMP\)", text, re.M)
    assert "pip install -q -r requirements-dev.txt" in text


def test_compose_services_run_the_makefiles_commands():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert {"web", "worker", "beat", "db", "redis", "migrate"} <= set(services)

    def program(recipe: str) -> list[str]:
        """The command of a recipe's last line, without $(BIN)/ and the make-only options."""
        line = recipe.strip().splitlines()[-1].strip()
        words = line.replace("$(BIN)/", "").split()
        return [w for w in words if "$(" not in w]

    serve, worker, beat = program(_makefile_recipe("serve")), program(_makefile_recipe("worker")), \
        program(_makefile_recipe("beat"))
    assert services["web"]["command"][:len(serve)] == serve
    assert services["worker"]["command"][:5] == worker[:5]  # celery -A agentplatform worker -l
    assert services["beat"]["command"][:5] == beat[:5]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^CMD \["gunicorn", "agentplatform.asgi:application", "--config", "gunicorn.conf.py"\]',
                     dockerfile, re.M)
    assert re.search(r"^USER (?!root)\w+", dockerfile, re.M)  # non-root
    assert "pip install -r requirements.txt" in dockerfile and "requirements-dev" not in dockerfile
    # the migrate service runs commands that exist
    command = services["migrate"]["command"][-1]
    assert "manage.py migrate" in command and "manage.py seed_demo" in command


def test_seed_demo_command_is_idempotent(db, capsys):
    from agentplatform.tenancy.models import Tenant

    call_command("seed_demo")
    count = Tenant.objects.count()
    call_command("seed_demo")
    assert Tenant.objects.count() == count >= 2
    assert "seeded tenants" in capsys.readouterr().out
