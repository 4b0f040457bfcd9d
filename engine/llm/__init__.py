"""The LLM stages' client: any OpenAI-compatible chat-completions endpoint (vLLM, Ollama,
llama.cpp's server, a hosted API), many prompts at once, with a persistent response cache.

    client.py   LLMClient: bounded concurrency, retries with backoff, usage and cost per stage
    cache.py    the SQLite response cache (a re-run or an interrupted run pays for nothing twice)
    prompts.py  the prompts, after the SpectRAG and SA-RAG papers
    parse.py    reading what the model wrote (malformed output counted, never raised)
    tasks.py    utility questions, OpenIE records, HyDE passages

Needs the optional ``openai`` package (``pip install 'spectrag[llm]'``), imported on first use.
"""

from spectrag.llm.client import LLMClient, StageUsage, make_client

__all__ = ["LLMClient", "StageUsage", "make_client"]
