"""Card data cut in half before it is masked: a conversation's title is the first 60 characters
of the first message, and cutting first left the first digits of a card number (or an expiry cut
to "12/2") too short to be recognised, so they were stored and shown as the title."""
from __future__ import annotations

from agentplatform.runtime import services
from agentplatform.runtime.models import Conversation
from tests.tools.support import model  # noqa: F401 - fixture


def _title(requester, message, *, later=False) -> str:
    if later:
        run = services.chat_start(user=requester, message=message)
        return Conversation.objects.get(pk=run.conversation_id).title
    outcome = services.chat_send(user=requester, message=message)
    return Conversation.objects.get(pk=outcome.run.conversation_id).title


def test_a_title_never_keeps_the_first_digits_of_a_card(requester):
    for later in (False, True):
        message = "please refund the order to my card, its number is: " + "4111 1111 1111 1111 thanks"
        assert message[:60].endswith(" 4111 1111")
        title = _title(requester, message, later=later)
        assert "4111 1111" not in title and "41111111" not in title, title


def test_an_expiry_sent_in_the_next_message_after_a_card_is_masked(requester, model):
    from agentplatform.runtime.models import Message

    model.says("ok")
    model.says("ok")
    first = services.chat_send(user=requester, message="I paid with my card 4111 1111 1111 1111")
    services.chat_send(user=requester, message="exp 12/29, the order is A202607290001",
                       conversation_id=first.run.conversation_id)
    users = list(Message.objects.filter(conversation_id=first.run.conversation_id, role="user")
                 .order_by("created_at").values_list("content", flat=True))
    assert users[-1] == "exp **/**, the order is A202607290001", users
    sent = str(model.messages(1))
    assert "12/29" not in sent


def test_a_date_in_the_next_message_without_a_card_stays_readable(requester, model):
    from agentplatform.runtime.models import Message

    model.says("ok")
    model.says("ok")
    first = services.chat_send(user=requester, message="where is order A202607290001?")
    services.chat_send(user=requester, message="it should arrive by 12/29, code 123",
                       conversation_id=first.run.conversation_id)
    last = Message.objects.filter(conversation_id=first.run.conversation_id, role="user").order_by("created_at").last()
    assert last.content == "it should arrive by 12/29, code 123"
