"""Drop-in adapters that make jsonl_sessions the history backend of agent frameworks.

- :mod:`jsonl_sessions.integrations.openai_agents`: ``JsonlSession``, a ``Session`` for the
  OpenAI Agents SDK (``pip install 'jsonl-sessions[openai-agents]'``).
- :mod:`jsonl_sessions.integrations.langchain`: ``JsonlChatMessageHistory``, a LangChain
  ``BaseChatMessageHistory`` (``pip install 'jsonl-sessions[langchain]'``).
- :mod:`jsonl_sessions.integrations.claude_agent_sdk`: ``JsonlSessionStore``, a Claude Agent
  SDK ``SessionStore`` (``pip install 'jsonl-sessions[claude-agent-sdk]'``).
- :mod:`jsonl_sessions.integrations.langgraph`: ``JsonlCheckpointSaver``, a LangGraph
  ``BaseCheckpointSaver`` (``pip install 'jsonl-sessions[langgraph]'``).
- :mod:`jsonl_sessions.integrations.google_adk`: ``JsonlSessionService``, a Google ADK
  ``BaseSessionService`` (``pip install 'jsonl-sessions[google-adk]'``).
- :mod:`jsonl_sessions.integrations.llama_index`: ``JsonlChatStore``, a llama-index
  ``BaseChatStore`` (``pip install 'jsonl-sessions[llama-index]'``).
- :mod:`jsonl_sessions.integrations.agent_framework`: ``JsonlHistoryProvider``, a Microsoft
  Agent Framework ``HistoryProvider`` (``pip install 'jsonl-sessions[agent-framework]'``).

None is imported by ``import jsonl_sessions`` or by this package: each adapter imports
its framework when it is imported itself, and raises one ImportError naming the extra to
install when the framework is missing. docs/integrations.md describes how items,
messages, transcript entries, checkpoints and events map to transcript lines.
"""
