"""All masking in one place: `text` for free text (cards, ids, phones, e-mail, tokens,
secrets), `fields` for values under a telling key, `endpoints` for URLs and command
lines."""
