"""ctxd's built-in store plugins, registered like any third-party plugin."""
