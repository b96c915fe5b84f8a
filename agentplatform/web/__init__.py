"""Pages for people: the chat UI, sign-in/out wiring and the home redirect (not an app: no models)."""
