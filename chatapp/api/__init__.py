"""OpenAI-compatible HTTP API (/v1): key auth, request validation, SSE streaming over the generation rows."""
