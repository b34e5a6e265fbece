"""ctxd: a gRPC sidecar giving LLM agent runtimes a durable, self-compacting working memory."""

__version__ = "0.1.0"
