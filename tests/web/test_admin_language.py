"""The admin follows the administrator's language; the product pages and the API do not change.
Every text of ours in the Chinese catalog is translated, and the committed .mo is the compiled .po."""
from __future__ import annotations

import gettext
import re
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db

LOCALE = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES"


def _po_entries() -> list[tuple[str, str]]:
    """(msgctxt, msgid) of every entry of django.po but the header."""
    text = (LOCALE / "django.po").read_text(encoding="utf-8")
    entries = []
    for block in text.split("\n\n"):
        context = re.search(r'^msgctxt "(.*)"', block, re.M)
        found = re.search(r'^msgid ((?:".*"\n?)+)', block, re.M)
        if not found:
            continue
        msgid = "".join(re.findall(r'"(.*)"', found.group(1))).encode().decode("unicode_escape").encode(
            "latin-1").decode("utf-8")
        if msgid:
            entries.append((context.group(1) if context else "", msgid))
    return entries


def test_every_text_of_the_chinese_catalog_is_translated_in_the_committed_mo():
    with open(LOCALE / "django.mo", "rb") as compiled:
        catalog = gettext.GNUTranslations(compiled)
    entries = _po_entries()

    assert len(entries) > 150
    for context, msgid in entries:
        translated = catalog.pgettext(context, msgid) if context else catalog.gettext(msgid)
        assert translated != msgid or msgid in ("REST API", "URL"), msgid
        assert sorted(re.findall(r"%\(\w+\)[sd]", translated)) == sorted(re.findall(r"%\(\w+\)[sd]", msgid)), msgid


def test_the_admin_speaks_the_browsers_language_and_the_switch_wins(client, acme_admin):
    client.force_login(acme_admin)

    chinese = client.get("/admin/", HTTP_ACCEPT_LANGUAGE="zh-Hans,zh;q=0.9")
    english = client.get("/admin/", HTTP_ACCEPT_LANGUAGE="en")

    assert "agentplatform 管理后台" in chinese.content.decode() and "欢迎" in chinese.content.decode()
    assert chinese["Content-Language"] == "zh-hans" and "Accept-Language" in chinese["Vary"]
    assert "agentplatform administration" in english.content.decode()
    client.post("/i18n/setlang/", {"language": "en", "next": "/admin/"})
    assert "agentplatform administration" in client.get("/admin/", HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()


def test_product_pages_keep_their_language(client, requester):
    page = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="zh-Hans")

    assert page.status_code == 200
    assert page.get("Content-Language", "en").startswith("en")
    client.force_login(requester)
    chat = client.get("/chat/", HTTP_ACCEPT_LANGUAGE="zh-Hans")
    assert chat.status_code == 200 and not chat.get("Content-Language", "en").startswith("zh")
