"""Drop-in adapters that make jsonl_sessions the history backend of agent frameworks.

- :mod:`jsonl_sessions.integrations.openai_agents`: ``JsonlSession``, a ``Session`` for the
  OpenAI Agents SDK (``pip install 'jsonl-sessions[openai-agents]'``).
- :mod:`jsonl_sessions.integrations.langchain`: ``JsonlChatMessageHistory``, a LangChain
  ``BaseChatMessageHistory`` (``pip install 'jsonl-sessions[langchain]'``).
- :mod:`jsonl_sessions.integrations.claude_agent_sdk`: ``JsonlSessionStore``, a Claude Agent
  SDK ``SessionStore`` (``pip install 'jsonl-sessions[claude-agent-sdk]'``).

None is imported by ``import jsonl_sessions`` or by this package: each adapter imports
its framework when it is imported itself, and raises one ImportError naming the extra to
install when the framework is missing. docs/integrations.md describes how items,
messages and transcript entries map to transcript lines.
"""
