"""The system prompt: the template (:mod:`.template`, checked at start-up
by the configuration, so it imports nothing of the domain) and its assembly
for a context (:mod:`.assemble`)."""
